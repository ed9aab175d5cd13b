"""How far a sheet's rollout moves when its start moves by a micrometre: the reference simulator
against itself, and the learned engine (its default run, and with the latent state running its own
course as before the two-way coupling: "one-way") against the reference, on the flag in wind, the pinned grid and the cloth dropped on a table (`make eval-small`'s sheets).

Each start adds independent noise of `--noise` metres (1 um) to every coordinate of the scene's
first frame. A flat sheet is at the edge of buckling (which way it first folds is a rounding
error's choice) and a cloth sliding off a table picks its folds the same way, so a distance to
one reference rollout carries that spread: a model cannot be judged closer to the reference
than the reference is to itself from a start a micrometre away.

    OMP_NUM_THREADS=1 python experiments/sheet_sensitivity.py [--scenes flag_wind grid drape]
        [--starts 3] [--frames 36] [--noise 1e-6] [--variants model "model, one-way"]

Prints per scene and start the line of `scene_eval.sheet_summary` (distance over the rollout and
over holding still, mean edge strain, flipped triangles, the far edge's fall by frame 4 or the
overhang's tilt), then the spread of the hold-still multiples. About 25 minutes on one core with
three starts (the drape's reference takes most of it).
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np


def perturbed(setup, noise, seed):
    """The setup with `noise` metres of independent Gaussian noise on its first frame (seed 0: as is)."""
    if seed == 0:
        return setup
    x0 = np.asarray(setup.x0, np.float64)
    return replace(setup, x0=x0 + noise * np.random.default_rng(seed).standard_normal(x0.shape))


VARIANTS = ("model", "model, one-way")


def prepared(engine, setup, variant):
    """The learned run of one variant (`VARIANTS`), prepared."""
    run = engine.prepare(setup)
    if variant.endswith("one-way"):
        run.config = replace(run.config, latent_follows=False)
    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", nargs="*", default=["flag_wind", "grid", "drape"])
    p.add_argument("--starts", type=int, default=3, help="perturbed starts per engine (besides the start as is)")
    p.add_argument("--frames", type=int, default=36, help="frames of the flag and grid (the drape: 48, as in the evaluation)")
    p.add_argument("--noise", type=float, default=1e-6, help="metres of noise on each coordinate of the first frame")
    p.add_argument("--variants", nargs="*", default=["model", "model, one-way"], choices=VARIANTS)
    args = p.parse_args(argv)
    import torch
    from engine.api import open_engine
    from engine.evaluation.scene_eval import distance_and_hold_still, reference_rollout, sheet_setups, sheet_summary
    torch.set_num_threads(1)
    engine = open_engine("neurok", device="cpu")
    for name, setup in sheet_setups(args.scenes, args.frames):
        ref = reference_rollout(setup)
        spread = {"reference": [], **{variant: [] for variant in args.variants}}
        for seed in range(1, args.starts + 1):
            xs = reference_rollout(perturbed(setup, args.noise, seed))
            spread["reference"].append(distance_and_hold_still(xs, ref)[1])
            print(f"{name} | reference, start {seed}: {sheet_summary(xs, ref, setup, name)}", flush=True)
        for seed in range(args.starts + 1):
            for who in args.variants:
                xs = np.asarray(prepared(engine, perturbed(setup, args.noise, seed), who).bake())
                spread[who].append(distance_and_hold_still(xs, ref)[1])
                label = "as is" if seed == 0 else f"start {seed}"
                print(f"{name} | {who}, {label}: {sheet_summary(xs, ref, setup, name)}", flush=True)
        for who, values in spread.items():
            print(f"{name} | {who}: {np.mean(values):.3f}x hold-still on average "
                  f"({min(values):.3f}-{max(values):.3f}) over {len(values)} starts", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
