"""The run time's stepping schemes side by side (`learned.runtime.SCHEMES`): the default
"matched" (a solid: the theta method at 1/24 s, damping as the reference's backward Euler at
1/48 s; a sheet: backward Euler at 1/48 s) against plain backward Euler at 1/48 s.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/step_schemes.py [--scenes eval_out/small/scenes] [--repeats 4]

Prints, per scheme:
- the pinned beam of the evaluation (`evaluation.scenes.beam_scene`, 72 frames, no material
  damping: only the integrator damps): static sag, first frequency and damping ratio;
- a rubber cube spinning freely at 6 rad/s with Rayleigh damping (tests/test_model.py's case):
  kinetic energy kept after 12 frames over the reference's;
- every evaluation scene whose reference frames are saved in `--scenes` (`make eval-small` keeps
  them as NAME.npz): rel_l2 over the whole rollout (x hold-still) and the amplitude ratio;
- the bench's 10k-vertex rubber sphere (`evaluation.bench.bench_setup`, 48 frames): ms per frame,
  best and median of `--repeats` bakes, the schemes run alternately.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def spinning_cube(frames=12):
    from engine.core.scene import setup_from_scene
    from engine.training.shapes import make_sample
    mesh = make_sample("jelly")
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, 0.0],
             "material": {"preset": "rubber", "damping": 0.02, "air_damping": 0.0}, "pins": [], "forces": []}
    setup = setup_from_scene(mesh, scene)
    setup.v0 = np.cross([0.0, 0.0, 6.0], mesh.vertices - mesh.vertices.mean(axis=0))
    return setup


def kinetic_kept(frames):
    ke = [float(np.sum((b - a) ** 2)) for a, b in ((frames[0], frames[1]), (frames[-2], frames[-1]))]
    return ke[1] / ke[0]


def main(argv=None) -> int:
    import torch
    from engine.core.scene import setup_from_scene
    from engine.evaluation.bench import bench_mesh, bench_setup
    from engine.evaluation.distances import bbox_diagonal, rel_l2_curve
    from engine.evaluation.metrics import sequence_metrics
    from engine.evaluation.physical import beam_quantities
    from engine.evaluation.scenes import beam_mesh, beam_scene, evaluation_scenes
    from engine.learned.checkpoint import default_model_path
    from engine.learned.runtime import NeurokEngine
    from engine.reference.simulator import ReferenceSimulator
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--scenes", default="eval_out/small/scenes")
    p.add_argument("--repeats", type=int, default=4)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    schemes = ("matched", "backward_euler")
    engines = {s: NeurokEngine(args.model or default_model_path(), integrator=s) for s in schemes}

    beam = setup_from_scene(beam_mesh(), beam_scene(72))
    for s, engine in engines.items():
        q = beam_quantities(engine.prepare(beam).bake(), beam.rest, beam.dt)
        print(f"beam, {s}: sag {1000 * q['sag']:.1f} mm, frequency {q['frequency']:.3f} Hz, "
              f"damping ratio {q['damping_ratio']:.3f}", flush=True)

    spin = spinning_cube()
    reference = kinetic_kept(np.stack(list(ReferenceSimulator(spin).iter_frames())))
    for s, engine in engines.items():
        print(f"spinning cube, {s}: kinetic energy kept {kinetic_kept(engine.prepare(spin).bake()) / reference:.2f}x "
              f"the reference's", flush=True)

    saved = Path(args.scenes)
    names = sorted(f.stem for f in saved.glob("*.npz")) if saved.is_dir() else []
    cases, _ = evaluation_scenes(tuple(names), 36, saved.parent / "meshes") if names else ([], None)
    for name, _, mesh, scene, _ in cases:
        true = np.load(saved / f"{name}.npz")["reference"]
        setup = setup_from_scene(mesh, dict(scene, frames=len(true)))
        still = rel_l2_curve(np.repeat(true[:1], len(true), 0), true, bbox_diagonal(setup.rest))[1:].mean()
        for s, engine in engines.items():
            m = sequence_metrics(engine.prepare(setup).bake(), true, setup, with_chamfer=False)
            print(f"{name}, {s}: rel_l2 {m['rel_l2_mean']:.4f} ({m['rel_l2_mean'] / still:.2f}x hold-still), "
                  f"amplitude {m['amplitude_ratio']:.2f}", flush=True)

    setup = bench_setup(bench_mesh(10000), 49)
    times = {s: [] for s in schemes}
    for _ in range(args.repeats):
        for s, engine in engines.items():
            run = engine.prepare(setup)
            t = time.perf_counter()
            run.bake()
            times[s].append(1000.0 * (time.perf_counter() - t) / (setup.frames - 1))
    for s, ms in times.items():
        print(f"10k rubber sphere, {s}: {min(ms):.2f} ms per frame best, {np.median(ms):.2f} median", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
