"""The one facade the add-on and the command line use: open an engine, prepare a setup once,
then take frames one by one (live preview) or all at once (bake); sample a pose, solve IK,
specialise a model for one mesh, learn a material from a recorded bake, and read the
out-of-distribution report.

    eng = open_engine("neurok")                # or "reference"; model=None -> bundled checkpoint
    run = eng.prepare(setup)                   # encodes the mesh once; run.ood says how familiar it is
    for t, x in run.frames(): ...              # frame 0 is the initial state
    xs = run.bake(progress=cb, cancel=event)   # [T, N, 3] float32
    pose = eng.sample_pose(setup, seed=3)      # learned engine only
    pose = eng.solve_ik(setup, handles, targets)
    together = prepare_together([setup_a, setup_b])    # several objects that collide with each other
    xs_a, xs_b = together.bake(progress=cb)

`progress(done, total)` is called after each frame; `cancel` is a `threading.Event`; a cancelled
run raises `Cancelled`. Nothing here touches bpy, so a worker thread may call all of it.
"""
from __future__ import annotations

import numpy as np

from .core.coupling import Together, link
from .core.errors import Cancelled, FormatError, NeurokError, SimulationFault
from .core.formats import Mesh, read_mesh, read_sequence, write_pc2, write_sequence
from .core.run import Engine, Run
from .core.scene import (read_scene, register_learned_presets, register_preset_loader, setup_from_arrays,
                         setup_from_scene, setup_from_sequence)
from .core.setup import Setup
from .learned.checkpoint import default_model_path, read_payload, read_presets
from .learned.runtime import NeurokEngine, NeurokRun
from .reference.engine import ReferenceEngine, ReferenceRun
from .training.importers import blender_cloth_gravity, blender_cloth_material, sequence_from_point_cache
from .training.specialize import specialize

__all__ = ["Cancelled", "Engine", "FormatError", "Mesh", "NeurokEngine", "NeurokError", "NeurokRun",
           "ReferenceEngine", "ReferenceRun", "Run", "Setup", "SimulationFault", "default_model_path",
           "open_engine", "pick_device", "prepare_together", "read_mesh", "read_scene", "read_sequence", "setup_from_arrays", "setup_from_scene",
           "setup_from_sequence", "simulate", "simulate_together", "specialize", "learn_material", "learned_presets",
           "sequence_from_point_cache", "blender_cloth_material", "blender_cloth_gravity", "MIN_BAKE_FRAMES", "Together", "write_pc2", "write_sequence"]

ENGINES = ("neurok", "reference")


def pick_device(device: str = "auto") -> str:
    import torch
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise NeurokError("CUDA was asked for but no CUDA device is available")
    return device


def open_engine(engine: str = "neurok", model=None, device: str = "auto", lattice_cells: int | None = None) -> Engine:
    """`lattice_cells`: the reference's quadratic cells along a solid's longest side (its default
    6; the evaluation's ground truth 12, where its paths stop changing: docs/MODEL_CARD.md)."""
    if lattice_cells is not None and engine != "reference":
        raise NeurokError("a lattice resolution is the reference simulator's setting (--engine reference)")
    if engine == "reference":
        return ReferenceEngine(**({} if lattice_cells is None else {"lattice_cells": int(lattice_cells)}))
    if engine == "neurok":
        return NeurokEngine(model or default_model_path(), device=pick_device(device))
    raise NeurokError(f"unknown engine '{engine}' (neurok or reference)")


def simulate(setup: Setup, engine: str = "neurok", model=None, device: str = "auto", progress=None, cancel=None) -> np.ndarray:
    """Run a setup to the end and return all frames [T, N, 3]."""
    return open_engine(engine, model, device).prepare(setup).bake(progress=progress, cancel=cancel)


def prepare_together(setups, engine: str = "neurok", model=None, device: str = "auto", names=None,
                     thickness=None, friction=None) -> Together:
    """Prepare several objects (setups in one space, same frames and step) that collide with each
    other: each one's setup gains the others as moving colliders (engine/core/coupling.py).
    `engine` is a name or an opened `Engine`; `thickness` / `friction`: the contact shell around
    each object (one number or one per object)."""
    kw = {k: v for k, v in (("thickness", thickness), ("friction", friction)) if v is not None}
    carriers = link(setups, names, **kw)
    eng = engine if isinstance(engine, Engine) else open_engine(engine, model, device)
    return Together([eng.prepare(s) for s in setups], carriers)


def simulate_together(setups, engine: str = "neurok", model=None, device: str = "auto", progress=None,
                      cancel=None, names=None) -> list[np.ndarray]:
    """Run several colliding objects to the end: one [T, N_i, 3] array per object."""
    return prepare_together(setups, engine, model, device, names).bake(progress=progress, cancel=cancel)


MIN_BAKE_FRAMES = 8     # a recording shorter than this says too little about a material


def learned_presets(model=None) -> dict:
    """The learned materials a checkpoint carries (the bundled one if None): name -> the
    material (SI numbers) they refine. Also makes them nameable in scenes."""
    table = read_presets(read_payload(model or default_model_path()))
    register_learned_presets(table)
    return table


# a scene may name a material learned into the bundled checkpoint before any model is opened
register_preset_loader(learned_presets)


def learn_material(sequences, name: str, minutes: float, out, model=None, progress=None, cancel=None) -> dict:
    """Learn (or refine) the material `name` from recorded sequences (a folder, or a list of
    `Sequence`s) starting from checkpoint `model` (the bundled one if None), and write the result,
    which keeps everything else of that model, to `out`. `progress(fraction)` after each training
    step; setting `cancel` stops early (what was learned so far is written). Returns what was
    learned, as multipliers of the recorded material (`training.train.material_summary`)."""
    import tempfile
    from pathlib import Path
    from .training.train import material_summary, train
    if not isinstance(sequences, (str, Path)):
        sequences = list(sequences)
        short = [len(s.positions) for s in sequences if len(s.positions) < MIN_BAKE_FRAMES]
        if not sequences or short:
            raise NeurokError(f"a material needs at least {MIN_BAKE_FRAMES} recorded frames; "
                              f"this recording has {min(short) if short else 0}")
        folder = Path(tempfile.mkdtemp(prefix="neurok_learn_"))
        for i, seq in enumerate(sequences):
            write_sequence(folder / f"seq_{i:05d}.npz", seq)
        sequences = folder
    trained, _ = train(sequences, out, init=model, minutes=minutes, quiet=True, material=name,
                       progress=progress, cancel=cancel)
    learned_presets(out)
    return material_summary(trained, name)
