"""Sheet dynamics side by side: the latent step alone, the full-space layer (L-BFGS) with the
latent prediction, the same layer from inertia alone, and projective dynamics (local-global) in
its place, on the flag in wind, the pinned grid and the cloth dropped on a table, against the
reference simulator (which it runs first: about 2.5 minutes on one core).

    OMP_NUM_THREADS=1 python experiments/sheet_layer_designs.py [--scenes flag_wind grid drape] [--frames 36]

Prints per scene and design: distance to the reference over the rollout (and over holding still),
mean edge strain, flipped triangles, the far edge's fall at frame 4 (pinned scenes) and the
overhang's tilt from vertical at the last frame (drape), and ms per frame (the bake alone).
"""
from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np


def designs():
    return ("latent alone", "layer (L-BFGS) from the latent step", "layer (L-BFGS) from inertia",
            "projective dynamics (30 iterations) from the latent step")


def projective_dynamics(layer, h, iterations):
    """Local-global iterations of the layer's membrane, bending and pins (no contact, no damping
    beyond air): each edge projected onto its rest length, then one prefactored solve."""
    factor = layer._factor(h)

    def step(frame, end, x_n, v_n, guess, h):
        target = np.asarray(layer.setup.pin_target(frame + 1), dtype=np.float64)
        m = layer.mass[:, None]
        constant = (m / h ** 2 * (x_n + h * v_n) + layer.air * m / h * x_n + layer.forces(frame, x_n, v_n)
                    + layer.pin_k[:, None] * target + layer.Q @ layer.rest)
        x = np.array(guess, dtype=np.float64)
        for _ in range(iterations):
            d = x[layer.edges[:, 1]] - x[layer.edges[:, 0]]
            length = np.maximum(np.linalg.norm(d, axis=1), 1e-12)
            x = factor.solve(constant + layer.D.T @ ((layer.k * layer.rest_length / length)[:, None] * d))
        return x, (x - x_n) / h
    return step


def prepared(model, setup, design):
    """The run of one design, prepared (its mesh encoded)."""
    from engine.learned.runtime import NeurokRun
    if design == "latent alone":
        return NeurokRun(model.model, setup, "cpu", "matched", model.meta, sheet_layer="off")
    run = NeurokRun(model.model, setup, "cpu", "matched", model.meta, sheet_layer="on")
    if design.startswith("projective"):
        run.layer.step = projective_dynamics(run.layer, setup.dt / run.substeps, 30)
    if design.endswith("from inertia"):
        run._layer_substep = lambda frame, end, q, qd, x, v, h: (q, qd) + run.layer.step(
            frame, end, x, v, x + h * v, h)
    return run


def measures(xs, ref, setup, name):
    from engine.core.measures import MeshMeasures
    from engine.evaluation.scenes import overhang_tilt
    diagonal = float(np.linalg.norm(np.ptp(ref[0], axis=0)))
    distance = lambda a: float(np.mean([np.linalg.norm(a[t] - ref[t], axis=1).mean() for t in range(1, len(ref))])) / diagonal
    hold = distance(np.repeat(ref[:1], len(ref), 0))
    mm = MeshMeasures(np.asarray(setup.rest), np.asarray(setup.faces))
    strain = lambda a: 100 * float(np.mean([np.abs(mm.edge_strain(x)).mean() for x in a[1:]]))
    flipped = lambda a: 100 * float(np.mean([mm.flipped_share(x) for x in a[1:]]))
    d = distance(xs)
    out = f"{d:.4f} ({d / hold:.3f}x hold-still) | strain {strain(xs):.2f} % (ref {strain(ref):.2f}) | flipped {flipped(xs):.0f} % (ref {flipped(ref):.0f})"
    from engine.evaluation.scene_eval import far_edge
    far = far_edge(ref)
    if far is not None:
        fall = lambda a: -1000 * float((a[4][far] - a[0][far]).mean(0)[2])
        out += f" | far edge falls {fall(xs):.0f} mm by frame 4 (ref {fall(ref):.0f})"
    if name == "drape":
        tilt = lambda a: overhang_tilt(a[-1], setup.rest, setup.faces, 0.25)
        out += f" | overhang {tilt(xs):.0f} deg from vertical (ref {tilt(ref):.0f})"
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", nargs="*", default=["flag_wind", "grid", "drape"])
    p.add_argument("--frames", type=int, default=36, help="frames of the flag and grid (the drape: 48)")
    args = p.parse_args(argv)
    import torch
    from engine.api import open_engine
    from engine.core.scene import setup_from_scene
    from engine.evaluation.scene_eval import reference_rollout
    from engine.evaluation.scenes import evaluation_scenes
    torch.set_num_threads(1)
    model = open_engine("neurok", device="cpu")
    with tempfile.TemporaryDirectory() as meshes:
        cases, _ = evaluation_scenes([s for s in args.scenes if s != "drape"], args.frames, meshes)
        if "drape" in args.scenes:
            cases += evaluation_scenes(["drape"], 48, meshes)[0]
    for name, _, mesh, scene, _ in cases:
        setup = setup_from_scene(mesh, scene)
        ref = reference_rollout(setup)
        for design in designs():
            run = prepared(model, setup, design)
            start = time.perf_counter()
            xs = np.asarray(run.bake())
            ms = 1000 * (time.perf_counter() - start) / (len(xs) - 1)
            print(f"{name} | {design}: {measures(xs, ref, setup, name)} | {ms:.0f} ms/frame", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
