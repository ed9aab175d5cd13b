"""Replay imported sequences (e.g. Blender cloth bakes) with one or more checkpoints and print
JSON: rel_l2 per sequence and model, the hold-still baseline, and their ratio.

    python experiments/eval_foreign.py --data data/blender_cloth \
        --model default=assets/neurok_default.ckpt --model finetuned=runs/blender_cloth.ckpt

rel_l2 of a sequence = mean over frames t of (mean over vertices of |x_pred(t) - x_true(t)|) /
the rest shape's bounding-box diagonal. Hold-still keeps frame 0 for every frame. Each model
replays the recorded setup (`setup_from_sequence`: frame 0, gravity, pins, material, dt) with
`open_engine('neurok', model).prepare(setup).bake()`. `ratio` = mean rel_l2 / mean hold-still
over the sequences; `--target 0.3` marks whether each model's ratio is at most that.
`--material NAME=PRESET` replays model NAME with the learned material PRESET (the recorded numbers,
refined by what that preset learned; `neurok train --material`).
`--sheets DIR` writes a contact sheet per sequence (recorded | each model).
`--reference` also replays with the engine's own full-space simulator (how far the recorded
setup, material mapping included, is from what the reference physics does).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np


from engine.api import SimulationFault, open_engine
from engine.core.formats import NeurokError, read_sequence
from engine.training.generate import load_index
from engine.core.scene import setup_from_sequence


def rel_l2(pred: np.ndarray, true: np.ndarray, rest: np.ndarray) -> float:
    diag = float(np.linalg.norm(np.ptp(rest, axis=0))) or 1.0
    return float((np.linalg.norm(pred - true, axis=2).mean(axis=1) / diag).mean())


def replay(engine, seq, preset=None):
    """Predicted frames [T,N,3]; after a SimulationFault the last good frame is held."""
    setup = setup_from_sequence(seq)
    if preset:
        setup.material = replace(setup.material, preset=preset)
    try:
        return engine.prepare(setup).bake(), None
    except SimulationFault as fault:
        good = fault.positions if fault.positions is not None and len(fault.positions) else seq.positions[:1]
        pad = np.repeat(good[-1:], seq.frames - len(good), axis=0)
        return np.concatenate([good, pad]), f"fault at frame {fault.frame}"


def evaluate(data, models: dict, split="validation", reference=False, target=None, limit=None, presets=None,
             sheets=None) -> dict:
    entries = [e for e in load_index(data) if e.get("split", "train") in split.split(",")]
    if limit:
        entries = entries[:limit]
    if not entries:
        raise NeurokError(f"{data}: no sequences in split '{split}'")
    engines = {name: open_engine("neurok", path, device="cpu") for name, path in models.items()}
    if reference:
        engines["reference"] = open_engine("reference")
    rows = []
    for e in entries:
        seq = read_sequence(e["path"])
        true = seq.positions.astype(np.float64)
        row = {"file": e["file"], "scenario": e.get("scenario"), "frames": seq.frames,
               "hold_still": round(rel_l2(np.repeat(true[:1], seq.frames, axis=0), true, seq.rest), 5),
               "rel_l2": {}, "seconds": {}, "faults": {}}
        columns = {"recorded": true}
        for name, eng in engines.items():
            t0 = time.perf_counter()
            pred, fault = replay(eng, seq, (presets or {}).get(name))
            row["seconds"][name] = round(time.perf_counter() - t0, 2)
            row["rel_l2"][name] = round(rel_l2(pred.astype(np.float64), true, seq.rest), 5)
            columns[name] = pred
            if fault:
                row["faults"][name] = fault
        if sheets:
            from engine.evaluation.render import contact_sheet
            Path(sheets).mkdir(parents=True, exist_ok=True)
            contact_sheet(columns, seq.faces, Path(sheets) / f"{Path(e['file']).stem}.png", floor_z=seq.floor_z,
                          title=f"{e['file']} ({e.get('scenario')}): " + " | ".join(columns))
        rows.append(row)
    hold = float(np.mean([r["hold_still"] for r in rows]))
    summary = {"hold_still": round(hold, 5)}
    for name in engines:
        mean = float(np.mean([r["rel_l2"][name] for r in rows]))
        s = {"rel_l2": round(mean, 5), "ratio": round(mean / hold, 4),
             "ratio_per_sequence_mean": round(float(np.mean([r["rel_l2"][name] / r["hold_still"] for r in rows])), 4),
             "faults": sum(1 for r in rows if name in r["faults"])}
        if target is not None:
            s["meets_target"] = bool(mean <= target * hold)
        summary[name] = s
    return {"data": str(data), "split": split, "sequences": len(rows), "models": dict(models), "presets": dict(presets or {}),
            "target_ratio": target, "summary": summary, "per_sequence": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="replay imported sequences with checkpoints; rel_l2 vs hold-still (JSON)")
    p.add_argument("--data", required=True)
    p.add_argument("--model", action="append", default=[], help="NAME=CKPT (repeat); a bare path is named by its stem")
    p.add_argument("--split", default="validation", help="split(s) to replay, comma-separated (e.g. heldout,validation)")
    p.add_argument("--reference", action="store_true", help="also replay with the reference simulator")
    p.add_argument("--target", type=float, default=0.3, help="ratio to hold-still that counts as met")
    p.add_argument("--material", action="append", default=[], help="NAME=PRESET: model NAME replays with that learned material")
    p.add_argument("--limit", type=int)
    p.add_argument("--json", help="also write the JSON here")
    p.add_argument("--sheets", help="folder for a contact sheet per sequence (recorded | each model)")
    args = p.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    models = {}
    for spec in args.model:
        name, _, path = spec.partition("=") if "=" in spec else (Path(spec).stem, "=", spec)
        models[name] = path
    try:
        presets = dict(spec.split("=", 1) for spec in args.material if "=" in spec)
        result = evaluate(args.data, models, args.split, args.reference, args.target, args.limit, presets, args.sheets)
    except NeurokError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
