"""`neurok eval --model CKPT --data DIR --json OUT.json`: the learned engine against ground truth,
beside the baselines, the physics-exact reduced oracle and the noise floor.

For every sequence of the data folder the recorded setup is replayed (`setup_from_sequence` +
`api` engine `prepare` + `bake`) and measured against its true frames:
- distances (`distances.py`): rel_l2 at frames 1, 10, 50, 100, 200 (null where no sequence is
  that long) and as the rollout mean; horizon means over frames 1..24, 1..100 and the whole
  rollout; chamfer_l1 (up to 25 frames per sequence); unstable share; pin drift; centroid path
  error and motion amplitude relative to the reference;
- plausibility (`plausibility.py`) of the prediction AND of the ground truth: volume / rest
  (closed surfaces), mean and max edge strain, flipped-triangle share, growth, penetration below
  the floor; per sequence, then the mean and the worst over sequences.
Baselines on the same sequences (`baselines.py`, `oracle.py`): hold_still, pca_modal,
latent_mlp, and the oracle (the reference's own energy in a skinning-eigenmode subspace of the
model's latent size). The noise floor (`noise.py`) is measured on the first few sequences.
Energy drift per integrator (`energy.py`).

JSON (DESIGN.md section 5, extra keys welcome): {"model", "splits": {split: block}, "baselines":
{name: {split: block}}, "reference": {split: {"plausibility", "plausibility_worst"}},
"noise_floor": {...}, "energy_drift": {integrator: f}, "per_sequence": [...], ...}; a block is
{"rel_l2": {"1".."200", "mean"}, "chamfer_l1", "unstable_share", "sequences", "horizons":
{"24", "100", "all"}, "plausibility": {...}, "plausibility_worst": {...}, "centroid_path_error",
"amplitude_ratio", ...}.
"""
from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ..core.formats import NeurokError, atomic_write_text, read_sequence
from ..core.measures import MeshMeasures
from ..core.scene import setup_from_sequence
from ..training.generate import load_index
from .distances import (REPORT_FRAMES, amplitude_ratio, bbox_diagonal, centroid_path_error, chamfer_frames,
                        chamfer_l1, end_turn_degrees, first_unstable_frame, hold_from, horizon_means, pin_drift, rel_l2_curve,
                        sample_surface)
from .energy import ENERGY_STEPS, energy_drift
from .noise import mean_noise_floor
from .plausibility import aggregate_plausibility, plausibility_series, plausibility_summary
from .rollout import predict, predict_neurok   # noqa: F401 - also used from here by the other steps

__all__ = ["REPORT_FRAMES", "aggregate", "bbox_diagonal", "chamfer_l1", "evaluate", "evaluate_command",
           "first_unstable_frame", "predict_neurok", "rel_l2_curve", "sample_surface", "sequence_metrics",
           "write_json"]

SPLITS = ("train", "validation", "heldout")
NOISE_SEQUENCES = 1            # sequences the noise floor is measured on (two reference runs, one at twice the resolution)
NOISE_FRAMES = 24


# =========================================================================== one sequence

def truth_measures(true, setup) -> dict:
    """What is measured once per sequence on the ground truth and shared by every engine."""
    measures = MeshMeasures(setup.rest, setup.faces)
    series = plausibility_series(true, setup, measures)
    return {"measures": measures, "series": series, "summary": plausibility_summary(series)}


def sequence_metrics(pred, true, setup, fault=None, with_chamfer=True, truth=None, keep_series=False) -> dict:
    """Metrics of one rollout against its ground truth. `fault` is the frame where the engine
    gave up (None if it did not); `truth` is `truth_measures(true, setup)` when already made."""
    true = np.asarray(true, np.float64)
    diag = bbox_diagonal(setup.rest)
    bad = first_unstable_frame(pred, setup.rest, true)
    stop = min(x for x in (bad, fault, len(pred)) if x is not None)
    held = hold_from(pred, stop if stop < len(pred) else None)
    curve = rel_l2_curve(held, true, diag)
    T = len(true)
    truth = truth or truth_measures(true, setup)
    series = plausibility_series(held, setup, truth["measures"])
    out = {"frames": T, "curve": curve, "rel_l2_mean": float(curve[1:].mean()) if T > 1 else 0.0,
           "horizons": horizon_means(curve),
           "unstable": stop < len(pred), "unstable_frame": stop if stop < len(pred) else None,
           "pin_drift": pin_drift(held, setup, diag), "pin_drift_truth": pin_drift(true, setup, diag),
           "plausibility": plausibility_summary(series), "plausibility_24": plausibility_summary(series, 24),
           "truth_plausibility": truth["summary"],
           "centroid_path_error": centroid_path_error(held, true, diag), "amplitude_ratio": amplitude_ratio(held, true, diag),
           "end_turn_degrees": end_turn_degrees(held, true, setup.rest)}
    if keep_series:
        out["series"], out["truth_series"] = series, truth["series"]
    if with_chamfer and T > 1:
        out["chamfer_l1"] = float(np.mean([chamfer_l1(held[f], true[f], setup.faces, diag, seed=f)
                                           for f in chamfer_frames(T)]))
    return out


def _mean(values):
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(values)) if values else None


def aggregate(records) -> dict:
    """The DESIGN.md metric block over per-sequence records (and the extra keys above)."""
    block = {"rel_l2": {}, "chamfer_l1": None, "unstable_share": None, "sequences": len(records)}
    for f in REPORT_FRAMES:
        block["rel_l2"][str(f)] = _mean([r["curve"][f] for r in records if f < r["frames"]])
    block["rel_l2"]["mean"] = _mean([r["rel_l2_mean"] for r in records])
    block["chamfer_l1"] = _mean([r.get("chamfer_l1") for r in records])
    block["unstable_share"] = float(np.mean([r["unstable"] for r in records])) if records else None
    block["horizons"] = {k: _mean([r["horizons"].get(k) for r in records]) for k in ("24", "100", "all")}
    block["plausibility"], block["plausibility_worst"] = aggregate_plausibility([r.get("plausibility") for r in records])
    block["plausibility_24"], _ = aggregate_plausibility([r.get("plausibility_24") for r in records])
    block["centroid_path_error"] = _mean([r.get("centroid_path_error") for r in records])
    block["amplitude_ratio"] = _mean([r.get("amplitude_ratio") for r in records])
    block["rel_l2_last"] = _mean([r["curve"][-1] for r in records if r["frames"] > 1])   # each sequence's last frame
    block["last_frame"] = min((r["frames"] - 1 for r in records), default=None)
    block["pin_drift"] = _mean([r.get("pin_drift") for r in records])
    block["pin_drift_truth"] = _mean([r.get("pin_drift_truth") for r in records])   # the reference's own (pins are springs)
    if records:
        T = max(r["frames"] for r in records)
        block["rel_l2_curve"] = [_mean([r["curve"][t] for r in records if t < r["frames"]]) for t in range(T)]
    return block


def truth_block(records) -> dict:
    """Plausibility of the ground truth itself (the same measures, so the model's can be read
    against it)."""
    mean, worst = aggregate_plausibility([r.get("truth_plausibility") for r in records])
    return {"plausibility": mean, "plausibility_worst": worst, "sequences": len(records)}


# =========================================================================== the command

def machine_info() -> dict:
    import datetime
    info = {"platform": platform.platform(), "python": sys.version.split()[0], "torch": torch.__version__,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if "cpu" not in info:
        info["cpu"] = platform.processor() or platform.machine()
    try:
        info["cpu_affinity"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


def pick_entries(entries, max_sequences):
    """Up to max_sequences entries, taken round-robin over splits so every split is represented."""
    if not max_sequences or max_sequences >= len(entries):
        return entries
    by_split = {}
    for e in entries:
        by_split.setdefault(e.get("split", "train"), []).append(e)
    picked, k = [], 0
    while len(picked) < max_sequences:
        for split in sorted(by_split):
            if k < len(by_split[split]) and len(picked) < max_sequences:
                picked.append(by_split[split][k])
        k += 1
    return sorted(picked, key=lambda e: e["file"])


def evaluate(model_path, data_dir, max_sequences=None, latent_mlp=None, json_path="eval.json", mlp_minutes=None,
             mlp_steps=None, energy_steps=ENERGY_STEPS, integrator="matched", quiet=False,
             baselines=True, chamfer=True, entries=None, name=None, engine=None, energy_curves=False,
             oracle=True, oracle_handles=None, noise_sequences=NOISE_SEQUENCES, noise_frames=NOISE_FRAMES,
             energy_tight=None, physics=None) -> dict:
    """Evaluate a model on a data folder; returns the eval dict (see the module docstring).
    `engine` replaces the engine loaded from `model_path` (ablations); `entries` replaces the
    data folder's index (a subset); the oracle's runs and the noise floor come from `physics` (a
    `physics_cache.PhysicsCache`, see `eval_jobs`) when given."""
    from ..api import NeurokEngine, open_engine
    from ..core.progress import ProgressBar
    from .baselines import hold_still, pca_modal, resolve_latent_mlp, rollout_latent_mlp
    from .oracle import model_latent_size
    engine_given = engine is not None
    if engine is None:
        engine = (open_engine("neurok", model=model_path, device="cpu") if integrator == "matched"
                  else NeurokEngine(model_path, integrator=integrator))
    if entries is None:
        entries = pick_entries(load_index(data_dir), max_sequences)
    if not entries:
        raise NeurokError(f"{data_dir}: no sequences to evaluate")
    mlp, mlp_info = (None, {"skipped": "baselines off"})
    if baselines:
        mlp, mlp_info = resolve_latent_mlp(model_path, data_dir, json_path, latent_mlp, mlp_minutes, mlp_steps, quiet)
    latent = model_latent_size(engine)
    handles = oracle_handles            # None: per mesh, as many as the model's (`oracle.model_handles`)
    jobs = eval_jobs(entries, handles, noise_sequences, noise_frames, oracle=baselines and oracle)
    from .physics_cache import compute_now
    get = physics.get if physics is not None else compute_now
    names = (["hold_still", "pca_modal"] + (["latent_mlp"] if mlp is not None else [])
             + (["oracle"] if baselines and oracle else [])) if baselines else []
    records = {"neurok": [], **{n: [] for n in names}}
    per_sequence, noise = [], []
    bar = None if quiet else ProgressBar(len(entries), f"eval ({len(entries)} seq)")
    t_start = time.perf_counter()
    for k, e in enumerate(entries):
        seq = read_sequence(e["path"])
        setup = setup_from_sequence(seq)
        true = seq.positions
        truth = truth_measures(true, setup)
        pred, fault, err, ms = predict_neurok(engine, setup)
        rec = sequence_metrics(pred, true, setup, fault, chamfer, truth=truth)
        rec.update(entry=e, ms_per_frame=ms, error=err)
        records["neurok"].append(rec)
        row = {"file": e["file"], "split": e.get("split", "train"), "family": e.get("family"),
               "scenario": e.get("scenario"), "vertices": int(setup.num_vertices), "frames": int(setup.frames),
               "rel_l2_mean": rec["rel_l2_mean"], "rel_l2_last": float(rec["curve"][-1]), "horizons": rec["horizons"],
               "chamfer_l1": rec.get("chamfer_l1"), "unstable": rec["unstable"], "ms_per_frame": ms,
               "plausibility": rec["plausibility"], "truth_plausibility": truth["summary"],
               "centroid_path_error": rec["centroid_path_error"], "amplitude_ratio": rec["amplitude_ratio"]}
        if err:
            row["error"] = err
        if baselines:
            rs = sequence_metrics(hold_still(setup), true, setup, None, chamfer, truth=truth)
            records["hold_still"].append(rs)
            pp, info = pca_modal(true, setup)
            rp = sequence_metrics(pp, true, setup, None, chamfer, truth=truth)
            rp["pca"] = info
            records["pca_modal"].append(rp)
            row["baselines_rel_l2_mean"] = {"hold_still": rs["rel_l2_mean"], "pca_modal": rp["rel_l2_mean"]}
            if mlp is not None:
                pm, fm = rollout_latent_mlp(mlp, engine.model, setup)
                rm = sequence_metrics(pm, true, setup, fm, chamfer, truth=truth)
                records["latent_mlp"].append(rm)
                row["baselines_rel_l2_mean"]["latent_mlp"] = rm["rel_l2_mean"]
            if (e["file"], "oracle") in jobs:
                po, fo, eo, _, _ = get(jobs[e["file"], "oracle"])
                ro = sequence_metrics(po, true, setup, fo, chamfer, truth=truth)
                records["oracle"].append(ro)
                row["baselines_rel_l2_mean"]["oracle"] = ro["rel_l2_mean"]
                if eo:
                    row["oracle_error"] = eo
        if (e["file"], "noise_floor") in jobs:
            nf = get(jobs[e["file"], "noise_floor"])
            row["noise_floor"] = nf
            noise.append(nf)
        per_sequence.append(row)
        if bar:
            bar.update(1, postfix=f"{e.get('family')}/{e.get('scenario')} rel_l2 {rec['rel_l2_mean']:.4f}")
    if bar:
        bar.close()

    def split_blocks(recs, make=aggregate):
        out = {}
        for split in SPLITS + tuple(sorted({r["entry"].get("split", "train") for r in recs} - set(SPLITS))):
            chosen = [r for r, n in zip(recs, records["neurok"]) if n["entry"].get("split", "train") == split]
            if chosen:
                out[split] = make(chosen)
        out["all"] = make(recs)
        return out

    for name_, recs in records.items():  # attach entries to baseline records (same order)
        for r, n in zip(recs, records["neurok"]):
            r.setdefault("entry", n["entry"])
    result = {"format": "neurok.eval/2", "model": str(model_path), "data": str(data_dir), "integrator": integrator,
              "splits": split_blocks(records["neurok"]),
              "baselines": {n: split_blocks(records[n]) for n in names},
              "reference": split_blocks(records["neurok"], truth_block),
              "noise_floor": dict(mean_noise_floor(noise) if noise else {"available": False, "note": "not measured"},
                                  frames=noise_frames, measured_on=len(noise)),
              "families": _grouped(records["neurok"], "family"),
              "scenarios": _grouped(records["neurok"], "scenario"),
              "model_latent": latent,
              "baselines_info": {"hold_still": "every frame is frame 0",
                                 "pca_modal": f"per-sequence PCA (<= 8 modes) + linear 2nd-order model fitted on the first "
                                              f"{int(100 * 0.25)}% of that sequence's true frames (which it is shown), "
                                              "then rolled out", "latent_mlp": mlp_info,
                                 "oracle": {"handles": handles or "per mesh",
                                            "dofs": 12 * handles if handles else "as many handles (12 coordinates each) as the model has on each mesh",
                                            "model_latent": latent,
                                            "failed": sum("oracle_error" in row for row in per_sequence),
                                            "note": "the reference's energy, backward-Euler Newton in a skinning-eigenmode "
                                                    "subspace (affine handles x lowest Laplacian eigenvectors)"}},
              "ms_per_frame": _mean([r["ms_per_frame"] for r in records["neurok"]]),
              "per_sequence": per_sequence}
    if names:
        result["families_baselines"] = {n: _grouped(records[n], "family") for n in names}
    if energy_steps:
        model = getattr(engine, "model", None)
        runs = None
        if physics is not None and not engine_given:      # the model at model_path: its runs may be kept
            runs = {key: get(job) for key, job in drift_jobs(model_path, energy_steps, energy_curves, energy_tight).items()}
        result["energy_drift_detail"] = (energy_drift(model, steps=energy_steps, keep_curves=energy_curves, tight=energy_tight,
                                                      runs=runs) if model is not None
                                         else {"available": False, "note": "the engine exposes no model", "max": {}})
        result["energy_drift"] = result["energy_drift_detail"]["max"]
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    result["machine"] = machine_info()
    if name:
        result["name"] = name
    return result


def eval_jobs(entries, oracle_handles=None, noise_sequences=NOISE_SEQUENCES, noise_frames=NOISE_FRAMES,
              oracle=True) -> dict:
    """{(file, kind): physics_cache.Job} of an evaluation: the oracle on every sequence (at the data
    generator's settings, on the lattice the sequences were made on: `load_index`'s `lattice_cells`)
    and the noise floor of the first `noise_sequences`."""
    from ..training.generate import GENERATOR_LATTICE, GENERATOR_SUBSTEP
    from .physics_cache import sequence_job
    jobs = {}
    for k, e in enumerate(entries):
        if oracle:
            jobs[e["file"], "oracle"] = sequence_job("oracle", e["path"], handles=oracle_handles,
                                                     lattice_cells=e.get("lattice_cells") or GENERATOR_LATTICE,
                                                     substep=GENERATOR_SUBSTEP)
        if k < noise_sequences:
            frames = min(noise_frames, int(e.get("frames") or noise_frames))
            jobs[e["file"], "noise_floor"] = sequence_job("noise_floor", e["path"], frames=frames)
    return jobs


def drift_jobs(model_path, steps=ENERGY_STEPS, keep_curve=False, tight=None) -> dict:
    """{(mesh, integrator): physics_cache.Job} of the model's energy drift (`energy.energy_drift`)."""
    from ..learned.integrators import INTEGRATORS
    from .energy import ENERGY_MESHES
    from .physics_cache import drift_job
    return {(m, i): drift_job(model_path, m, i, steps=steps, keep_curve=keep_curve, tight=tight)
            for m in ENERGY_MESHES for i in INTEGRATORS}


def _grouped(records, key):
    groups = {}
    for r in records:
        groups.setdefault(str(r["entry"].get(key)), []).append(r)
    out = {}
    for k, rs in sorted(groups.items()):
        block = aggregate(rs)
        block.pop("rel_l2_curve", None)
        out[k] = block
    return out


def json_clean(obj):
    if isinstance(obj, dict):
        return {str(k): json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return json_clean(obj.tolist())
    return obj


def write_json(path, data):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(json_clean(data), indent=1))


def evaluate_command(model_path, data_dir, json_path, max_sequences=None, **kwargs):
    """`neurok eval`: evaluate and write the JSON; prints a one-line summary per split."""
    if model_path is None:
        from ..api import default_model_path
        model_path = default_model_path()
    result = evaluate(model_path, data_dir, max_sequences=max_sequences, json_path=json_path, **kwargs)
    write_json(json_path, result)
    for split, block in result["splits"].items():
        if split == "all":
            continue
        r, p = block["rel_l2"], block["plausibility"]
        base = {n: b.get(split, {}).get("rel_l2", {}).get("mean") for n, b in result["baselines"].items()}
        shown = ", ".join(f"{n} {v:.4f}" for n, v in base.items() if v is not None)
        print(f"{split}: {block['sequences']} seq, volume/rest min {_fmt(p.get('volume_ratio_min'), 2)}, edge strain "
              f"mean {_fmt(p.get('strain_mean'), 3)} max {_fmt(p.get('strain_max'), 3)}, flipped {_fmt(p.get('flipped_max'), 3)}; "
              f"rel_l2 mean {_fmt(r['mean'])} (first 24 {_fmt(block['horizons']['24'])}), chamfer "
              f"{_fmt(block['chamfer_l1'])}, unstable {block['unstable_share']:.2f}" + (f"; baselines: {shown}" if shown else ""))
    nf = result["noise_floor"]
    print("noise floor: " + (f"rel_l2 {_fmt(nf.get('rel_l2'))}" if nf.get("available") else nf.get("note", "not available")))
    if result.get("energy_drift"):
        print("energy drift over %d undamped steps: %s" % (result["energy_drift_detail"]["steps"],
              ", ".join(f"{k} {100 * v:.3g}%" for k, v in result["energy_drift"].items())))
    print(f"wrote {json_path}")
    return result


def _fmt(v, digits=4):
    return "n/a" if v is None else f"{v:.{digits}f}"
