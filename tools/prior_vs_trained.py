"""A checkpoint's trained closures against its own classical prior on the held-out scenes.

    .venv/bin/python tools/prior_vs_trained.py --model CKPT [--frames 36] [--json OUT.json] [--sheets DIR]
        [--physics eval_out/small/physics] [--require-closer] [--free-pins]

For each scene of the small evaluation preset (Blender primitives and the bundled samples,
`engine.evaluation.scenes`): the reference simulator's converged ground truth, as the evaluation
has it (`scene_eval.ground_truth_settings`; read from `--physics`, the physics `make eval-small`
keeps, when it is there, else computed and kept there: minutes per solid), then the
learned engine twice — the checkpoint as it is, and with every learned output layer (Lame
scales, correction, dissipation closure, skinning weight field) set to zero (`NeurokModel.classical_prior`), i.e. the
classical material in the eigenfunction subspace. Prints rel_l2 over
the whole rollout (mean vertex distance / rest diagonal) beside hold-still, and the lowest volume
/ rest, the mean edge strain and the largest share of flipped triangles of each (a run whose step
cannot be solved is scored holding its last good frame, and says so); `--sheets`
writes a contact sheet per scene (reference | trained | prior); `--free-pins` runs both with the
free body's handle weights (`subspace.HOLD_PINS` off: every handle moves the pins), as the model
had them before 2026-12-04's evening. This is the rule for the bundled model (issue 24): until a trained
model beats its prior here, the bundled checkpoint is the prior (`--require-closer`: exit 1 unless
its mean distance is below the prior's; `make train` copies it over the bundled one only then).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def measures(pred, true, setup) -> dict:
    from engine.core.measures import MeshMeasures
    diag = float(np.linalg.norm(np.ptp(setup.rest, axis=0)))
    n = min(len(pred), len(true))
    dist = np.linalg.norm(pred[:n] - true[:n], axis=-1).mean(axis=1) / diag
    frames = [MeshMeasures(setup.rest, setup.faces).frame(x) for x in pred[1:n]]
    volumes = [m["volume_ratio"] for m in frames if m["volume_ratio"] is not None]
    return {"rel_l2": float(dist[1:].mean()), "volume_min": min(volumes) if volumes else None,
            "strain": float(np.mean([m["edge_strain_mean"] for m in frames])),
            "flipped": float(max(m["flipped_share"] for m in frames)), "frames": int(n)}


def describe(m) -> str:
    volume = "n/a" if m["volume_min"] is None else f"{m['volume_min']:.2f}"
    fault = f", no step solved at frame {m['fault_frame']} (held from there)" if m.get("fault_frame") else ""
    return f"volume {volume}, strain {m['strain']:.1%}, flipped {m['flipped']:.0%}{fault}"


def main(argv=None) -> int:
    import torch

    from engine.core.scene import setup_from_scene
    from engine.evaluation.render import contact_sheet
    from engine.evaluation.physics_cache import KEPT, PhysicsCache, scene_job
    from engine.evaluation.scene_eval import ground_truth_settings
    from engine.evaluation.scenes import evaluation_scenes
    from engine.evaluation.suite import SMALL_SCENES
    from engine.evaluation.metrics import predict
    from engine.learned.checkpoint import default_model_path
    from engine.learned.runtime import NeurokEngine
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--frames", type=int, default=36)
    p.add_argument("--json", default=None)
    p.add_argument("--sheets", default=None, help="folder for a contact sheet per scene")
    p.add_argument("--physics", default="eval_out/small/physics", help="the evaluation's physics cache")
    p.add_argument("--free-pins", action="store_true",
                   help="both runs with handles of the free body (that move the pins too), as before the subspace held them")
    p.add_argument("--require-closer", action="store_true",
                   help="exit with status 1 unless the trained model's mean distance is below its prior's")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.free_pins:
        from engine.learned import subspace
        subspace.HOLD_PINS = False
    path = args.model or default_model_path()
    engines = {"trained": NeurokEngine(path), "prior": NeurokEngine(path)}
    engines["prior"].model.classical_prior()
    rows = {}
    physics = PhysicsCache(Path(args.physics), kept=KEPT)   # the ground truth kept in data/physics
    with tempfile.TemporaryDirectory() as tmp:    # Blender's primitives as make eval-small built them, where it did
        meshes = Path(args.physics).parent / "meshes"
        cases, _ = evaluation_scenes(SMALL_SCENES, args.frames, meshes if meshes.is_dir() else Path(tmp))
        for name, _, mesh, scene, _ in cases:
            setup = setup_from_scene(mesh, scene)
            true = physics.get(scene_job("reference", mesh, scene, **ground_truth_settings(None, name)))
            row = {"reference": measures(true, true, setup)}
            row["hold_still"] = measures(np.repeat(true[:1], len(true), 0), true, setup)["rel_l2"]
            runs = {}
            for label, engine in engines.items():   # a run that faults is held at its last good frame
                runs[label], fault, _, _ = predict(engine, setup)
                row[label] = dict(measures(runs[label], true, setup), fault_frame=fault)
            rows[name] = row
            if args.sheets:
                contact_sheet(dict(reference=true, **runs), setup.faces, Path(args.sheets) / f"{name}.png",
                              floor_z=setup.floor_z, title=f"{name}: reference | trained | classical prior")
            print(f"{name:11} hold still {row['hold_still']:.3f} | trained {row['trained']['rel_l2']:.3f} "
                  f"({describe(row['trained'])}) | prior {row['prior']['rel_l2']:.3f} ({describe(row['prior'])}) "
                  f"| reference ({describe(row['reference'])})", flush=True)
    mean = {k: float(np.mean([r[k]["rel_l2"] for r in rows.values()])) for k in engines}
    print(f"mean rel_l2: trained {mean['trained']:.3f}, prior {mean['prior']:.3f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"model": str(path), "scenes": rows, "mean": mean}, indent=1))
    if args.require_closer and not mean["trained"] < mean["prior"]:
        print(f"{path}: not closer to the reference than its classical prior; keep the bundled checkpoint")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
