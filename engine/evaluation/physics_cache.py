"""The physics the evaluation measures against, computed once and ahead: the reference's ground
truth, the physics-exact oracle (`oracle.py`) and the resolution noise floor (`noise.py`) of each
setup, and the model's energy drift (`energy.py`).

None of them is timed and none depends on another, and they are most of the evaluation's work
(minutes per solid on a converged lattice). So the suite lists them first as `Job`s, runs the missing ones
on one process per core, longest first (`PhysicsCache.prefetch`), and the steps that compare
the model then read them (`PhysicsCache.get`, which computes a job itself when it is missing).
Each answer is kept on disk under a key of everything that decides it: the job's kind and
options, the mesh and scene (or the sequence file's bytes) and the source code that decides that
kind of run (`PHYSICS_CODE`: a reference run's is the core and the reference; the oracle's adds
its own file and the subspace's weights); an energy drift under the checkpoint's bytes and all
of engine/. A run after a change to the model reuses all but the drift; a change to the physics
code computes again the runs it decides. Delete the folder to start over.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.formats import Mesh, read_sequence
from ..core.progress import ProgressBar
from ..core.scene import setup_from_scene, setup_from_sequence

ENGINE = Path(__file__).resolve().parent.parent
# the code that decides each kind of run besides the job itself (a change to the oracle keeps the reference's runs)
PHYSICS_CODE = {
    "reference": ("core", "reference"),
    "oracle": ("core", "reference", "learned/subspace.py", "evaluation/oracle.py", "evaluation/rollout.py"),
    "noise_floor": ("core", "reference", "evaluation/noise.py", "evaluation/noise_floor.py", "evaluation/rollout.py"),
    "drift": ("",),   # a model's energy drift: all of engine/
}


class PhysicsRunFailed(RuntimeError):
    """The reference (or the oracle) gave up on a job; the text says why."""


@dataclass(frozen=True)
class Job:
    """One physics run. `kind`: "reference" (frames [T, N, 3]), "oracle" ((frames, fault frame,
    error text, ms per frame, handles)), "noise_floor" (the `noise.noise_floor_for` dict) or
    "drift" (the model's energy drift on one mesh with one integrator, `energy.mesh_drift`).
    `source`: ("scene", Mesh, scene dict), ("sequence", path) or, for "drift", ("model", path).
    `options`: the reference's settings (lattice_cells, substep), the oracle's `handles`, the
    noise floor's `frames`, `mesh_drift`'s arguments."""
    kind: str
    source: tuple
    options: dict = field(default_factory=dict)

    def setup(self):
        if self.source[0] == "sequence":
            return setup_from_sequence(read_sequence(self.source[1]))
        _, mesh, scene = self.source
        return setup_from_scene(mesh, scene)

    def cost(self) -> float:
        """Rough seconds on this project's 2-core machine, to start the longest first: frames x
        lattice cells^3 / 200 (the soft toy at 12 cells: 36 frames, 289 s), 9x that for a noise
        floor (a run at twice the cells beside it); 35 ms a step for an energy drift."""
        if self.kind == "drift":
            return 0.035 * self.options.get("steps", 1000)
        if self.source[0] == "sequence":
            frames, cells = 60, 4
        else:
            frames, cells = self.source[2].get("frames", 48), self.options.get("lattice_cells", 4)
        frames = self.options.get("frames") or frames
        return frames * cells ** 3 / 200.0 * (9.0 if self.kind == "noise_floor" else 1.0)


_code_versions = {}


def code_version(parts) -> str:
    """Hash of the source files under `parts` (folders and files of engine/)."""
    key = tuple(parts)
    if key not in _code_versions:
        h = hashlib.sha1()
        for name in parts:
            path = ENGINE / name
            for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
                h.update(str(f.relative_to(ENGINE)).encode())
                h.update(f.read_bytes())
        _code_versions[key] = h.hexdigest()
    return _code_versions[key]


def job_key(job: Job) -> str:
    """The job's file name in the cache: its kind, options and source and the code that runs it
    (`PHYSICS_CODE`)."""
    h = hashlib.sha1()
    code = code_version(PHYSICS_CODE[job.kind])
    h.update(json.dumps([job.kind, job.options, code], sort_keys=True, default=str).encode())
    if job.source[0] in ("sequence", "model"):
        h.update(Path(job.source[1]).read_bytes())
    else:
        _, mesh, scene = job.source
        h.update(np.ascontiguousarray(mesh.vertices, np.float64).tobytes())
        h.update(np.ascontiguousarray(mesh.faces, np.int64).tobytes())
        h.update(json.dumps(scene, sort_keys=True).encode())
    return f"{job.kind}_{h.hexdigest()[:20]}"


def compute(job: Job):
    """Run one job here and now; a run the physics gives up on returns PhysicsRunFailed."""
    from ..api import SimulationFault
    from ..reference.simulator import ReferenceSimulator
    from .rollout import predict
    from .noise import noise_floor_for
    from .oracle import OracleEngine
    options = dict(job.options)
    if job.kind == "drift":
        from ..learned.checkpoint import load_checkpoint
        from .energy import mesh_drift
        return mesh_drift(load_checkpoint(job.source[1])[0], **options)
    setup = job.setup()
    try:
        if job.kind == "reference":
            sim = ReferenceSimulator(setup, **options)
            return np.stack(list(sim.iter_frames())).astype(np.float32)
        if job.kind == "oracle":
            engine = OracleEngine(options.pop("handles", None), **options)
            return (*predict(engine, setup), engine.last_handles)
        if job.kind == "noise_floor":
            return noise_floor_for(setup, **options)
    except (SimulationFault, ValueError, RuntimeError, AssertionError) as e:
        return PhysicsRunFailed(f"{type(e).__name__}: {str(e)[:160]}")
    raise ValueError(f"unknown physics job kind '{job.kind}'")


def _checked(answer):
    """The answer, or its PhysicsRunFailed raised."""
    if isinstance(answer, PhysicsRunFailed):
        raise answer
    return answer


def compute_now(job: Job):
    """A job's answer computed here and kept nowhere (raises PhysicsRunFailed as `PhysicsCache.get` does)."""
    return _checked(compute(job))


def _single_threaded_worker():
    """One thread per worker process: two workers on two cores, each with two threads, only
    wait for each other."""
    import torch
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
    except ImportError:
        pass


class PhysicsCache:
    """Physics answers kept as `folder/<key>.pkl` (`job_key`)."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, job: Job) -> Path:
        return self.folder / f"{job_key(job)}.pkl"

    def has(self, job: Job) -> bool:
        return self.path(job).is_file()

    def _store(self, job: Job, answer):
        path = self.path(job)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, path)

    def _load(self, job: Job):
        return pickle.loads(self.path(job).read_bytes())

    def get(self, job: Job):
        """The job's answer (from the folder, else computed here and kept); raises
        PhysicsRunFailed when the physics gave up on it."""
        answer = self._load(job) if self.has(job) else None
        if answer is None:
            answer = compute(job)
            self._store(job, answer)
        return _checked(answer)

    def prefetch(self, jobs, workers=None, quiet=False, also=()) -> dict:
        """Compute the jobs not yet kept, on `workers` processes (default: one per core),
        longest first; `also`: (label, function, args) to run on the same processes first (a
        baseline's training; their answers are dropped). Returns {"jobs", "computed", "seconds"}."""
        unique = {job_key(j): j for j in jobs}
        todo = sorted((j for k, j in unique.items() if not (self.folder / f"{k}.pkl").is_file()),
                      key=lambda j: -j.cost())
        tasks = [(label, fn, args) for label, fn, args in also] + [
            (j.kind, _compute_and_store, (str(self.folder), j)) for j in todo]
        t0 = time.perf_counter()
        workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
        bar = None if quiet or not tasks else ProgressBar(len(tasks), f"physics ({len(todo)} runs, {workers} processes)")
        if workers > 1:
            with ProcessPoolExecutor(max_workers=workers, initializer=_single_threaded_worker) as pool:
                running = {pool.submit(fn, *args): label for label, fn, args in tasks}
                for done in as_completed(running):
                    done.result()
                    if bar:
                        bar.update(1, postfix=running[done])
        else:
            for label, fn, args in tasks:
                fn(*args)
                if bar:
                    bar.update(1, postfix=label)
        if bar:
            bar.close()
        return {"jobs": len(unique), "computed": len(todo), "seconds": round(time.perf_counter() - t0, 1)}


def _compute_and_store(folder, job):
    PhysicsCache(folder)._store(job, compute(job))


def scene_job(kind, mesh: Mesh, scene: dict, **options) -> Job:
    """A job on a mesh and scene (the mesh reduced to its arrays and name, so it pickles)."""
    plain = Mesh(np.asarray(mesh.vertices, np.float64), np.asarray(mesh.faces, np.int64), name=mesh.name)
    return Job(kind, ("scene", plain, scene), options)


def sequence_job(kind, path, **options) -> Job:
    return Job(kind, ("sequence", str(path)), options)


def drift_job(model_path, mesh, integrator, **options) -> Job:
    """The model's energy drift on a sample mesh with one integrator (`energy.mesh_drift`)."""
    return Job("drift", ("model", str(model_path)), dict(options, name=mesh, integrator=integrator))
