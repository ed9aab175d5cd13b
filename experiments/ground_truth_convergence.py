"""Is the evaluation's ground truth converged? The reference on the evaluation's solid scenes at
several lattice resolutions, each run against the finest, beside the model.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/ground_truth_convergence.py \
        [--scenes toy_drop,torus,monkey,jelly_poke] [--cells 4,8,12,16] [--frames 36] [--cache DIR]
        [--data DIR --files seq_00002.npz,seq_00017.npz]

`--vertex-floor`: the floor (and nothing else) acts on the mesh's vertices only, not also on the
lattice's nodes as the reference has it (a diagnostic: the nodes' floor stands a body on the
lattice's flat sole; without it, nodes under a vertex the floor holds can sink).
`--data`/`--files`: training sequences instead (their recorded setups, cut to `--frames`), to
see whether the data a model learns from is the converged physics it is judged against.

For each scene and lattice (quadratic cells along the longest side; the reference caps a body at
500 occupied cells, so the cells it really used are printed): the seconds it took, the body's
up-axis tilt at the last frame (degrees, best-fit rotation), rel_l2 over the whole rollout to the
finest run (mean vertex distance / rest bounding-box diagonal), and the bundled model's rel_l2 and
hold-still (frame 0 forever) against that run. `--cache DIR` keeps each run as DIR/NAME_CELLS.npy
and reuses it. A run the reference gives up on (its work budget) is listed and left out. The
evaluation's ground truth (`engine/evaluation/scene_eval.EVALUATION_LATTICE`)
should sit where the distance to the finest run has stopped mattering.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def tilt_degrees(x0, x1) -> float:
    """Angle between the body's up axis at rest and at x1 (best-fit rotation, Kabsch)."""
    from engine.core.measures import best_rotation
    return float(np.degrees(np.arccos(np.clip(best_rotation(x0, x1)[2, 2], -1.0, 1.0))))


def reference_frames(setup, cells, cache: Path | None, name: str, vertex_floor=False):
    """The reference's frames at `cells` (from the cache when there) and its seconds (None if
    cached), or (None, why) when the reference gave up."""
    from engine.evaluation.scene_eval import REFERENCE_SETTINGS
    from engine.reference.budget import WorkBudgetExceeded
    from engine.reference.simulator import ReferenceSimulator
    path = cache / f"{name}_{cells}{'_vertex_floor' if vertex_floor else ''}.npy" if cache else None
    if path is not None and path.exists():
        return np.load(path), None
    t0 = time.perf_counter()
    sim = ReferenceSimulator(setup, **{**REFERENCE_SETTINGS, "lattice_cells": cells})
    try:
        x = np.stack(list(sim.iter_frames())).astype(np.float32)
    except WorkBudgetExceeded as e:
        return None, str(e).split(":", 1)[-1].strip()[:100]
    if path is not None:
        np.save(path, x)
    return x, time.perf_counter() - t0


def floor_on_vertices_only():
    """Make the reference's floor skip the lattice nodes (it is called with their masses)."""
    from engine.reference.simulator import ReferenceSimulator
    floor = ReferenceSimulator._floor_terms

    def vertices_only(self, x, need_hess, mass=None, below=0.0):
        if mass is not None:
            return 0.0, np.zeros(x.size), None
        return floor(self, x, need_hess)
    ReferenceSimulator._floor_terms = vertices_only


def main(argv=None) -> int:
    from engine.api import default_model_path, open_engine
    from engine.core.formats import read_sequence
    from engine.core.scene import setup_from_scene, setup_from_sequence
    from engine.evaluation.distances import bbox_diagonal, rel_l2_curve
    from engine.evaluation.metrics import predict
    from engine.evaluation.scenes import evaluation_scenes
    from engine.reference.lattice import Lattice
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", default="toy_drop,torus,monkey,jelly_poke")
    p.add_argument("--cells", default="4,8,12,16")
    p.add_argument("--frames", type=int, default=36)
    p.add_argument("--cache", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--data", default=None, help="a data folder: measure its sequences --files instead of scenes")
    p.add_argument("--files", default="", help="comma-separated sequence files in --data")
    p.add_argument("--vertex-floor", action="store_true", help="the floor on the mesh's vertices only (diagnostic)")
    args = p.parse_args(argv)
    if args.vertex_floor:
        floor_on_vertices_only()
    cells = sorted(int(c) for c in args.cells.split(","))
    cache = Path(args.cache) if args.cache else None
    if cache:
        cache.mkdir(parents=True, exist_ok=True)
    engine = open_engine("neurok", model=args.model or default_model_path(), device="cpu")
    if args.data:
        cases = []
        for f in args.files.split(","):
            setup = setup_from_sequence(read_sequence(Path(args.data) / f))
            setup.frames = min(setup.frames, args.frames)
            cases.append((Path(f).stem, setup))
    else:
        scenes, _ = evaluation_scenes(args.scenes.split(","), args.frames, Path(args.cache or ".") / "meshes")
        cases = [(name, setup_from_scene(mesh, scene)) for name, _, mesh, scene, _ in scenes]
    print("| scene | cells asked | cells used (x, y, z / occupied) | seconds | tilt at the end | rel_l2 to the finest | model: rel_l2 (x hold-still) |")
    print("|---|---|---|---|---|---|---|")
    for name, setup in cases:
        if setup.material.kind != "solid":
            continue
        diag = bbox_diagonal(setup.rest)
        pred = predict(engine, setup)[0]
        runs = {c: reference_frames(setup, c, cache, name, args.vertex_floor) for c in cells}
        done = [c for c in cells if runs[c][0] is not None]
        finest = runs[done[-1]][0]
        dist = lambda a, b: float(rel_l2_curve(a, b, diag)[1:].mean())   # noqa: E731
        for c in cells:
            x, seconds = runs[c]
            lat = Lattice(np.asarray(setup.rest), np.asarray(setup.faces), c)
            used = f"{', '.join(str(len(pl) - 1) for pl in lat.planes)} / {len(lat.cell_ids)}"
            if x is None:
                print(f"| {name} | {c} | {used} | gave up: {seconds} | | | |", flush=True)
                continue
            hold = dist(np.repeat(x[:1], len(x), 0), x)
            model = dist(pred, x)
            print(f"| {name} | {c} | {used} | {'cached' if seconds is None else f'{seconds:.0f}'} | "
                  f"{tilt_degrees(x[0], x[-1]):.1f} deg | {dist(x, finest):.4f} | {model:.4f} ({model / hold:.2f}x) |",
                  flush=True)
        print(f"| {name} | model | | | {tilt_degrees(pred[0], pred[-1]):.1f} deg | {dist(pred, finest):.4f} | |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
