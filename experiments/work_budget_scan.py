"""Measure the work the reference simulator's substeps do on ordinary scenes, against which its
work budget (engine/reference/budget.py) is set: per case the most Newton iterations,
line-search halvings, self-contact step limits and contact pair checks of any substep, with the
budget off. Groups: the demo scenes (bundled samples, default settings, as the add-on runs
them), the evaluation scenes (Blender primitives, the evaluation's settings), generated training
sequences, and (slow) the jelly sweep's heaviest rows (docs/PHYSICS.md (o)).

    python experiments/work_budget_scan.py --groups demo eval generated [--sequences FIRST:COUNT] [--frames N] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


from engine.core.scene import setup_from_scene
from engine.reference.budget import Work, setup_load
from engine.reference.simulator import ReferenceSimulator

GROUPS = ("demo", "eval", "generated", "sweep")


def demo_cases(frames):
    from engine.evaluation.heldout import bundled_samples, bundled_scenes
    samples, scenes = bundled_samples(), bundled_scenes()
    for scene_name, sample in (("toy_drop", "soft_toy"), ("jelly_poke", "jelly"), ("flag_wind", "flag")):
        scene = scenes[scene_name]
        if frames:
            scene = dict(scene, frames=min(frames, scene["frames"]))
        yield f"demo {scene_name}", setup_from_scene(samples[sample], scene), {}


def eval_cases(frames):
    from engine.evaluation.scene_eval import REFERENCE_SETTINGS
    from engine.evaluation.scenes import beam_mesh, beam_scene, evaluation_scenes
    names = ["monkey", "cone", "torus", "cylinder", "uv_sphere", "ico_sphere", "grid"]
    cases, notes = evaluation_scenes(names, frames or 48, Path(tempfile.gettempdir()) / "neurok_eval_cache")
    for note in notes:
        print(f"note: {note}", flush=True)
    for name, _, mesh, scene, _ in cases:
        yield f"eval {name}", setup_from_scene(mesh, scene), REFERENCE_SETTINGS
    yield "eval beam", setup_from_scene(beam_mesh(), beam_scene(frames or 48)), REFERENCE_SETTINGS


def generated_cases(frames, count=6, seed=1, first=0):
    """The generator's own draws (`make_sequence`), run here with the budget off."""
    from engine.training import generate
    runs = []
    original = generate.ReferenceSimulator

    def capture(setup, **options):
        runs.append((setup, options))
        raise _Captured
    generate.ReferenceSimulator = capture
    try:
        for i in range(first, first + count):
            try:
                generate.make_sequence(seed, i, frames=frames or 64)
            except _Captured:
                pass
    finally:
        generate.ReferenceSimulator = original
    for i, (setup, options) in enumerate(runs, start=first):
        yield f"generated seed {seed} #{i}", setup, options


class _Captured(Exception):
    pass


def sweep_cases(frames):
    """The sweep's 100x squeeze and poke (3 lattice cells), to just past the end of the load."""
    from engine.core.formats import read_mesh
    from engine.reference import stress
    mesh = read_mesh(str(Path(__file__).resolve().parent.parent / "assets" / "samples" / "jelly.obj"))
    for nu in (0.3, 0.45, 0.49):
        squeeze = dict(stress.squeeze_scene(100 * stress.training_squeeze(mesh), nu), frames=frames or 16)
        poke = dict(stress.jelly_scene(poke=100 * stress.TRAINING_POKE, poisson=nu, start=1, end=2), frames=frames or 8)
        for name, scene in ((f"sweep poke 100x nu {nu}", poke), (f"sweep squeeze 100x nu {nu}", squeeze)):
            yield name, setup_from_scene(mesh, stress.on_floor(mesh, scene)), {"lattice_cells": 3}


def measure(name, setup, options):
    sim = ReferenceSimulator(setup, budget=None, **options)
    sim.work_log = []
    t0 = time.perf_counter()
    for _ in sim.iter_frames():
        pass
    log = sim.work_log
    row = {"case": name, "frames": setup.frames, "substeps": len(log), "seconds": round(time.perf_counter() - t0, 1),
           "load": round(setup_load(setup, sim.diagonal), 4), "peak": sim.work_peak.as_dict(),
           "p99": {k: float(np.quantile([w.as_dict()[k] for w in log], 0.99)) for k in Work().as_dict()},
           "newton_cap_hits": sum(w.newton_iterations >= sim.newton_iterations for w in log)}
    print(json.dumps(row), flush=True)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", nargs="+", choices=GROUPS, default=["demo", "eval", "generated"])
    ap.add_argument("--frames", type=int, default=None, help="frames per case (default: each case's own)")
    ap.add_argument("--sequences", default="0:6", help="generated sequences FIRST:COUNT of seed 1 (make data's)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    first, count = (int(k) for k in args.sequences.split(":"))
    makers = {"demo": demo_cases, "eval": eval_cases, "sweep": sweep_cases,
              "generated": lambda frames: generated_cases(frames, count, first=first)}
    rows = [measure(*case) for group in args.groups for case in makers[group](args.frames)]
    peak = Work()
    for row in rows:
        peak.raise_to(Work(**row["peak"]))
    print(f"most work of any substep over {len(rows)} cases: {peak.as_dict()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "peak": peak.as_dict()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
