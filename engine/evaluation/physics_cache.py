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

The model-free answers (the reference, the oracle, the noise floor) are kept in the repository
as well, in data/physics/<kind>/ (issue 44: a fresh machine evaluates in minutes, not hours),
small: frames as float16 moves from the first frame, in a compressed npz, beside a stamp of what
made them (`kept_stamp`: the reference's physics version and settings, the source, and the
definitions the oracle's or noise floor's code reaches, `code_stamp.py`: a comment or an unrelated
function in the same file leaves them current). A file whose stamp no longer matches is stale and is made
again; the others are read as they are.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import lzma
import os
import pickle
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.formats import Mesh, atomic_write_bytes, read_sequence
from ..core.progress import ProgressBar
from ..core.scene import SCENE_DEFAULTS, resolve_material, setup_from_scene, setup_from_sequence
from ..reference.budget import DEFAULT_BUDGET, GIVING_UP
from ..reference.simulator import DEFAULT_LATTICE_CELLS, DEFAULT_SUBSTEP
from ..reference.stamp import digest, mesh_digest, physics_version, run_settings
from .code_stamp import code_fingerprint

ENGINE = Path(__file__).resolve().parent.parent
DATA = ENGINE.parent / "data"
KEPT = DATA / "physics"          # the model-free answers, kept in the repository
# the code that decides each kind of run besides the job itself (a change to the oracle keeps the reference's runs)
PHYSICS_CODE = {
    "reference": ("core", "reference"),
    "oracle": ("core", "reference", "learned/subspace.py", "evaluation/oracle.py", "evaluation/rollout.py"),
    "noise_floor": ("core", "reference", "evaluation/noise.py", "evaluation/noise_floor.py", "evaluation/rollout.py"),
    "drift": ("",),   # a model's energy drift: all of engine/
}
# what decides a kept answer besides the reference (its physics version for the body's kind) and the job: the definitions
# that kind's entry points reach outside core/ and reference/ (`code_stamp.code_fingerprint`)
KEPT_CODE = {
    "reference": (),
    "oracle": (("evaluation/oracle.py", "OracleEngine"), ("evaluation/rollout.py", "predict")),
    "noise_floor": (("evaluation/noise.py", "noise_floor_for"),),
}
KEPT_CODE_SKIP = ("core/", "reference/")
SETTINGS = ("lattice_cells", "substep")     # options that are the reference's settings, not the job's identity


class PhysicsRunFailed(RuntimeError):
    """The reference (or the oracle) gave up on a job; the text says why. `gave_up_under`: the
    reference's rules for giving up (`budget.GIVING_UP`) it failed under; under others it is tried again."""

    def __init__(self, text: str):
        super().__init__(text)
        self.gave_up_under = dict(GIVING_UP)


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


def kept_code_version(kind: str) -> str | None:
    """The fingerprint of the code a kept answer of this kind runs beside the reference (`KEPT_CODE`)."""
    if not KEPT_CODE[kind]:
        return None
    if ("kept", kind) not in _code_versions:
        _code_versions[("kept", kind)] = code_fingerprint(KEPT_CODE[kind], KEPT_CODE_SKIP)
    return _code_versions[("kept", kind)]


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
    """Physics answers kept as `folder/<key>.pkl` (`job_key`); with `kept` (the suite's: KEPT,
    data/physics), the model-free ones there as stamped compact files (`kept_path`)."""

    def __init__(self, folder, kept=None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.kept = Path(kept) if kept is not None else None

    def keeps(self, job: Job) -> bool:
        return self.kept is not None and job.kind in KEPT_CODE

    def path(self, job: Job) -> Path:
        return kept_path(self.kept, job) if self.keeps(job) else self.folder / f"{job_key(job)}.pkl"

    def has(self, job: Job) -> bool:
        if self.keeps(job):
            stamp, failed = read_kept_head(self.path(job))
            return ((stamp or {}).get("fingerprint") == kept_stamp(job)["fingerprint"]
                    and not (failed and stamp.get("gave_up_under") != GIVING_UP))
        return self.path(job).is_file()

    def is_stale(self, job: Job) -> bool:
        """A kept file for this job that other settings or code made."""
        return self.keeps(job) and self.path(job).is_file() and not self.has(job)

    def prune_kept(self, jobs) -> list:
        """Delete the kept files that none of `jobs` reads (answers for evaluation sequences made
        again, for scenes no longer evaluated), so data/ holds only what is used; returns them."""
        used = {self.path(j).resolve() for j in jobs if self.keeps(j)}
        unused = sorted(f for f in self.kept.glob("*/*.npz") if f.resolve() not in used) if self.kept else []
        for f in unused:
            f.unlink()
        return unused

    def _store(self, job: Job, answer):
        if job.kind == "oracle" and not isinstance(answer, PhysicsRunFailed) and answer[2]:
            return          # the oracle's code raised: no answer to keep, run it again next time
        path = self.path(job)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.keeps(job):
            atomic_write_bytes(path, encode_kept(job, answer))
            return
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, path)

    def _load(self, job: Job):
        if self.keeps(job):
            return decode_kept(job.kind, self.path(job))
        return pickle.loads(self.path(job).read_bytes())

    def get(self, job: Job):
        """The job's answer (from the folder, else computed here and kept); raises
        PhysicsRunFailed when the physics gave up on it."""
        answer = self._load(job) if self.has(job) else None
        if isinstance(answer, PhysicsRunFailed) and getattr(answer, "gave_up_under", None) != GIVING_UP:
            answer = None                   # a failure under the reference's old rules for giving up
        if answer is None:
            answer = compute(job)
            self._store(job, answer)
        return _checked(answer)

    def prefetch(self, jobs, workers=None, quiet=False, also=()) -> dict:
        """Compute the jobs not yet kept (or kept stale), on `workers` processes (default: one per
        core), longest first; `also`: (label, function, args) to run on the same processes first
        (a baseline's training; their answers are dropped). Returns {"jobs", "computed", "stale", "seconds"}."""
        unique = {job_key(j): j for j in jobs}
        todo = sorted((j for j in unique.values() if not self.has(j)), key=lambda j: -j.cost())
        stale = sum(self.is_stale(j) for j in todo)
        if stale and not quiet:
            print(f"physics: {stale} kept answer(s) were made by other settings or code (stale): computing them again",
                  flush=True)
        kept = str(self.kept) if self.kept is not None else None
        tasks = [(label, fn, args) for label, fn, args in also] + [
            (j.kind, _compute_and_store, (str(self.folder), kept, j)) for j in todo]
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
        return {"jobs": len(unique), "computed": len(todo), "stale": stale,
                "seconds": round(time.perf_counter() - t0, 1)}


def _compute_and_store(folder, kept, job):
    PhysicsCache(folder, kept)._store(job, compute(job))


# --------------------------------------------------------------------------- the kept answers

def source_digest(job: Job) -> str:
    """What the job runs on: the mesh and scene, or the arrays of the sequence file (not its bytes,
    which carry the time it was written)."""
    if job.source[0] == "sequence":
        return sequence_facts(job.source[1])[0]
    _, mesh, scene = job.source
    return digest(mesh_digest(mesh.vertices, mesh.faces), scene)


def frame_time(job: Job) -> float | None:
    """The job's seconds between frames (None for a job on a model)."""
    if job.source[0] == "sequence":
        return sequence_facts(job.source[1])[1]
    if job.source[0] == "scene":
        return float(job.source[2].get("dt", SCENE_DEFAULTS["dt"]))
    return None


def body_kind(job: Job) -> str:
    """"solid" or "cloth": which of the reference's physics versions decides the job."""
    if job.source[0] == "sequence":
        return sequence_facts(job.source[1])[2]
    material = job.source[2].get("material") or {}
    return material["kind"] if isinstance(material, dict) and "kind" in material else resolve_material(material).kind


def sequence_facts(path) -> tuple[str, float | None, str]:
    """(digest of its arrays, seconds between frames, kind of body) of a sequence file, read once
    while the file is unchanged (a stamp asks for all three, for every kept job of a set)."""
    st = os.stat(path)
    return _sequence_facts(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _sequence_facts(path: str, mtime_ns: int, size: int) -> tuple[str, float | None, str]:
    with np.load(path, allow_pickle=False) as z:
        dt = float(z["dt"]) if "dt" in z.files else None
        kind = json.loads(str(z["material"])).get("kind", "solid") if "material" in z.files else "solid"
        return digest(*[[k, z[k]] for k in sorted(z.files)]), dt, kind


def job_label(job: Job) -> str:
    name = Path(job.source[1]).stem if job.source[0] == "sequence" else (job.source[1].name or "mesh")
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in str(name))[:40]


def kept_path(folder, job: Job) -> Path:
    """data/physics/<kind>/<label>_<identity>.npz: the identity is the job without the reference's
    settings, so a changed setting finds the file it makes stale (and replaces it)."""
    options = {k: v for k, v in job.options.items() if k not in SETTINGS}
    identity = digest(job.kind, options, source_digest(job))[:12]
    return Path(folder) / job.kind / f"{job_label(job)}_{identity}.npz"


def kept_stamp(job: Job) -> dict:
    """What makes a kept answer: the reference's physics version and settings, the job and its
    source, and the kind's own code (`KEPT_CODE`)."""
    settings = run_settings(job.options.get("lattice_cells", DEFAULT_LATTICE_CELLS),
                            job.options.get("substep", DEFAULT_SUBSTEP), frame_time(job), DEFAULT_BUDGET)
    stamp = {"kind": job.kind, "physics_version": physics_version(body_kind(job)), "settings": settings,
             "options": {k: v for k, v in job.options.items() if k not in SETTINGS},
             "source": source_digest(job), "code": kept_code_version(job.kind)}
    stamp["fingerprint"] = digest(stamp)
    return stamp


def read_kept_stamp(path) -> dict | None:
    return read_kept_head(path)[0]


def read_kept_head(path) -> tuple[dict | None, bool]:
    """(the stamp of a kept answer or None, whether the answer is a failure)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return json.loads(str(z["stamp"])), "failed" in json.loads(str(z["info"]))
    except (OSError, KeyError, ValueError):
        return None, False


def _frames_arrays(frames) -> dict:
    frames = np.asarray(frames, np.float32)
    moves = (frames - frames[0]).astype(np.float16)
    return {"start": frames[0], "moves_packed": pack_float16(moves), "moves_shape": np.array(moves.shape)}


def _frames_from(z) -> np.ndarray:
    moves = (unpack_float16(z["moves_packed"], tuple(z["moves_shape"])) if "moves_packed" in z.files
             else z["moves"])                  # kept before the packing: plain float16
    return (z["start"][None].astype(np.float32) + moves.astype(np.float32)).astype(np.float32)


def pack_float16(frames: np.ndarray) -> np.ndarray:
    """Float16 frames [T, ...] as bytes, losslessly, in about half the room deflate takes: a frame
    differs little from the one before, so the differences of their bit patterns are small integers;
    their low and high bytes are stored apart (each plane is then runs of alike bytes), through lzma."""
    bits = np.ascontiguousarray(frames, np.float16).view(np.int16)
    steps = np.diff(bits, axis=0, prepend=np.zeros_like(bits[:1]))     # int16 wraps: exact on the way back
    planes = np.ascontiguousarray(steps.view(np.uint8).reshape(-1, 2).T)
    return np.frombuffer(lzma.compress(planes.tobytes()), np.uint8)


def unpack_float16(packed: np.ndarray, shape) -> np.ndarray:
    planes = np.frombuffer(lzma.decompress(np.asarray(packed, np.uint8).tobytes()), np.uint8).reshape(2, -1)
    steps = np.ascontiguousarray(planes.T).view(np.int16).reshape(shape)
    return np.cumsum(steps, axis=0, dtype=np.int16).view(np.float16)


def encode_kept(job: Job, answer) -> bytes:
    """A kept answer as compressed npz bytes: the stamp, the frames (float16 moves from frame 0) and
    the rest as JSON."""
    arrays, info = {}, {}
    failed = isinstance(answer, PhysicsRunFailed)
    if failed:
        info["failed"] = str(answer)
    elif job.kind == "reference":
        arrays.update(_frames_arrays(answer))
    elif job.kind == "oracle":
        frames, fault, error, ms, handles = answer
        arrays.update(_frames_arrays(frames))
        info.update(fault=fault, error=error, ms_per_frame=ms, handles=handles)
    else:
        info["answer"] = answer
    stamp = dict(kept_stamp(job), label=job_label(job), made=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    if failed:
        stamp["gave_up_under"] = getattr(answer, "gave_up_under", GIVING_UP)
    buf = io.BytesIO()
    np.savez_compressed(buf, stamp=np.array(json.dumps(stamp)), info=np.array(json.dumps(_plain(info))), **arrays)
    return buf.getvalue()


def decode_kept(kind: str, path):
    with np.load(path, allow_pickle=False) as z:
        info = json.loads(str(z["info"]))
        if "failed" in info:
            return PhysicsRunFailed(info["failed"])
        if kind == "reference":
            return _frames_from(z)
        if kind == "oracle":
            return _frames_from(z), info["fault"], info["error"], info["ms_per_frame"], info["handles"]
        return info["answer"]


def _plain(value):
    """JSON-ready: numpy numbers and arrays as Python ones."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def scene_job(kind, mesh: Mesh, scene: dict, **options) -> Job:
    """A job on a mesh and scene (the mesh reduced to its arrays and name, so it pickles)."""
    plain = Mesh(np.asarray(mesh.vertices, np.float64), np.asarray(mesh.faces, np.int64), name=mesh.name)
    return Job(kind, ("scene", plain, scene), options)


def sequence_job(kind, path, **options) -> Job:
    return Job(kind, ("sequence", str(path)), options)


def drift_job(model_path, mesh, integrator, **options) -> Job:
    """The model's energy drift on a sample mesh with one integrator (`energy.mesh_drift`)."""
    return Job("drift", ("model", str(model_path)), dict(options, name=mesh, integrator=integrator))
