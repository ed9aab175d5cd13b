"""Stress cases of the reference solid: large compression must not lose volume, and an elastic
body must spring back once the load is gone.

- `jelly_poke`: the bundled jelly demo (a 150 m/s^2 impulse on the top for two frames: 12.5 m/s
  of velocity change on a 3 kPa body) and the same jelly left alone, measured per frame;
- `sweep`: pokes and squeezes at 1x, 10x and 100x the top of the training generator's range on
  Poisson ratios 0.3, 0.45 and 0.49: least volume, NaN, recovery two seconds after the load.

    .venv/bin/python -m engine.evaluation.reference_stress --mesh assets/samples/jelly.obj --json sweep.json

prints the sweep as a markdown table (docs/PHYSICS.md quotes it);
`--weightless 10 0.45` runs one squeeze row and then goes on without gravity.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np
from scipy.spatial import cKDTree

from ..core.errors import SimulationFault
from ..core.formats import read_mesh
from ..core.measures import MeshMeasures, best_rotation
from ..core.geometry import vertex_normals, winding_numbers
from ..core.scene import MATERIAL_PRESETS, setup_from_scene
from ..reference.simulator import ReferenceSimulator

DT = 1.0 / 24.0
RECOVERY_FRAMES = 48            # two seconds after the load ends
TRAINING_POKE = 300.0           # m/s^2, top of engine/training/generate.py's poke range (1 frame)
TRAINING_SQUEEZE_LOAD = 0.25    # rho a L / E, top of its squeeze range (its MAX_SQUEEZE_STRAIN)
SQUEEZE_FRAMES = 12


def training_squeeze(mesh, preset="jelly"):
    """The generator's strongest squeeze (m/s^2) on this mesh of this material, along x."""
    m = MATERIAL_PRESETS[preset]
    return TRAINING_SQUEEZE_LOAD * m["stiffness"] / (m["density"] * float(np.ptp(mesh.vertices[:, 0])))


def inside_another_part(x, faces):
    """Mask of the vertices lying inside another part of the body: a point just outside the
    surface (a fifth of the mean edge length along the vertex normal) with winding number above
    ½. All false unless the surface passes through itself."""
    edge = float(np.linalg.norm(x[faces[:, 0]] - x[faces[:, 1]], axis=1).mean())
    outside = x + 0.2 * edge * vertex_normals(x, faces)
    return winding_numbers(outside, x, faces) > 0.5


def self_overlap(x, faces):
    """Number of vertices lying inside another part of the body (`inside_another_part`)."""
    return int(inside_another_part(x, faces).sum())


def on_floor(mesh, scene):
    """The scene with its floor ("FLOOR") at the mesh's lowest point."""
    return json.loads(json.dumps(scene).replace('"FLOOR"', repr(float(mesh.vertices[:, 2].min()))))


# The sweep measures how the material recovers, so its floor is frictionless: with Coulomb's
# mu = 0.5 the base sticks where a blow spread it, and the hammer-blown jelly still held 0.94 of
# its volume 2 s later (friction is measured in tests/test_friction.py).
SWEEP_FLOOR = {"z": "FLOOR", "friction": 0.0}


def jelly_scene(poke=150.0, poisson=None, frames=8 + RECOVERY_FRAMES + 1, start=6, end=8):
    """The jelly demo scene (assets/scenes/jelly_poke.json) with a poke of `poke` m/s^2."""
    material = {"preset": "jelly"} if poisson is None else {"preset": "jelly", "poisson": poisson}
    forces = [] if not poke else [{"select": {"sphere": {"center": [0.5, 0.5, 1.0], "radius": 0.3}},
                                   "accel": [0, 0, -poke], "profile": {"type": "impulse", "start": start, "end": end}}]
    return {"format": "neurok.scene/1", "frames": frames, "dt": DT, "gravity": [0, 0, -9.81],
            "material": material, "pins": [], "forces": forces, "floor": dict(SWEEP_FLOOR)}


def squeeze_scene(accel, poisson, frames=SQUEEZE_FRAMES + RECOVERY_FRAMES + 1):
    """Opposite pushes on the two x-ends (a quarter of the body each) for SQUEEZE_FRAMES frames."""
    forces = [] if not accel else [
        {"select": {"box": {"min": [0, 0, 0], "max": [0.25, 1, 1]}}, "accel": [accel, 0, 0],
         "profile": {"type": "constant", "end": SQUEEZE_FRAMES}},
        {"select": {"box": {"min": [0.75, 0, 0], "max": [1, 1, 1]}}, "accel": [-accel, 0, 0],
         "profile": {"type": "constant", "end": SQUEEZE_FRAMES}}]
    return {"format": "neurok.scene/1", "frames": frames, "dt": DT, "gravity": [0, 0, -9.81],
            "material": {"preset": "jelly", "poisson": poisson}, "pins": [], "forces": forces,
            "floor": dict(SWEEP_FLOOR)}


def run_measured(mesh, scene, lattice_cells, overlap_every=4):
    """Run a scene (its floor at the mesh's lowest point) and measure every frame: enclosed
    volume over rest and height; self-overlap on every `overlap_every`-th frame and the last
    (0: never; it costs about half a second a frame on the jelly); at the end the share of
    inverted quadrature points."""
    setup = setup_from_scene(mesh, on_floor(mesh, scene))
    sim = ReferenceSimulator(setup, lattice_cells=lattice_cells)
    measures = MeshMeasures(setup.rest, setup.faces)
    volume, height, overlap, finite, x = [], [], [], True, None
    t0 = time.perf_counter()
    try:
        for k, x in enumerate(sim.iter_frames()):
            volume.append(measures.frame(x)["volume_ratio"])
            height.append(float(np.ptp(x[:, 2])))
            if overlap_every and (k % overlap_every == 0 or k == setup.frames - 1):
                overlap.append(self_overlap(x, setup.faces))
    except SimulationFault:
        finite = False
    return {"volume": np.array(volume), "height": np.array(height), "finite": finite,
            "overlap_max": max(overlap, default=0), "overlap_end": overlap[-1] if overlap and finite else 0,
            "inverted_end": sim.inverted_share() if finite else 1.0, "last": x,
            "symmetries": rest_symmetries(np.asarray(mesh.vertices, dtype=float)),
            "energy_end": sim.energy() if finite else float("nan"),
            "seconds": time.perf_counter() - t0}


def rest_symmetries(rest, tol=1e-6):
    """Vertex maps [k, N] of the axis flips and swaps about the centre that carry the rest mesh
    onto itself (the identity first; 48 for the jelly cube, 1 for a body without symmetry)."""
    centred = rest - rest.mean(axis=0)
    tree, maps = cKDTree(centred), []
    for perm in itertools.permutations(range(3)):
        for signs in itertools.product((1.0, -1.0), repeat=3):
            dist, idx = tree.query(centred[:, perm] * np.array(signs))
            if dist.max() <= tol * np.ptp(rest, axis=0).max():
                maps.append(idx)
    return np.array(maps)


def shape_error(x, resting, symmetries=None):
    """RMS distance of the vertices from the same body left alone (`resting`, same vertex order)
    after the best rotation and translation, over the resting body's largest extent: zero when
    the body is back in shape wherever it lies, whichever way it faces. With the rest mesh's
    `symmetries`, the least over them: a soft jelly cube sags into a lopsided lump, and after a
    blow it may settle in the same lump turned by a symmetry of the cube, which is the same shape."""
    def error(ref):
        R = best_rotation(ref, x)
        a = (ref - ref.mean(axis=0)) @ R.T
        return np.sqrt(((a - (x - x.mean(axis=0))) ** 2).sum(axis=1).mean())
    maps = [np.arange(len(x))] if symmetries is None else symmetries
    return float(min(error(resting[m]) for m in maps) / np.ptp(resting, axis=0).max())


def recovery(run, resting):
    """Figures of a loaded run against the same body left alone, at the last frame."""
    return {"min_volume": float(run["volume"].min()), "end_volume": float(run["volume"][-1]),
            "shape_vs_resting": (shape_error(run["last"], resting["last"], run["symmetries"]) if run["finite"]
                                 else float("inf")),
            "end_volume_vs_resting": float(run["volume"][-1] / resting["volume"][-1]),
            "end_height_vs_resting": float(run["height"][-1] / resting["height"][-1]),
            "inverted_end": run["inverted_end"], "finite": run["finite"],
            "max_overlap": int(run["overlap_max"]), "end_overlap": int(run["overlap_end"]),
            "energy_vs_resting": float(run["energy_end"] - resting["energy_end"])}


def recovered(r, tol=0.05):
    """Back where the same body left alone is, 2 s after the load: volume and height within `tol`
    of the resting jelly's (a compressible jelly this soft sags to 0.75 of its rest volume under
    its own weight at nu = 0.3, so the rest volume itself is out of reach), its shape within `tol`
    (`shape_error`: volume and height alone pass a skewed lump), nothing inverted and no part
    inside another. The least volume during the load is reported beside it, not part of it (the
    hammer-blow check keeps its own 50 % floor)."""
    return (r["finite"] and abs(r["end_volume_vs_resting"] - 1.0) <= tol
            and r["shape_vs_resting"] <= tol and r["end_overlap"] == 0
            and abs(r["end_height_vs_resting"] - 1.0) <= tol and r["inverted_end"] == 0.0)


def sweep(mesh, lattice_cells=3, multipliers=(1, 10, 100), poissons=(0.3, 0.45, 0.49), log=print):
    rows = []
    for nu in poissons:
        rest_poke = run_measured(mesh, jelly_scene(poke=0.0, poisson=nu, start=1, end=2,
                                                   frames=2 + RECOVERY_FRAMES + 1), lattice_cells, overlap_every=0)
        rest_squeeze = run_measured(mesh, squeeze_scene(0.0, nu), lattice_cells, overlap_every=0)
        for m in multipliers:
            for case, scene, resting in (
                    ("poke", jelly_scene(poke=m * TRAINING_POKE, poisson=nu, start=1, end=2,
                                         frames=2 + RECOVERY_FRAMES + 1), rest_poke),
                    ("squeeze", squeeze_scene(m * training_squeeze(mesh), nu), rest_squeeze)):
                run = run_measured(mesh, scene, lattice_cells, overlap_every=1)
                row = dict(case=case, multiplier=m, poisson=nu, seconds=run["seconds"], **recovery(run, resting))
                row["recovered"] = recovered(row)
                rows.append(row)
                log(table_row(row))
    return rows


def weightless_after(mesh, scene, lattice_cells=3, seconds=3.0, every=0.5):
    """Run a scene (its floor at the mesh's lowest point), then go on with gravity and the floor
    taken away. Returns (seconds after the scene's end, shape against the rest mesh up to its
    symmetries, vertices inside another part) at the end and every `every` seconds: a body that
    springs back returns to its rest shape there, whatever state its weight held it in."""
    setup = setup_from_scene(mesh, on_floor(mesh, scene))
    sim = ReferenceSimulator(setup, lattice_cells=lattice_cells)
    rest = np.asarray(mesh.vertices, dtype=float)
    symmetries = rest_symmetries(rest)
    for x in sim.iter_frames():
        pass
    measured = [(0.0, shape_error(x, rest, symmetries), self_overlap(x, setup.faces))]
    setup.gravity, setup.floor_z = np.zeros(3), None
    per = max(1, round(every / setup.dt))
    for k in range(1, round(seconds / setup.dt) + 1):
        x = sim.step_frame()
        if k % per == 0:
            measured.append((k * setup.dt, shape_error(x, rest, symmetries), self_overlap(x, setup.faces)))
    return measured


TABLE_HEAD = ("| case | × training top | ν | min volume | volume 2 s after (vs resting) | height vs resting | "
              "shape vs resting | inverted at end | self-overlap max / end | energy vs resting (J) | finite | "
              "recovered |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def table_row(r):
    return (f"| {r['case']} | {r['multiplier']}× | {r['poisson']} | {r['min_volume']:.3f} | {r['end_volume']:.3f} "
            f"({r['end_volume_vs_resting']:.3f}) | "
            f"{r['end_height_vs_resting']:.3f} | {r['shape_vs_resting']:.3f} | {r['inverted_end']:.1%} | {r['max_overlap']} / {r['end_overlap']} | "
            f"{r['energy_vs_resting']:+.2f} | "
            f"{'yes' if r['finite'] else 'NaN'} | "
            f"{'yes' if r['recovered'] else 'no'} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mesh", default="assets/samples/jelly.obj")
    ap.add_argument("--lattice-cells", type=int, default=3)
    ap.add_argument("--poisson", type=float, nargs="+", default=[0.3, 0.45, 0.49],
                    help="Poisson ratios to sweep (run several processes for several cores)")
    ap.add_argument("--json")
    ap.add_argument("--weightless", nargs=2, type=float, metavar=("MULTIPLE", "POISSON"),
                    help="instead of the sweep: the squeeze row of this multiple and Poisson ratio, then 3 s "
                         "with gravity and the floor taken away (shape against the rest mesh)")
    args = ap.parse_args(argv)
    if args.weightless:
        mesh = read_mesh(args.mesh)
        multiple, poisson = args.weightless
        for t, shape, inside in weightless_after(mesh, squeeze_scene(multiple * training_squeeze(mesh), poisson),
                                                 args.lattice_cells):
            print(f"{t:.1f} s without gravity: shape {shape:.3f} of the body's size off its rest shape, "
                  f"{inside} vertices inside another part", flush=True)
        return
    print(TABLE_HEAD, flush=True)
    rows = sweep(read_mesh(args.mesh), args.lattice_cells, poissons=tuple(args.poisson),
                 log=lambda s: print(s, flush=True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
