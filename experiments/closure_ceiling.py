"""How close the closures could bring the prior at best: each tuned on the held-out scenes themselves.

    .venv/bin/python experiments/closure_ceiling.py [--model CKPT] [--only flag_wind,grid] [--json OUT.json]
        [--physics eval_out/small/physics] [--frames 36]

The model's learned closures are one number per kind of material: a multiplier of the Rayleigh
damping's beta (dissipation) and a compressed cloth edge's share of the membrane stiffness
(compression). This runs the classical prior (`NeurokModel.classical_prior`) on every scene of
the small evaluation preset with each pair of a grid of those numbers (the damping multiplier
over the closure's whole range, e^-1 .. e^1; the compression share for cloth), against the
reference's converged ground truth (`neurok prior-vs-trained` reads it the same way), and prints
each scene's best pair and its distance beside the prior's. The best pair is chosen per scene,
on the very scenes it is scored on: no closure of this form (one number per kind of material,
learned elsewhere) can do better, so the mean of the per-scene bests is a ceiling for what
training these closures can buy. Plausibility (strain, flipped triangles) is printed with each best.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np


DAMPING = (0.37, 0.5, 0.7, 1.0, 1.4, 2.0, 2.7)     # beta multipliers: the closure's range is e^-1 .. e^1
COMPRESSION = (1.0, 0.5, 0.25, 0.1, 0.05)          # a compressed edge's share (1: the reference's membrane)


def with_closures(setup, damping: float):
    """The setup with its material's beta scaled by `damping` (the dissipation closure's effect)."""
    out = copy.copy(setup)
    out.material = replace(setup.material, damping=setup.material.damping * damping)
    return out


def main(argv=None) -> int:
    import torch

    from engine.core.scene import setup_from_scene
    from engine.evaluation.metrics import predict
    from engine.evaluation.physics_cache import KEPT, PhysicsCache, scene_job
    from engine.evaluation.scene_eval import ground_truth_settings
    from engine.evaluation.scenes import evaluation_scenes
    from engine.evaluation.suite import SMALL_SCENES
    from engine.learned.checkpoint import default_model_path
    from engine.learned.runtime import NeurokEngine
    from engine.evaluation.prior_vs_trained import describe, measures
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--frames", type=int, default=36)
    p.add_argument("--only", default=None, help="comma-separated scene names")
    p.add_argument("--json", default=None)
    p.add_argument("--physics", default="eval_out/small/physics", help="the evaluation's physics cache")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    engine = NeurokEngine(args.model or default_model_path())
    engine.model.classical_prior()
    physics = PhysicsCache(Path(args.physics), kept=KEPT)   # the ground truth kept in data/physics
    only = None if args.only is None else set(args.only.split(","))
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        meshes = Path(args.physics).parent / "meshes"
        cases, _ = evaluation_scenes(SMALL_SCENES, args.frames, meshes if meshes.is_dir() else Path(tmp))
        for name, _, mesh, scene, _ in cases:
            if only is not None and name not in only:
                continue
            setup = setup_from_scene(mesh, scene)
            true = physics.get(scene_job("reference", mesh, scene, **ground_truth_settings(None, name)))
            hold = measures(np.repeat(true[:1], len(true), 0), true, setup)["rel_l2"]
            shares = COMPRESSION if setup.material.kind == "cloth" else (1.0,)
            grid = {}
            for share in shares:
                engine.model.energy.cloth_compression = share
                for damping in DAMPING:
                    pred, fault, _, _ = predict(engine, with_closures(setup, damping))
                    grid[(damping, share)] = dict(measures(pred, true, setup), fault_frame=fault)
            engine.model.energy.cloth_compression = 1.0
            prior = grid[(1.0, 1.0)]
            best_key = min(grid, key=lambda k: grid[k]["rel_l2"])
            best = grid[best_key]
            rows[name] = {"hold_still": hold, "prior": prior, "best": best,
                          "best_damping": best_key[0], "best_compression": best_key[1],
                          "grid": {f"{d} {c}": g["rel_l2"] for (d, c), g in grid.items()}}
            print(f"{name:11} hold still {hold:.3f} | prior {prior['rel_l2']:.3f} ({describe(prior)}) | best "
                  f"{best['rel_l2']:.3f} = {best['rel_l2'] / prior['rel_l2']:.2f}x the prior at damping x{best_key[0]}, "
                  f"compression {best_key[1]} ({describe(best)})", flush=True)
    prior_mean = float(np.mean([r["prior"]["rel_l2"] for r in rows.values()]))
    best_mean = float(np.mean([r["best"]["rel_l2"] for r in rows.values()]))
    print(f"mean rel_l2: prior {prior_mean:.3f}, each scene's best closures {best_mean:.3f} "
          f"({best_mean / prior_mean:.2f}x the prior; the target is 0.75x)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"scenes": rows, "prior_mean": prior_mean, "best_mean": best_mean}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
