"""Per-object specialisation: simulate the user's own mesh with the reference simulator under
random scenes for part of the budget, then fine-tune the model on those sequences.

`neurok specialize --mesh M --minutes N --out CKPT` (and the add-on's `neurok.specialize`).
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from ..core.errors import Cancelled
from ..learned.checkpoint import default_model_path
from ..core.formats import Mesh, NeurokError, write_sequence
from .generate import simulate_random_scene
from ..core.progress import ProgressBar
from ..core.geometry import is_closed
from .train import train

SIMULATION_SHARE = 0.4      # of the budget spent making data; the rest fine-tunes
FRAMES = 32


def specialize(mesh: Mesh, minutes: float = 5.0, out="specialized.ckpt", model=None, kind=None, seed=0,
               progress=None, cancel=None, quiet=False) -> Path:
    """Fine-tune `model` (default: the bundled one) for `mesh`; returns the new checkpoint path.
    `progress(fraction, message)`; `cancel` (threading.Event) stops and raises Cancelled."""
    if len(mesh.vertices) < 4 or len(mesh.faces) == 0:
        raise NeurokError("specialize needs a mesh with faces")
    kind = kind or ("solid" if is_closed(mesh.faces) else "cloth")
    model = model or default_model_path()
    budget = minutes * 60.0
    work = Path(tempfile.mkdtemp(prefix="neurok_specialize_"))
    try:
        started = time.perf_counter()
        count = _simulate(mesh, kind, work, budget * SIMULATION_SHARE, seed, progress, cancel, quiet)
        if count < 2:
            raise NeurokError(f"specialize: only {count} sequence(s) could be simulated in the time given; allow more minutes")

        def on_progress(fraction):
            if progress:
                progress(SIMULATION_SHARE + (1 - SIMULATION_SHARE) * fraction, "fine-tuning")

        remaining = max(budget - (time.perf_counter() - started), 10.0)
        train(work, out, init=model, minutes=remaining / 60.0, seed=seed, quiet=quiet, progress=on_progress, cancel=cancel)
        if cancel is not None and cancel.is_set():
            raise Cancelled("specialisation cancelled")
        Path(str(out) + ".resume").unlink(missing_ok=True)
        return Path(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _simulate(mesh, kind, work, seconds, seed, progress, cancel, quiet):
    """Reference sequences of this mesh until the time share is spent; returns how many."""
    started = time.perf_counter()
    entries = []
    bar = None if quiet else ProgressBar(int(seconds), "specialize: simulating")
    i = 0
    while time.perf_counter() - started < seconds:
        if cancel is not None and cancel.is_set():
            raise Cancelled("specialisation cancelled")
        rng = np.random.default_rng([seed, 7919, i])
        scenario, setup, positions = simulate_random_scene(rng, mesh, kind, FRAMES, 1.0 / 24.0)
        name = f"seq_{i:05d}.npz"
        split = "validation" if i % 8 == 7 else "train"
        write_sequence(work / name, setup.to_sequence(positions, {"source": "neurok specialize", "scenario": scenario, "split": split}))
        entries.append({"file": name, "split": split, "family": "user", "scenario": scenario, "kind": kind})
        i += 1
        elapsed = time.perf_counter() - started
        if bar:
            bar.update(done=int(min(elapsed, seconds)), postfix=f"{i} sequences")
        if progress:
            progress(SIMULATION_SHARE * min(1.0, elapsed / seconds), f"simulating ({i} sequences)")
    if bar:
        bar.close()
    (work / "index.json").write_text(json.dumps({"format": "neurok.dataset/1", "sequences": entries}))
    return sum(e["split"] == "train" for e in entries)
