"""Where a learned-engine frame's time goes, on the bench scene (`engine.evaluation.bench`).

    OMP_NUM_THREADS=1 .venv/bin/python experiments/frame_cost.py [--vertices 10000] [--frames 96] [--model CKPT]

Prepares the bench's pinned, pushed rubber sphere (and once more: a cached prepare), then times
the frames a bake takes in blocks of 8 (the guard releases them 8 at a time) and prints the best
and the median block per frame (the best is what the machine gives when nothing else runs), and
the share of the latent step, of the Rayleigh damping (its stiffness is also Newton's first matrix), of
decoding and of the guard, from wall-clock timers around each.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def timed(owner, name, totals, key):
    """Wrap owner.name so its wall time adds up in totals[key]."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            totals[key] += time.perf_counter() - t
    setattr(owner, name, wrapper)


def main(argv=None) -> int:
    import engine.learned.runtime as runtime
    import engine.learned.integrators as integrators
    from engine.evaluation.bench import bench_mesh, bench_setup
    from engine.learned.checkpoint import default_model_path
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vertices", type=int, default=10000)
    p.add_argument("--frames", type=int, default=96)
    p.add_argument("--model", default=None)
    args = p.parse_args(argv)
    frames = 8 * max(2, args.frames // 8)
    engine = runtime.NeurokEngine(args.model or default_model_path())
    setup = bench_setup(bench_mesh(args.vertices), frames + 1)
    t0 = time.perf_counter()
    run = engine.prepare(setup)
    run.guard
    encode = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.prepare(setup).guard          # the same mesh again: the add-on's case (subspace, fit and guard cached)
    again = time.perf_counter() - t0
    totals = dict.fromkeys(("step", "rayleigh", "decode", "guard"), 0.0)
    timed(run, "_frame", totals, "step")
    timed(run, "decode", totals, "decode")
    timed(run.guard, "check", totals, "guard")
    timed(integrators, "rayleigh", totals, "rayleigh")
    it = run.frames()
    next(it)
    ticks = [time.perf_counter()]
    for _ in range(frames):
        next(it)
        ticks.append(time.perf_counter())
    blocks = np.diff(np.array(ticks)[::8]) * 1000.0 / 8
    print(f"{setup.num_vertices} vertices, encode {encode:.2f} s (again: {again:.2f} s); ms per frame over 8-frame blocks: "
          f"best {blocks.min():.2f}, median {np.median(blocks):.2f}")
    per_frame = {k: 1000.0 * v / frames for k, v in totals.items()}
    per_frame["step"] -= per_frame["rayleigh"]            # the damping is computed inside a frame's step
    print("ms per frame: " + ", ".join(f"{k} {v:.2f}" for k, v in per_frame.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
