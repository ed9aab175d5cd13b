"""The Python API the add-on and the command line use: open an engine, prepare a setup once,
then take frames one by one (live preview) or all at once (bake).

    eng = open_engine("neurok")                # or "reference"; model=None -> bundled checkpoint
    run = eng.prepare(setup)                   # encodes the mesh once
    for t, x in run.frames(): ...              # frame 0 is the initial state
    xs = run.bake(progress=cb, cancel=event)   # [T, N, 3] float32

`progress(done, total)` is called after each frame; `cancel` is a `threading.Event`; a cancelled
run raises `Cancelled`. Nothing here touches bpy, so a worker thread may call all of it.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .formats import NeurokError
from .scene import Setup

ASSETS = Path(__file__).resolve().parent.parent / "assets"
DEFAULT_MODEL_NAME = "neurok_default.ckpt"


class Cancelled(NeurokError):
    """The user cancelled a run."""


class SimulationFault(NeurokError):
    """A run that could not continue; `positions` holds the good frames before `frame`."""

    def __init__(self, message: str, frame: int, positions: np.ndarray):
        super().__init__(message)
        self.frame = frame
        self.positions = positions


def default_model_path() -> Path:
    for candidate in (ASSETS / DEFAULT_MODEL_NAME, Path(__file__).resolve().parent / "assets" / DEFAULT_MODEL_NAME):
        if candidate.is_file():
            return candidate
    raise NeurokError(f"the bundled model '{DEFAULT_MODEL_NAME}' is missing; pass --model or run 'make train'")


def pick_device(device: str = "auto") -> str:
    import torch
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise NeurokError("CUDA was asked for but no CUDA device is available")
    return device


class Run:
    """One prepared simulation. Subclasses implement `_iter_frames()`."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.encode_seconds = 0.0
        self.ood: dict | None = None

    def _iter_frames(self):
        raise NotImplementedError

    def frames(self, cancel=None):
        for t, x in enumerate(self._iter_frames()):
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"cancelled at frame {t}")
            yield t, np.asarray(x, dtype=np.float32)

    def bake(self, progress=None, cancel=None) -> np.ndarray:
        total = self.setup.frames
        out = np.empty((total, self.setup.num_vertices, 3), dtype=np.float32)
        done = 0
        try:
            for t, x in self.frames(cancel):
                out[t] = x
                done = t + 1
                if progress is not None:
                    progress(done, total)
        except SimulationFault as fault:
            fault.positions = out[:done].copy()
            raise
        return out


class ReferenceRun(Run):
    def __init__(self, setup: Setup):
        super().__init__(setup)
        from .reference import ReferenceSimulator
        t0 = time.perf_counter()
        self.sim = ReferenceSimulator(setup)
        self.encode_seconds = time.perf_counter() - t0

    def _iter_frames(self):
        return self.sim.iter_frames()


class Engine:
    name = "engine"

    def prepare(self, setup: Setup) -> Run:
        raise NotImplementedError


class ReferenceEngine(Engine):
    """The full-space FEM / cloth simulator: exact and slow."""
    name = "reference"

    def prepare(self, setup: Setup) -> Run:
        return ReferenceRun(setup)


def open_engine(engine: str = "neurok", model=None, device: str = "auto") -> Engine:
    if engine == "reference":
        return ReferenceEngine()
    if engine == "neurok":
        from .runtime import NeurokEngine
        return NeurokEngine(model or default_model_path(), device=pick_device(device))
    raise NeurokError(f"unknown engine '{engine}' (neurok or reference)")


def simulate(setup: Setup, engine: str = "neurok", model=None, device: str = "auto", progress=None, cancel=None) -> np.ndarray:
    """Run a setup to the end and return all frames [T, N, 3]."""
    return open_engine(engine, model, device).prepare(setup).bake(progress=progress, cancel=cancel)
