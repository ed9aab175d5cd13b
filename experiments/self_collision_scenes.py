"""Self-collision on the evaluation's sheets: how many triangle pairs cross a frame with the scene key
`self_collision` and without it, in the reference simulator and in the learned engine with its
sheet layer, what it costs a frame, and how far the learned engine is from the reference of the
same setting (issue 54's targets: at most 0.5 crossing pairs a frame for the reference, 1 for the
learned engine, and at most 50 % more time a frame).

    OMP_NUM_THREADS=1 python experiments/self_collision_scenes.py [--scenes flag_wind grid drape]
        [--frames 36] [--distance 0.005] [--out eval_out/self_collision]

Prints a row per scene and setting; writes `results.json` and a contact sheet per scene (reference
and learned engine, without and with self-collision) into --out.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np


def crossings(xs, faces) -> float:
    """Mean crossing triangle pairs a frame (frame 0 left out: the rest state)."""
    from engine.evaluation.plausibility import crossing_triangle_pairs
    return float(np.mean([crossing_triangle_pairs(x, faces) for x in xs[1:]]))


def timed(run) -> tuple[np.ndarray, float]:
    """(frames, ms a frame) of a rollout."""
    start = time.perf_counter()
    xs = np.asarray(run())
    return xs, 1000.0 * (time.perf_counter() - start) / (len(xs) - 1)


def one_scene(model, name, mesh, scene, distance) -> dict:
    from engine.core.scene import setup_from_scene
    from engine.evaluation.scene_eval import reference_rollout, sheet_summary
    out, frames = {}, {}
    for label, key in (("off", None), ("on", {"distance": distance})):
        setup = setup_from_scene(mesh, scene if key is None else dict(scene, self_collision=key))
        ref, ref_ms = timed(lambda: reference_rollout(setup))
        run = model.prepare(setup, sheet_layer="on")
        xs, ms = timed(run.bake)
        out[label] = {"reference": {"crossings": crossings(ref, setup.faces), "ms_per_frame": ref_ms},
                      "neurok": {"crossings": crossings(xs, setup.faces), "ms_per_frame": ms,
                                 "against_that_reference": sheet_summary(xs, ref, setup, name)}}
        frames[label] = (ref, xs)
    return out, frames, setup.floor_z


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", nargs="*", default=["flag_wind", "grid", "drape"], choices=["flag_wind", "grid", "drape"])
    p.add_argument("--frames", type=int, default=36)
    p.add_argument("--distance", type=float, default=0.005, help="the thickness layer in metres (Blender's default 5 mm)")
    p.add_argument("--out", default="eval_out/self_collision")
    args = p.parse_args(argv)
    import torch
    from engine.api import open_engine
    from engine.evaluation.render import contact_sheet
    from engine.evaluation.scenes import evaluation_scenes
    torch.set_num_threads(1)
    model = open_engine("neurok", device="cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cases, _ = evaluation_scenes(tuple(args.scenes), args.frames, Path(tmp))
    results = {}
    for name, _, mesh, scene, _ in cases:
        results[name], frames, floor_z = one_scene(model, name, mesh, scene, args.distance)
        for label, r in results[name].items():
            m, ref = r["neurok"], r["reference"]
            print(f"{name:9s} self-collision {label:3s}: crossing pairs a frame reference {ref['crossings']:.1f}, "
                  f"learned {m['crossings']:.1f} | ms a frame reference {ref['ms_per_frame']:.0f}, learned "
                  f"{m['ms_per_frame']:.0f} | learned against that reference: {m['against_that_reference']}", flush=True)
        runs = {f"reference, {k}": v[0] for k, v in frames.items()} | {f"NeuROK, {k}": v[1] for k, v in frames.items()}
        contact_sheet(runs, mesh.faces, out / f"{name}.png", rows=5, floor_z=floor_z,
                      title=f"{name}: self-collision off / on ({1000 * args.distance:g} mm)")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"written {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
