"""Training data: random shapes under random scenes, simulated by the reference simulator.

Sequence i of a data set made with seed S draws everything from `default_rng([S, i])`, so a
data set is the same whichever shards or workers made it. Each sequence records its split:
`heldout` for shape families the model never trains on, `validation` (10% of the rest) and
`train`. The index files (`index.json`, or `index-I-of-N.json` per shard) list every sequence.
An interrupted run is resumed by running the same command again: finished files are kept.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..core.formats import NeurokError, atomic_write_text, read_sequence, write_sequence
from ..core.geometry import bbox_diagonal
from ..core.material_params import Material
from ..core.progress import ProgressBar
from ..core.scene import resolve_material, setup_from_scene
from ..core.setup import Setup
from ..reference.budget import GIVING_UP, WorkBudgetExceeded
from ..reference.simulator import ReferenceSimulator
from ..reference.stamp import reference_stamp, run_settings
from .shapes import FAMILIES, SHEET_FAMILIES, make_shape

HELDOUT_FAMILIES = ("capsule", "torus")
VALIDATION_SHARE = 0.1
SCENARIOS = ("drop", "push", "poke", "wind", "squeeze", "twist", "swing")
GENERATOR_LATTICE = 4          # quadratic cells (9 nodes a side), coarser than the default reference (6): fast
# At 8 cells two dropped blobs took their 12-cell paths (the reference's 500-cell cap makes the same
# lattice), where the generator's 4 were 0.06-0.09 off them: a stiffer body, standing (before solid physics
# 4) on a sole of cells (docs/MODEL_CARD.md, "Training data that is the physics"). Training data for a model judged
# against converged ground truth needs it: `neurok generate --lattice 8` (about 10x the time).
CONVERGED_LATTICE = 8
GENERATOR_SUBSTEP = 1.0 / 48.0
MAX_WEIGHT_STRAIN = 1.0        # rho g H / E of the softest solid drawn (the jelly preset: 0.86, nu 0.45)
MAX_WEIGHT_STRAIN_COMPRESSIBLE = 0.4    # the same for nu < 0.4: such bodies sag by losing volume
MAX_SQUEEZE_STRAIN = 0.25      # rho a L / E of the strongest squeeze (L: the body's length along it)


def log_uniform(rng, lo, hi):
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def random_material(rng, kind) -> Material:
    if kind == "cloth":
        return resolve_material({"kind": "cloth", "stiffness": log_uniform(rng, 1e3, 3e4),
                                 "density": log_uniform(rng, 0.1, 1.0), "bending": log_uniform(rng, 1e-5, 3e-3),
                                 "damping": log_uniform(rng, 0.001, 0.02), "air_damping": rng.uniform(0.0, 0.5)})
    return resolve_material({"kind": "solid", "stiffness": log_uniform(rng, 2e3, 2e5),
                             "density": log_uniform(rng, 100.0, 1500.0), "poisson": rng.uniform(0.2, 0.45),
                             "damping": log_uniform(rng, 0.001, 0.03), "air_damping": rng.uniform(0.0, 0.5)})


def weight_strain_limit(poisson):
    """Largest rho g H / E drawn: a compressible body that soft collapses under its own weight
    (a nu = 0.21 capsule at 1.0 sinks to 0.34 of its volume with no other load; docs/PHYSICS.md)."""
    return MAX_WEIGHT_STRAIN if poisson >= 0.4 else MAX_WEIGHT_STRAIN_COMPRESSIBLE


def carry_own_weight(material: Material, height, g=9.81) -> Material:
    """Stiffen a drawn solid that its own weight would crush (rho g H / E above
    `weight_strain_limit`): such a body has no upright rest shape to learn, only a collapse."""
    floor = material.density * g * height / weight_strain_limit(material.poisson)
    return replace(material, stiffness=max(material.stiffness, floor))


def squeeze_limit(material: Material, length):
    """The strongest squeeze (m/s^2) the generator gives a solid: rho a L / E = MAX_SQUEEZE_STRAIN.
    Harder squeezes shear a soft body into folds finer than its lattice, where the reference's
    self-contact does not reach and the mesh passes through itself (docs/PHYSICS.md (o))."""
    return MAX_SQUEEZE_STRAIN * material.stiffness / (material.density * max(float(length), 1e-6))


def _box(lo, hi):
    return {"box": {"min": list(lo), "max": list(hi)}}


def _pin_side(rng, mesh):
    """A slab at one end of one axis (never the thin axis of a sheet), in normalised
    bounding-box coordinates."""
    extent = np.ptp(mesh.vertices, axis=0)
    axes = np.nonzero(extent > 0.1 * extent.max())[0]
    axis, side = int(rng.choice(axes)), int(rng.integers(2))
    width = rng.uniform(0.05, 0.2)
    lo, hi = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
    if side == 0:
        hi[axis] = width
    else:
        lo[axis] = 1.0 - width
    return axis, side, _box(lo, hi)


def _random_direction(rng):
    v = rng.normal(size=3)
    return v / np.linalg.norm(v)


def random_scene(rng, mesh, kind, frames, dt):
    """A random scenario of one of SCENARIOS, as a `neurok.scene/1` dict (plus its name)."""
    scenario = str(rng.choice(SCENARIOS if kind == "solid" else ("drop", "push", "wind", "swing", "poke")))
    material = random_material(rng, kind)
    if kind == "solid":
        material = carry_own_weight(material, float(np.ptp(mesh.vertices[:, 2])))
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": dt, "gravity": [0.0, 0.0, -9.81],
             "material": material.to_dict(), "pins": [], "forces": [], "floor": None,
             "initial": {"velocity": [0.0, 0.0, 0.0]}}
    if kind == "cloth":         # folds that hold, as the add-on's cloth has by default
        scene["self_collision"] = True
    size = bbox_diagonal(mesh.vertices)
    zmin = float(mesh.vertices[:, 2].min())
    whole = _box([0, 0, 0], [1, 1, 1])
    strength = lambda lo, hi: log_uniform(rng, lo, hi)  # noqa: E731
    if scenario == "drop":
        scene["floor"] = {"z": zmin - rng.uniform(0.0, 0.5) * size}
        v = rng.normal(size=3) * rng.uniform(0.0, 1.0)
        scene["initial"]["velocity"] = [float(v[0]), float(v[1]), -abs(float(v[2]))]
    elif scenario == "push":
        _, _, pin = _pin_side(rng, mesh)
        scene["pins"].append({"select": pin, "strength": 1.0})
        a = _random_direction(rng) * strength(2.0, 30.0)
        scene["forces"].append({"select": whole, "accel": a.tolist(),
                                "profile": {"type": "constant", "start": int(rng.integers(0, 5)),
                                            "end": int(rng.integers(frames // 4, frames))}})
    elif scenario == "poke":
        if rng.random() < 0.5:
            _, _, pin = _pin_side(rng, mesh)
            scene["pins"].append({"select": pin, "strength": 1.0})
        else:
            scene["floor"] = {"z": zmin}
        lo, hi = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
        hit = mesh.vertices[int(rng.integers(len(mesh.vertices)))]   # centred on the surface: never empty
        c = ((hit - lo) / np.maximum(hi - lo, 1e-12)).tolist()
        a = _random_direction(rng) * strength(20.0, 300.0)
        scene["forces"].append({"select": {"sphere": {"center": c, "radius": float(rng.uniform(0.2, 0.5))}},
                                "accel": a.tolist(), "profile": {"type": "impulse", "start": int(rng.integers(0, 6))}})
    elif scenario == "wind":
        _, _, pin = _pin_side(rng, mesh)
        scene["pins"].append({"select": pin, "strength": 1.0})
        a = _random_direction(rng) * strength(2.0, 20.0)
        scene["forces"].append({"select": whole, "accel": a.tolist(),
                                "profile": {"type": "sine", "start": 0, "frequency": rng.uniform(0.3, 2.0)}})
    elif scenario == "squeeze":
        axis = int(rng.integers(3))
        lo_box, hi_box = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
        hi_box[axis] = 0.25
        a = np.zeros(3)
        a[axis] = min(strength(5.0, 60.0), squeeze_limit(material, np.ptp(mesh.vertices[:, axis])))
        scene["floor"] = {"z": zmin}
        end = int(rng.integers(frames // 4, frames))
        scene["forces"].append({"select": _box(lo_box, hi_box), "accel": a.tolist(), "profile": {"type": "constant", "end": end}})
        lo2, hi2 = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
        lo2[axis] = 0.75
        scene["forces"].append({"select": _box(lo2, hi2), "accel": (-a).tolist(), "profile": {"type": "constant", "end": end}})
    elif scenario == "twist":
        axis, side, pin = _pin_side(rng, mesh)
        scene["pins"].append({"select": pin, "strength": 1.0})
        scene["twist"] = {"axis": axis, "side": side, "accel": strength(5.0, 50.0),
                          "end": int(rng.integers(frames // 4, frames))}
    elif scenario == "swing":
        _, _, pin = _pin_side(rng, mesh)
        scene["pins"].append({"select": pin, "strength": 1.0})
        scene["initial"]["velocity"] = (_random_direction(rng) * rng.uniform(0.2, 2.0)).tolist()
    return scenario, scene


def twist_accelerations(setup: Setup, twist: dict) -> np.ndarray:
    """Per-frame accelerations of a twist: tangential about the pin axis, growing with distance
    from the pinned side, on for frames [0, end)."""
    rest = setup.rest
    axis = twist["axis"]
    centre = 0.5 * (rest.min(axis=0) + rest.max(axis=0))
    r = rest - centre
    r[:, axis] = 0.0
    e = np.zeros(3); e[axis] = 1.0
    tangential = np.cross(e, r)
    span = np.ptp(rest[:, axis]) or 1.0
    reach = (rest[:, axis] - rest[:, axis].min()) / span
    if twist["side"] == 1:
        reach = 1.0 - reach
    a = twist["accel"] * tangential / max(np.linalg.norm(tangential, axis=1).max(), 1e-9) * reach[:, None]
    table = np.zeros((setup.frames, len(rest), 3))
    table[: twist["end"]] = a
    return table


def simulate_random_scene(rng, mesh, kind, frames, dt, law=None, lattice_cells=GENERATOR_LATTICE):
    """Draw a random scene for `mesh` and run it with the reference simulator at the generator's
    substep on a lattice of `lattice_cells` (`law`: a solid law other than neo-Hookean, e.g.
    {"law": "mooney_rivlin", "i2_share": 0.7}). Returns (scenario name, Setup with vertex masses,
    positions [T,N,3])."""
    scenario, scene = draw_scene(rng, mesh, kind, frames, dt, law)
    setup, positions = simulate_scene(mesh, scene, lattice_cells)
    return scenario, setup, positions


def draw_scene(rng, mesh, kind, frames, dt, law=None):
    """`random_scene` with the data set's solid law applied (a twist stays in the scene as "twist")."""
    scenario, scene = random_scene(rng, mesh, kind, frames, dt)
    if law:
        scene["material"] = resolve_material({**scene["material"], **law}).to_dict()
    return scenario, scene


def simulate_scene(mesh, scene, lattice_cells=GENERATOR_LATTICE):
    """Run a drawn scene with the reference at the generator's substep: (Setup with vertex masses, positions)."""
    scene = dict(scene)
    twist = scene.pop("twist", None)
    setup = setup_from_scene(mesh, scene)
    if twist is not None:
        setup.accel_table = twist_accelerations(setup, twist)
    sim = ReferenceSimulator(setup, lattice_cells=lattice_cells, substep=GENERATOR_SUBSTEP)
    positions = np.stack(list(sim.iter_frames()))
    setup.vertex_mass = sim.vertex_mass
    return setup, positions


def family_choices(law=None, kind=None) -> list[str]:
    """The shape families a data set draws from: all of them, or one kind's (`law` implies solids)."""
    if law or kind == "solid":
        return [f for f in FAMILIES if f not in SHEET_FAMILIES]
    if kind == "cloth":
        return list(SHEET_FAMILIES)
    return list(FAMILIES)


@dataclass
class Draw:
    """Everything sequence `index` of a data set is made from, before it is simulated (cheap)."""
    index: int
    family: str
    kind: str
    mesh: object
    scenario: str
    scene: dict
    split: str
    stamp: dict

    @property
    def file(self) -> str:
        return f"seq_{self.index:05d}.npz"


def draw_sequence(seed: int, index: int, frames: int = 64, dt: float = 1.0 / 24.0, target_vertices=(300, 1200),
                  law=None, lattice_cells=GENERATOR_LATTICE, kind=None) -> Draw:
    """The shape, scene and split of sequence `index` (all from `default_rng([seed, index])`) and
    the stamp of what its frames will be made from (`reference.stamp`)."""
    rng = np.random.default_rng([seed, index])
    family = str(rng.choice(family_choices(law, kind)))
    kind = "cloth" if family in SHEET_FAMILIES else "solid"
    mesh = make_shape(family, rng, int(rng.integers(*target_vertices)))
    scenario, scene = draw_scene(rng, mesh, kind, frames, dt, law)
    split = "heldout" if family in HELDOUT_FAMILIES else ("validation" if rng.random() < VALIDATION_SHARE else "train")
    stamp = reference_stamp(mesh.vertices, mesh.faces, scene, run_settings(lattice_cells, GENERATOR_SUBSTEP, dt), kind)
    return Draw(index, family, kind, mesh, scenario, scene, split, stamp)


def make_sequence(seed: int, index: int, frames: int = 64, dt: float = 1.0 / 24.0, target_vertices=(300, 1200),
                  law=None, lattice_cells=GENERATOR_LATTICE, kind=None):
    """Build and simulate sequence `index` of a data set; returns (Sequence, index entry).
    `law` (see `simulate_random_scene`): solids only, all made of that law. `kind`: only solids
    or only cloth (a closure of one kind's dynamics needs more of its sequences than the mix has)."""
    d = draw_sequence(seed, index, frames, dt, target_vertices, law, lattice_cells, kind)
    setup, positions = simulate_scene(d.mesh, d.scene, lattice_cells)
    meta = {"source": "neurok generate", "simulator": "reference", "seed": seed, "index": index,
            "family": d.family, "scenario": d.scenario, "split": d.split, "lattice_cells": lattice_cells,
            "stamp": d.stamp}
    return setup.to_sequence(positions, meta), entry_for(d, len(d.mesh.vertices), frames)


def same_draw(stamp: dict, seq, d: Draw) -> bool:
    """Whether a kept sequence (`stamp`: its meta's) was made from the draw d: the same fingerprint,
    or the same physics version and settings with the same mesh and setup to the float32 the file
    keeps them in. The shape generators' float64 vertices differ in their last bits from one CPU to
    another (numpy's vectorised functions round differently), and the digests of the mesh and of the
    scene drawn on it with them: 3 of the 6 sequences of the small evaluation set went stale on a
    fresh machine whose meshes were 1.5e-8 m from theirs."""
    if stamp.get("fingerprint") == d.stamp["fingerprint"]:
        return True
    if not stamp or any(stamp.get(k) != d.stamp[k] for k in ("physics_version", "settings")):
        return False
    from ..core.scene import setup_from_scene
    try:
        expected = setup_from_scene(d.mesh, d.scene).to_sequence(seq.positions)
    except NeurokError:
        return False
    return all(_same_values(getattr(expected, k), getattr(seq, k)) for k in SEQUENCE_SETUP_FIELDS)


# what a sequence keeps of its setup (its vertex masses are the reference's, made from the rest)
SEQUENCE_SETUP_FIELDS = ("rest", "faces", "dt", "gravity", "material", "external_accel", "velocity0", "pin_weight",
                         "pin_target", "floor_z", "floor_friction")


def _same_values(a, b) -> bool:
    """Equal to float32 rounding: numbers, arrays, None, and dicts of them."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(_same_values(a[k], b[k]) for k in a))
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False
    scale = max(float(np.abs(b).max()), 1e-30) if b.size else 1.0
    return bool(np.all(np.abs(a - b) <= 1e-6 * scale))


def entry_for(d: Draw, vertices: int, frames: int) -> dict:
    return {"file": d.file, "family": d.family, "scenario": d.scenario, "split": d.split, "kind": d.kind,
            "vertices": int(vertices), "frames": int(frames), "stamp": d.stamp["fingerprint"]}


def _worker(args):
    """Make and write one sequence: its index entry, or {"skipped": ...} when the reference's work
    budget stopped it (that scene grinds; the data set goes on without it)."""
    out, seed, index, frames, dt, law, lattice_cells, kind = args
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.perf_counter()
    try:
        seq, entry = make_sequence(seed, index, frames, dt, law=law, lattice_cells=lattice_cells, kind=kind)
    except WorkBudgetExceeded as stopped:
        d = draw_sequence(seed, index, frames, dt, law=law, lattice_cells=lattice_cells, kind=kind)
        return {"skipped": d.file, "family": d.family, "scenario": d.scenario, "stamp": d.stamp["fingerprint"],
                "gave_up_under": GIVING_UP, "reason": str(stopped)}
    if not np.all(np.isfinite(seq.positions)):
        raise NeurokError(f"sequence {index} produced NaN")
    write_sequence(Path(out) / entry["file"], seq, compact=True)
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    return entry


def parse_shard(text: str | None):
    if not text:
        return 0, 1
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise NeurokError(f"--shard must look like I/N (e.g. 0/4), got '{text}'") from None
    if not (n >= 1 and 0 <= i < n):
        raise NeurokError(f"--shard {text}: need 0 <= I < N")
    return i, n


def generate(out, sequences: int, seed: int, shard: str | None = None, workers: int = 1,
             frames: int = 64, dt: float = 1.0 / 24.0, quiet: bool = False, law: dict | None = None,
             lattice_cells: int | None = None, kind: str | None = None) -> dict:
    """Write sequences [shard part of 0..sequences) to `out` with an index file; resumable.
    `law`: every sequence a solid of that law (`make_sequence`). `lattice_cells`: the reference's
    lattice for solids (None: GENERATOR_LATTICE; `CONVERGED_LATTICE` for data a model is judged on;
    a folder holds one). `kind`: "solid" or "cloth" only (None: the mix of every family).
    A sequence whose stamp (`reference.stamp`) still matches is kept; a stale one is made again; a
    scene the reference's work budget stops is skipped with one line on stderr."""
    lattice_cells = lattice_cells or GENERATOR_LATTICE
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    i, n = parse_shard(shard)
    index_path = out / ("index.json" if n == 1 else f"index-{i}-of-{n}.json")
    check_lattice(out, lattice_cells)
    plan = DataSetPlan(out, index_path, seed, sequences, shard, lattice_cells)
    plan.settle(range(i, sequences, n), frames, dt, law, kind)
    bar = None if quiet or not plan.todo else ProgressBar(len(plan.todo), "generate")
    t0 = time.perf_counter()
    todo = list(plan.todo)
    make_sequences(plan, todo, frames, dt, workers, bar, law, kind)
    elapsed = time.perf_counter() - t0
    return {"written": len(todo) - len(plan.skipped_now), "skipped": list(plan.skipped_now), "stale": plan.stale,
            "seconds": elapsed, "index": str(index_path),
            "sequences_per_minute": 60.0 * len(todo) / elapsed if todo and elapsed > 0 else None}


def check_lattice(out, lattice_cells):
    for other in sorted(Path(out).glob("index*.json")):
        made = json.loads(other.read_text()).get("lattice_cells", GENERATOR_LATTICE)
        if made != lattice_cells:
            raise NeurokError(f"{out} holds sequences made on a {made}-cell lattice; this run asks for "
                              f"{lattice_cells} (use another folder, or --lattice {made} to go on)")


class DataSetPlan:
    """A data folder's index as a run goes: the sequences kept (their stamps match what this run
    would make), the scenes skipped before (the work budget stopped them under the same stamp),
    and what is left to make (`todo`: missing or stale). Written after every sequence, so an
    interrupted run, even a killed one, resumes where it stopped."""

    def __init__(self, out, index_path, seed, total, shard, lattice_cells):
        self.out, self.index_path, self.seed, self.total = Path(out), Path(index_path), seed, total
        self.shard, self.lattice_cells = shard, lattice_cells
        listed = json.loads(self.index_path.read_text()) if self.index_path.is_file() else {}
        self.entries = {e["file"]: e for e in listed.get("sequences", []) if (self.out / e["file"]).is_file()}
        self.skipped = dict(listed.get("skipped", {}))
        self.todo, self.stale, self.skipped_now = [], 0, []

    def settle(self, indices, frames, dt, law=None, kind=None):
        """Sort `indices` into kept, skipped before, and `todo`; count the stale ones."""
        for k in indices:
            d = draw_sequence(self.seed, k, frames, dt, law=law, lattice_cells=self.lattice_cells, kind=kind)
            fingerprint = d.stamp["fingerprint"]
            if self.entries.get(d.file, {}).get("stamp") == fingerprint:
                continue
            skip = self.skipped.get(d.file, {})
            if skip.get("stamp") == fingerprint and skip.get("gave_up_under") == GIVING_UP:
                self.entries.pop(d.file, None)
                continue
            adopted = self._adopt(d, frames)
            if adopted:
                self.entries[d.file] = adopted
                continue
            self.stale += int(d.file in self.entries or (self.out / d.file).is_file())
            self.entries.pop(d.file, None)
            self.skipped.pop(d.file, None)
            self.todo.append(k)
        if self.stale:
            print(f"generate: {self.stale} sequence(s) in {self.out} were made from other settings or code (stale); "
                  "making them again", file=sys.stderr)

    def _adopt(self, d, frames):
        """The index entry of a file on disk that this run would make the same (`same_draw`): one a
        stopped run wrote before it could list it, or one made on a machine whose shape generator
        came out otherwise in the last bits. The entry keeps the file's own stamp."""
        path = self.out / d.file
        if not path.is_file():
            return None
        try:
            seq = read_sequence(path)
        except NeurokError:
            return None
        stamp = seq.meta.get("stamp", {})
        if not same_draw(stamp, seq, d):
            return None
        entry = dict(entry_for(d, seq.rest.shape[0], seq.frames), stamp=stamp["fingerprint"])
        listed = self.entries.get(d.file, {})
        if listed.get("stamp") == entry["stamp"] and "seconds" in listed:   # what it took where it was made:
            entry["seconds"] = listed["seconds"]                          # the kept index stays as it was
        return entry

    def record(self, result, bar=None):
        if "skipped" in result:
            name = result.pop("skipped")
            self.skipped[name] = result
            self.skipped_now.append(name)
            print(("\n" if bar else "") + f"generate: skipped {name} ({result['family']}/{result['scenario']}): {result['reason']}",
                  file=sys.stderr, flush=True)
        else:
            self.entries[result["file"]] = result
        self.write()
        if bar:
            bar.update(1, postfix=f"{result['family']}/{result['scenario']}")

    def write(self):
        body = {"format": "neurok.dataset/1", "seed": self.seed,
                "sequences": sorted(self.entries.values(), key=lambda e: e["file"]),
                "total": self.total, "shard": self.shard or "0/1", "heldout_families": list(HELDOUT_FAMILIES),
                "lattice_cells": self.lattice_cells, "skipped": dict(sorted(self.skipped.items()))}
        atomic_write_text(self.index_path, json.dumps(body, indent=1))


def make_sequences(plan: DataSetPlan, todo, frames, dt, workers, bar=None, law=None, kind=None):
    """Simulate and write sequences `todo` (indices), on `workers` processes, recording each in
    the plan's index as it finishes (so an interrupted run resumes)."""
    jobs = [(str(plan.out), plan.seed, k, frames, dt, law, plan.lattice_cells, kind) for k in todo]
    try:
        if workers > 1 and len(jobs) > 1:
            _run_in_pool(jobs, workers, lambda result: plan.record(result, bar))
        else:
            for job in jobs:
                plan.record(_worker(job), bar)
    finally:
        if bar:
            bar.close()
        plan.write()


def _run_in_pool(jobs, workers, record):
    """Each result recorded as it comes; on an interrupt the queued jobs are dropped and the
    workers stopped (their sequences in progress are lost, the finished ones are on disk)."""
    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        for done in as_completed([pool.submit(_worker, job) for job in jobs]):
            record(done.result())
    except BaseException:
        for process in list((pool._processes or {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def load_index(data_dir) -> list[dict]:
    """All sequences listed by the index files of a data folder (any shards), each with its index's
    `lattice_cells` (the solids' lattice; None where not recorded). A folder of bare sequence files
    with no index (e.g. baked in Blender) counts as all `train`."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise NeurokError(f"{data_dir}: no such data folder")
    entries = {}
    for p in sorted(data_dir.glob("index*.json")):
        try:
            index = json.loads(p.read_text())
            for e in index["sequences"]:
                entries[e["file"]] = dict(e, lattice_cells=index.get("lattice_cells"))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise NeurokError(f"{p}: not a readable index file") from None
    if not entries:
        for f in sorted(data_dir.glob("*.npz")):
            meta = read_sequence(f).meta
            entries[f.name] = {"file": f.name, "split": meta.get("split", "train"),
                               "family": meta.get("family", "imported"), "scenario": meta.get("scenario", "imported")}
    if not entries:
        raise NeurokError(f"{data_dir}: no sequences found (no index*.json and no .npz files)")
    return [dict(e, path=str(data_dir / e["file"])) for e in sorted(entries.values(), key=lambda e: e["file"])]
