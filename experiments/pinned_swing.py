"""Pinned solids that swing (issue 43): the learned engine and the oracle against the reference.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/pinned_swing.py [cylinder] [cone]

- cylinder: the coarse 24-segment cylinder of tests/test_stiffness.py (0.1 m across, 0.5 m long,
  E = 200 kPa, no damping) held by its top cap and started at 0.8 m/s sideways, 48 frames; the
  amplitude of its bottom cap's sideways motion;
- cone: a 2 m cone of 98 vertices (Blender's default size, 32 segments, 3 rings), jelly at
  E = 30 kPa, nu = 0.45, pinned at its lower quarter, its upper quarter pushed by a 25 m/s^2 sine
  at 1.5 Hz, 36 frames; the peak-to-peak sideways motion of its upper half (the reference: ~5 min).
Each: the model's and the oracle's (8 / 16 handles; the cone also 32) amplitude over the
reference's, and their mean distance from it over hold-still's.
"""
from __future__ import annotations

import argparse
import runpy
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def cone(segments=32, rings=3, radius=1.0, depth=2.0):
    from engine.core.formats import Mesh
    a = 2 * np.pi * np.arange(segments) / segments
    v, f = [], []
    for r in range(rings):
        t = r / rings
        v += [[radius * (1 - t) * np.cos(x), radius * (1 - t) * np.sin(x), -depth / 2 + t * depth] for x in a]
    tip, base = len(v), len(v) + 1
    v += [[0, 0, depth / 2], [0, 0, -depth / 2]]
    for r in range(rings - 1):
        for i in range(segments):
            j = (i + 1) % segments
            p, q, s, u = r * segments + i, r * segments + j, (r + 1) * segments + j, (r + 1) * segments + i
            f += [[p, q, s], [p, s, u]]
    top = (rings - 1) * segments
    for i in range(segments):
        j = (i + 1) % segments
        f += [[top + i, top + j, tip], [base, j, i]]
    return Mesh(np.array(v), np.array(f), "cone")


def cases():
    test_module = runpy.run_path(str(ROOT / "experiments" / "friction_and_rods.py"))["test_module"]
    test_module("test_reference")
    cylinder = test_module("test_stiffness").cylinder     # the tests' own rod
    swing = {"format": "neurok.scene/1", "frames": 48, "dt": 1 / 24,
             "material": {"kind": "solid", "stiffness": 2e5, "density": 1000, "poisson": 0.3, "damping": 0.0,
                          "air_damping": 0.0},
             "pins": [{"select": {"box": {"min": [0, 0, 1 - 1e-6], "max": [1, 1, 1]}}}],
             "initial": {"velocity": [0.8, 0, 0]}}
    push = {"format": "neurok.scene/1", "frames": 36, "dt": 1 / 24,
            "material": {"preset": "jelly", "stiffness": 3e4, "poisson": 0.45},
            "pins": [{"select": {"box": {"min": [0, 0, 0], "max": [1, 1, 0.25]}}}],
            "forces": [{"select": {"box": {"min": [0, 0, 0.75], "max": [1, 1, 1]}}, "accel": [25, 0, 0],
                        "profile": {"type": "sine", "frequency": 1.5}}]}
    return {"cylinder": (cylinder(), swing, "bottom", (8, 16)), "cone": (cone(), push, "upper", (8, 16, 32))}


def measure(name, mesh, scene, part, handles):
    from engine.api import open_engine
    from engine.core.scene import setup_from_scene
    from engine.evaluation.oracle import ReducedOracle
    from engine.evaluation.scene_eval import reference_rollout
    setup = setup_from_scene(mesh, scene)
    z = setup.rest[:, 2]
    watched = z < z.min() + 1e-9 if part == "bottom" else z > 0.5 * (z.min() + z.max())

    def amplitude(x):
        d = x[:, watched, 0].mean(axis=1) - setup.rest[watched, 0].mean()
        return float(d.max() - d.min())

    ref = reference_rollout(setup)
    still = np.repeat(setup.rest[None], len(ref), axis=0)
    dist = lambda x: float(np.linalg.norm(x - ref, axis=2).mean())    # noqa: E731
    run = open_engine("neurok", device="cpu").prepare(setup)
    rows = {"model": run.bake()}
    rows.update({f"oracle {h}": np.stack(list(ReducedOracle(setup, handles=h).iter_frames())) for h in handles})
    for who, x in rows.items():
        print(f"{name} {who}: amplitude {amplitude(x) / amplitude(ref):.2f}x the reference's, "
              f"{dist(x) / dist(still):.2f}x hold-still", flush=True)


def main(argv=None) -> int:
    import torch
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenes", nargs="*", default=["cylinder", "cone"])
    wanted = parser.parse_args(argv).scenes
    for name, (mesh, scene, part, handles) in cases().items():
        if name in wanted:
            measure(name, mesh, scene, part, handles)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
