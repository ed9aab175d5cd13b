"""Balance: a ball at rest, equal and opposite pushes, a ball thrown along the floor (issue 23).

    OMP_NUM_THREADS=1 .venv/bin/python experiments/balance.py [--model CKPT] [--radius 0.25] [--json OUT.json]
        [--cases throw] [--cells 8] [--lattice-floor nodes] [--solid-layer on] [--layer-iterations 20 60]
        [--no-reference]

A UV sphere (`evaluation.scenes.uv_sphere`, 16 rings x 32 segments) of `--radius` metres, 72
frames at 1/24 s (3 s), each case in the learned engine and in the reference simulator:
- rest: rubber and jelly set on the floor under gravity; how far the centre of the vertices
  moves sideways (mm, most over the run) and down (mm, at the end: squash and floor penetration);
- push: no floor, no gravity; +-20 m/s^2 on the left and right thirds for 1 s; how far the
  centre of the vertices moves (mm, most) and, for the model, the centre of its own masses
  (the lattice nodes': the vertex centre wobbles as the embedded surface deforms);
- throw: jelly on the floor, 2 m/s along x; where it is after 3 s (mm) and the model's over the
  reference's.

`--cases` runs only the cases whose names start with these words; `--cells` and `--lattice-floor`
set the reference's lattice (default: the evaluation's, 12 cells; `--order` its elements) and how its nodes meet the floor
(`reference.simulator.LATTICE_FLOORS`; default "body", the reference's own: the body stands on the floor;
"nodes": the lattice's nodes too, a flat sole, as before solid physics 4).
`--solid-layer on` runs the learned engine with its fine level (`learned/solid_layer.py`), once per
`--layer-iterations` count; `--no-reference` leaves the reference out (the model's rows alone).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def cases(radius):
    box = lambda lo, hi: {"box": {"min": lo, "max": hi}}   # noqa: E731
    floor = {"z": -radius}
    base = {"format": "neurok.scene/1", "frames": 72, "dt": 1.0 / 24.0}
    push = {"type": "constant", "start": 0, "end": 24}
    return {
        "rest rubber": dict(base, material={"preset": "rubber"}, floor=floor),
        "rest jelly": dict(base, material={"preset": "jelly"}, floor=floor),
        "push rubber": dict(base, material={"preset": "rubber"}, gravity=[0, 0, 0], forces=[
            {"select": box([0, 0, 0], [0.333, 1, 1]), "accel": [-20, 0, 0], "profile": push},
            {"select": box([0.667, 0, 0], [1, 1, 1]), "accel": [20, 0, 0], "profile": push}]),
        "throw jelly": dict(base, material={"preset": "jelly"}, floor=floor, initial={"velocity": [2.0, 0, 0]}),
    }


def node_centre(run, frames):
    sub, scene = run.scene.sub, run.scene
    out = []
    for x in frames:
        q = scene.encode(sub.norm.forward(x)).numpy()
        out.append(sub.norm.inverse((sub.node_mass[:, None] * (sub.nodes + sub.node_basis @ q)).sum(axis=0)))
    return np.array(out)


def main(argv=None) -> int:
    import torch
    from engine.api import open_engine
    from engine.core.scene import setup_from_scene
    from engine.core.setup import DETAILS
    from engine.evaluation.scene_eval import reference_rollout
    from engine.evaluation.scenes import uv_sphere
    from engine.reference.simulator import LATTICE_FLOORS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--radius", type=float, default=0.25)
    p.add_argument("--json", default=None)
    p.add_argument("--detail", choices=DETAILS, default="medium",
                   help="the learned engine's level of detail (a scene's \"detail\")")
    p.add_argument("--cases", nargs="*", default=None, help="only the cases starting with these words (rest, push, throw)")
    p.add_argument("--cells", type=int, default=None, help="the reference's lattice (default: the evaluation's)")
    p.add_argument("--lattice-floor", choices=LATTICE_FLOORS, default="body",
                   help="how the reference's lattice nodes meet the floor")
    p.add_argument("--order", type=int, choices=(1, 2), default=None,
                   help="the reference's elements: 1 linear, 2 quadratic tetrahedra (default: the evaluation's)")
    p.add_argument("--solid-layer", choices=("off", "on"), default="off", help="the learned engine's fine level")
    p.add_argument("--layer-iterations", type=int, nargs="*", default=None,
                   help="the fine level's iterations per substep (one model run each)")
    p.add_argument("--no-reference", action="store_true", help="the model alone")
    args = p.parse_args(argv)
    from engine.evaluation.scene_eval import REFERENCE_SETTINGS
    settings = dict(REFERENCE_SETTINGS, lattice_floor=args.lattice_floor,
                    **({"lattice_cells": args.cells} if args.cells else {}), **({"order": args.order} if args.order else {}))
    torch.set_num_threads(1)
    engine = open_engine("neurok", model=args.model, device="cpu")
    ball = uv_sphere(args.radius)
    out = {}
    for name, scene in cases(args.radius).items():
        if args.cases and not any(name.startswith(c) for c in args.cases):
            continue
        scene = dict(scene, detail=args.detail)
        setup = setup_from_scene(ball, scene)
        ref = None if args.no_reference else reference_rollout(setup, settings)
        for iterations in args.layer_iterations or [None]:
            run = engine.prepare(setup, solid_layer=args.solid_layer)
            if iterations is not None and run.layer is not None:
                run.layer.iterations = iterations
            t0 = time.perf_counter()
            model = run.bake()
            seconds = time.perf_counter() - t0
            row = {}
            for who, x in (("model", model), ("reference", ref)):
                if x is None:
                    continue
                c = x.mean(axis=1)
                side = 1000 * np.linalg.norm(c[:, :2] - c[0, :2], axis=1)
                row[who] = {"sideways_mm_most": float(side.max()), "down_mm_end": float(1000 * (c[0, 2] - c[-1, 2])),
                            "x_mm_end": float(1000 * (c[-1, 0] - c[0, 0])),
                            "moved_mm_most": float(1000 * np.linalg.norm(c - c[0], axis=1).max()),
                            "lowest_mm_below_floor": float(1000 * max(0.0, -args.radius - float(x[:, :, 2].min())))}
            row["model"]["ms_per_frame"] = 1000 * seconds / len(model)
            if name.startswith("push"):
                n = node_centre(run, model[::4])
                row["model"]["mass_centre_moved_mm_most"] = float(1000 * np.linalg.norm(n - n[0], axis=1).max())
            if name.startswith("throw") and ref is not None:
                row["model_over_reference"] = row["model"]["x_mm_end"] / row["reference"]["x_mm_end"]
            key = name if args.solid_layer == "off" else f"{name}, fine level, {iterations or 'default'} iterations"
            out[key] = row
            print(key, json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
