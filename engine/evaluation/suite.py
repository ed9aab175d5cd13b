"""`neurok evalsuite --preset small|full [--out DIR] [--model CKPT]`: regenerate docs/EVALUATION.md.

Steps (each writes JSON under OUT, so the report can be rebuilt and checked):
1. an evaluation set, seed 2 (the default training set uses seed 1), always including the
   held-out shape families (capsule, torus): small 6 x 60 frames, full 24 x 200 frames;
2. the latent-MLP baseline, trained in the model's latent space on the model's own training
   data (the folder recorded in the checkpoint; the evaluation set's train split otherwise);
3. `eval.json`: the learned engine, hold-still, PCA-modal and latent-MLP baselines per split,
   family and scenario, pin drift, energy drift per integrator;
4. `stress.json`: long rollouts, force scales 0.1x..100x the largest training push, very soft
   and very stiff materials, one shape at several vertex counts, a thin plate and a mesh of two
   separate bodies; ground truth from the reference simulator at the data generator's settings
   where affordable;
5. `bench.json`: speed against the reference simulator and Blender's cloth;
6. `ablations.json` (full preset): latent sizes by short training runs, integrators, a
   prior-only potential;
7. docs/EVALUATION.md with tables, the targets met or missed, and figures in docs/figures/.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ..core.formats import Mesh, NeurokError, read_sequence
from ..core.progress import ProgressBar

ROOT = Path(__file__).resolve().parent.parent
PUSH_MAX = 30.0       # m/s^2: the largest uniform push in the training scenes (generate.random_scene)

PRESETS = {
    "small": {"sequences": 6, "heldout": 2, "frames": 60, "seed": 2, "mlp_minutes": 1.0,
              "bench_sizes": (1000, 10000), "bench_frames": 6,
              "long_frames": 300, "force_scales": (0.1, 1.0, 10.0, 100.0), "stress_frames": 24,
              "resolutions": (1000, 10000), "truth_max_vertices": 2000, "truth_max_force": 10.0,
              "ablations": False},
    "full": {"sequences": 24, "heldout": 6, "frames": 201, "seed": 2, "mlp_minutes": 6.0,   # frame 0..200
             "bench_sizes": (1000, 10000, 100000), "bench_frames": 24,
             "long_frames": 1000, "force_scales": (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0), "stress_frames": 48,
             "resolutions": (1000, 10000, 100000), "truth_max_vertices": 12000, "truth_max_force": None,
             "ablations": True, "ablation_minutes": 8.0, "ablation_sequences": 8, "ablation_latents": (8, 16, 32, 64)},
}

TARGETS = {"ms_10k": 8.0, "ms_100k": 60.0, "reference_speedup_10k": 100.0, "baseline_factor_200": 2.0,
           "energy_drift": 0.01}


# =========================================================================== 1. evaluation set

def pick_indices(seed, sequences, heldout):
    """Sequence indices of a data set made with `seed` whose shape families give `heldout`
    held-out and `sequences - heldout` other sequences (the family is the first random draw)."""
    from ..training.generate import HELDOUT_FAMILIES
    from ..training.shapes import FAMILIES
    chosen, held, other, i = [], 0, 0, 0
    while len(chosen) < sequences and i < 100000:
        family = str(np.random.default_rng([seed, i]).choice(FAMILIES))
        if family in HELDOUT_FAMILIES and held < heldout:
            chosen.append(i); held += 1
        elif family not in HELDOUT_FAMILIES and other < sequences - heldout:
            chosen.append(i); other += 1
        i += 1
    return chosen


def make_eval_set(out, seed, sequences, heldout, frames, workers=None, quiet=False):
    """Generate (or resume) the chosen sequences into `out` with an `index.json`."""
    from ..training.generate import make_sequences
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "index.json"
    entries = {}
    if index_path.is_file():
        for e in json.loads(index_path.read_text())["sequences"]:
            if (out / e["file"]).is_file() and e.get("frames") == frames:
                entries[e["file"]] = e
    indices = pick_indices(seed, sequences, heldout)
    todo = [i for i in indices if f"seq_{i:05d}.npz" not in entries]
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
    bar = None if quiet else ProgressBar(len(todo), f"eval set ({len(todo)} to make)")
    make_sequences(out, seed, todo, frames, 1.0 / 24.0, workers, index_path, max(indices) + 1, None, entries, bar)
    return out


# =========================================================================== 4. stress suite

def _scene(frames, material, pins=True, accel=(0.0, 0.0, 0.0), floor=None, velocity=(0.0, 0.0, 0.0)):
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, -9.81],
             "material": dict(material), "pins": [], "forces": [], "floor": floor,
             "initial": {"velocity": list(velocity)}}
    if pins:
        scene["pins"].append({"select": {"box": {"min": [0, 0, 0], "max": [0.15, 1, 1]}}, "strength": 1.0})
    if any(accel):
        scene["forces"].append({"select": {"box": {"min": [0, 0, 0], "max": [1, 1, 1]}}, "accel": list(accel),
                                "profile": {"type": "constant"}})
    return scene


def two_bodies(rng, target=1200):
    from ..training.shapes import make_shape
    a = make_shape("sphere", rng, target // 2)
    b = make_shape("blob", rng, target // 2)
    shift = np.array([1.2 * (np.ptp(a.vertices[:, 0]) + np.ptp(b.vertices[:, 0])) / 2, 0.0, 0.0])
    bz = b.vertices + shift
    bz[:, 2] += a.vertices[:, 2].min() - b.vertices[:, 2].min()     # both rest on the same floor
    v = np.concatenate([a.vertices, bz])
    f = np.concatenate([a.faces, b.faces + len(a.vertices)])
    return Mesh(v - 0.5 * (v.min(0) + v.max(0)), f, name="two_bodies")


def thin_plate(rng, target=1200, thickness=0.04):
    from ..training.shapes import make_shape
    m = make_shape("box", rng, target)
    v = m.vertices.copy()
    # flatten along the shortest axis of the bounding box to 4% of the longest side
    ext = np.ptp(v, axis=0)
    axis = int(np.argmin(ext))
    c = v[:, axis].mean()
    v[:, axis] = c + (v[:, axis] - c) * thickness * ext.max() / max(ext[axis], 1e-9)
    return Mesh(v, m.faces, name="thin_plate")


def stress_cases(cfg):
    """(name, group, parameter, mesh, scene, want truth) of the stress suite."""
    from ..training.shapes import make_shape
    frames = cfg["stress_frames"]
    rubber = {"preset": "rubber"}
    blob = make_shape("blob", np.random.default_rng(5), 800)
    box = make_shape("box", np.random.default_rng(6), 800)
    cases = [("long: pinned swing", "long", cfg["long_frames"], blob,
              _scene(cfg["long_frames"], rubber, velocity=(0.0, 1.0, 0.5)), False),
             ("long: drop on floor", "long", cfg["long_frames"], box,
              _scene(cfg["long_frames"], {"preset": "jelly"}, pins=False, floor={"z": float(box.vertices[:, 2].min()) - 0.1},
                     velocity=(0.3, 0.0, -1.0)), False)]
    for s in cfg["force_scales"]:
        truth = cfg.get("truth_max_force") is None or s <= cfg["truth_max_force"]
        cases.append((f"force {s:g}x", "force", s, blob, _scene(frames, rubber, accel=(0.0, s * PUSH_MAX, 0.0)), truth))
    for E in (500.0, 1e7):
        cases.append((f"material E={E:g} Pa", "material", E, blob,
                      _scene(frames, {"preset": "rubber", "stiffness": E}, accel=(0.0, PUSH_MAX / 3, 0.0)), True))
    for n in cfg["resolutions"]:
        sphere = make_shape("sphere", np.random.default_rng(0), n)
        cases.append((f"resolution {len(sphere.vertices)} v", "resolution", len(sphere.vertices), sphere,
                      _scene(frames, rubber, accel=(0.0, PUSH_MAX / 3, 0.0)), len(sphere.vertices) <= cfg["truth_max_vertices"]))
    two = two_bodies(np.random.default_rng(7))
    cases.append(("two separate bodies", "topology", None, two,
                  _scene(frames, rubber, pins=False, accel=(0.0, PUSH_MAX / 3, 0.0),
                         floor={"z": float(two.vertices[:, 2].min())}), True))
    plate = thin_plate(np.random.default_rng(8))
    cases.append(("thin plate (4%)", "topology", None, plate, _scene(frames, rubber), True))
    return cases


def run_stress(cfg, model_path, quiet=False):
    from ..api import SimulationFault
    from .metrics import bbox_diagonal, first_unstable_frame, predict_neurok, rel_l2_curve, sequence_metrics
    from ..training.generate import GENERATOR_LATTICE, GENERATOR_SUBSTEP
    from ..reference.simulator import ReferenceSimulator
    from ..learned.runtime import NeurokEngine
    from ..core.scene import setup_from_scene
    engine = NeurokEngine(model_path)
    cases = stress_cases(cfg)
    bar = None if quiet else ProgressBar(len(cases), "stress")
    rows, preds = [], {}
    for name, group, param, mesh, scene, want_truth in cases:
        setup = setup_from_scene(mesh, scene)
        t0 = time.perf_counter()
        pred, fault, err, ms = predict_neurok(engine, setup)
        t1 = time.perf_counter()
        row = {"name": name, "group": group, "param": param, "vertices": int(len(mesh.vertices)), "frames": setup.frames,
               "ms_per_frame": ms, "nan": bool(not np.all(np.isfinite(pred))), "fault": fault, "error": err,
               "seconds": round(t1 - t0, 2)}
        truth = None
        if want_truth:
            try:
                sim = ReferenceSimulator(setup, lattice_cells=GENERATOR_LATTICE, substep=GENERATOR_SUBSTEP)
                truth = np.stack(list(sim.iter_frames())).astype(np.float32)
                row["reference_seconds"] = round(time.perf_counter() - t1, 1)
            except (SimulationFault, ValueError, RuntimeError, AssertionError) as e:   # no ground truth for this case
                row["truth_error"] = f"{type(e).__name__}: {str(e)[:160]}"
        if truth is not None:
            m = sequence_metrics(pred, truth, setup, fault)
            still = rel_l2_curve(np.repeat(truth[:1], len(truth), 0), truth, bbox_diagonal(setup.rest))
            row.update(rel_l2_mean=m["rel_l2_mean"], rel_l2_last=float(m["curve"][-1]), chamfer_l1=m.get("chamfer_l1"),
                       unstable=m["unstable"], hold_still_rel_l2_mean=float(still[1:].mean()),
                       truth_motion=float(still[-1]))
        else:
            bad = first_unstable_frame(pred, setup.rest)
            row["unstable"] = bool(fault is not None or bad is not None)
            row["truth"] = "not simulated (the reference is too slow at this length, size or force for this preset)"
        rows.append(row)
        if group == "resolution":
            preds[row["vertices"]] = (setup.rest, pred)
        if bar:
            bar.update(1, postfix=f"{name}: " + (f"rel_l2 {row['rel_l2_mean']:.4f}" if "rel_l2_mean" in row else
                                                 ("unstable" if row["unstable"] else "stable")))
    if bar:
        bar.close()
    consistency = resolution_consistency(preds)
    for row in rows:
        if row["group"] == "resolution" and row["vertices"] in consistency:
            row["cross_resolution_rel"] = consistency[row["vertices"]]
    summary = {"runs": len(rows), "nan_runs": sum(r["nan"] for r in rows),
               "unstable_runs": sum(bool(r.get("unstable")) for r in rows),
               "faults": sum(r["fault"] is not None for r in rows)}
    return {"rows": rows, "summary": summary, "push_max": PUSH_MAX}


def resolution_consistency(preds):
    """Mean distance (over frames and the smallest mesh's vertices) between each resolution's
    motion and the smallest one's, at the nearest rest vertices, / diagonal."""
    from scipy.spatial import cKDTree
    from .metrics import bbox_diagonal
    if len(preds) < 2:
        return {}
    sizes = sorted(preds)
    rest0, pred0 = preds[sizes[0]]
    diag = bbox_diagonal(rest0)
    out = {}
    for n in sizes[1:]:
        rest, pred = preds[n]
        idx = cKDTree(rest).query(rest0)[1]
        u0 = pred0 - rest0[None]
        u = pred[:, idx] - rest[idx][None]
        T = min(len(u0), len(u))
        out[n] = float(np.linalg.norm(u[:T] - u0[:T], axis=-1).mean() / diag)
    return out


# =========================================================================== 6. ablations

def _train_subprocess(data, out, minutes, latent, log):
    cmd = [sys.executable, "-m", "engine", "train", "--data", str(data), "--out", str(out), "--minutes", str(minutes),
           "--latent", str(latent)]
    return subprocess.Popen(cmd, cwd=str(ROOT), stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))


def prior_only_engine(model_path, scale):
    """The learned engine with its potential replaced by the prior's: v(q) = 1/2 sum (c q_i / sigma_i)^2
    with sigma the shape-conditioned prior std of the latent (geometry only, no dynamics
    learned) and one global constant c."""
    from ..learned.model import TRANSLATION_MODES
    from ..learned.runtime import NeurokEngine
    engine = NeurokEngine(model_path)
    pot, prior = engine.model.potential, engine.model.prior

    def factor(s, material):
        return torch.diag(scale / prior.prior_std(s, material)[TRANSLATION_MODES:])

    pot.factor = factor
    with torch.no_grad():
        pot.g[-1].weight.zero_()
        pot.g[-1].bias.zero_()
    return engine


def fit_prior_scale(model_path, train_data, frames=24, sequences=4,
                    grid=(1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)):
    """The constant c of the prior-only potential with the least rollout error on a few
    training sequences (first `frames` frames)."""
    from .metrics import predict_neurok, sequence_metrics
    from ..training.generate import load_index
    from ..core.scene import setup_from_sequence
    entries = [e for e in load_index(train_data) if e.get("split", "train") == "train"][:sequences]
    seqs = []
    for e in entries:
        seq = read_sequence(e["path"])
        setup = setup_from_sequence(seq)
        setup.frames = min(frames, setup.frames)
        seqs.append((setup, seq.positions[:setup.frames]))
    scores = {}
    for c in grid:
        engine = prior_only_engine(model_path, c)
        errs = []
        for setup, true in seqs:
            pred, fault, _, _ = predict_neurok(engine, setup)
            errs.append(sequence_metrics(pred, true, setup, fault, with_chamfer=False)["rel_l2_mean"])
        scores[c] = float(np.mean(errs))
    best = min(scores, key=scores.get)
    return best, scores


def run_ablations(cfg, model_path, data_dir, train_data, out, quiet=False):
    from .metrics import evaluate, pick_entries
    from ..training.generate import load_index
    from ..learned.runtime import NeurokEngine
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    entries = pick_entries(load_index(data_dir), cfg["ablation_sequences"])
    files = [e["file"] for e in entries]
    rows = []

    def measure(name, engine=None, model=None, **extra):
        r = evaluate(model or model_path, data_dir, entries=entries, baselines=False, energy_steps=0, quiet=True,
                     engine=engine, chamfer=False)
        row = {"name": name, "status": "run", "sequences": len(entries),
               "rel_l2": r["splits"]["all"]["rel_l2"], "unstable_share": r["splits"]["all"]["unstable_share"],
               "heldout_rel_l2_mean": r["splits"].get("heldout", {}).get("rel_l2", {}).get("mean"),
               "ms_per_frame": r["ms_per_frame"]}
        row.update(extra)
        rows.append(row)
        if not quiet:
            print(f"ablation {name}: rel_l2 mean {row['rel_l2']['mean']:.4f}, unstable {row['unstable_share']:.2f}", flush=True)
        return row

    # integrators and the prior-only potential on the default model
    default_row = measure("integrator: backward_euler (default model)", group="integrator")
    measure("integrator: implicit_midpoint (default model)", engine=NeurokEngine(model_path, integrator="implicit_midpoint"),
            group="integrator")
    if train_data:
        c, scores = fit_prior_scale(model_path, train_data)
        measure(f"potential: prior-only (default model's basis and prior, c = {c:g})", engine=prior_only_engine(model_path, c),
                group="potential", prior_scale=c, prior_scale_scores=scores)
        rows.append(dict(default_row, name="potential: learned (default model; same run as backward_euler)", group="potential"))
    else:
        rows.append({"name": "potential: prior-only", "status": "not run", "reason": "no training data to fit its constant"})
    # latent sizes by short training runs (in parallel, one core each)
    minutes = float(os.environ.get("NEUROK_ABLATION_MINUTES", cfg["ablation_minutes"]))
    from ..learned.model import AFFINE_MODES, TRANSLATION_MODES
    fixed = TRANSLATION_MODES + AFFINE_MODES
    runnable = [L for L in cfg["ablation_latents"] if L > fixed]
    for L in cfg["ablation_latents"]:
        if L <= fixed:
            rows.append({"name": f"latent {L}", "group": "latent", "latent": L, "status": "not run",
                         "reason": f"the basis always holds {TRANSLATION_MODES} translation + {AFFINE_MODES} affine modes, "
                                   f"so the smallest latent is {fixed + 1}"})
    if not train_data:
        for L in runnable:
            rows.append({"name": f"latent {L}", "group": "latent", "latent": L, "status": "not run",
                         "reason": "the model's training data is not on this machine"})
        return {"rows": rows, "sequences": files}
    pending = list(runnable)
    running = {}
    slots = max(1, min(os.cpu_count() or 1, 2))
    t0 = time.perf_counter()
    while pending or running:
        while pending and len(running) < slots:
            L = pending.pop(0)
            ckpt = out / f"latent_{L}.ckpt"
            running[L] = _train_subprocess(train_data, ckpt, minutes, L, out / f"latent_{L}.log")
        time.sleep(2.0)
        for L, proc in list(running.items()):
            if proc.poll() is not None:
                del running[L]
                if not quiet:
                    print(f"ablation: latent {L} trained ({time.perf_counter() - t0:.0f} s, exit {proc.returncode})", flush=True)
    for L in runnable:
        ckpt = out / f"latent_{L}.ckpt"
        if ckpt.is_file():
            measure(f"latent {L} ({minutes:g}-minute training run)", model=ckpt, group="latent", latent=L, minutes=minutes)
        else:
            rows.append({"name": f"latent {L}", "group": "latent", "latent": L, "status": "not run",
                         "reason": f"training failed (see {out / f'latent_{L}.log'})"})
    return {"rows": rows, "sequences": files, "minutes": minutes}


# =========================================================================== the suite

def _training_data(model_path, fallback):
    from ..learned.checkpoint import read_payload
    from ..training.generate import load_index
    meta = json.loads(read_payload(model_path).get("meta", "{}"))
    for d in (meta.get("data"), str(ROOT / str(meta.get("data", ""))) if meta.get("data") else None, fallback):
        if d and Path(d).is_dir():
            try:
                if any(e.get("split", "train") == "train" for e in load_index(d)):
                    return str(d), meta
            except NeurokError:
                continue
    return None, meta


def run_suite(preset="small", out_dir="eval_out", model_path=None, docs_dir=None, **overrides):
    from ..api import default_model_path
    from .baselines import load_latent_mlp, train_latent_mlp
    from .bench import bench
    from .metrics import evaluate, write_json
    if preset not in PRESETS:
        raise NeurokError(f"unknown preset '{preset}' (small or full)")
    unknown = set(overrides) - set(PRESETS[preset])
    if unknown:
        raise NeurokError(f"unknown evalsuite setting(s): {', '.join(sorted(unknown))}")
    cfg = dict(PRESETS[preset], **overrides)
    model_arg = model_path
    model_path = str(model_path or default_model_path())
    out = Path(out_dir) / preset
    out.mkdir(parents=True, exist_ok=True)
    docs = Path(docs_dir) if docs_dir else (ROOT / "docs" if (ROOT / "engine").is_dir() else out / "docs")
    started = time.time()
    timings = {}
    step = lambda name: timings.setdefault(name, time.perf_counter())  # noqa: E731

    def done(name):
        timings[name] = round(time.perf_counter() - timings[name], 1)
        print(f"[evalsuite] {name}: {timings[name]:.0f} s", flush=True)

    step("eval set")
    data = make_eval_set(out / "data", cfg["seed"], cfg["sequences"], cfg["heldout"], cfg["frames"])
    done("eval set")

    step("latent-MLP baseline")
    train_data, meta = _training_data(model_path, str(data))
    mlp_path = out / "latent_mlp.pt"
    mlp_ok = False
    if mlp_path.is_file():
        try:
            mlp_ok = load_latent_mlp(mlp_path).meta.get("model") == model_path
        except NeurokError:
            mlp_ok = False
    if not mlp_ok:
        train_latent_mlp(model_path, train_data, minutes=cfg["mlp_minutes"], out=mlp_path)
    done("latent-MLP baseline")

    step("eval")
    result = evaluate(model_path, data, latent_mlp=str(mlp_path), json_path=str(out / "eval.json"), energy_curves=True)
    write_json(out / "eval.json", result)
    done("eval")

    step("stress")
    stress = run_stress(cfg, model_path)
    write_json(out / "stress.json", stress)
    done("stress")

    step("bench")
    bench_result = bench(model_path, cfg["bench_sizes"], cfg["bench_frames"])
    write_json(out / "bench.json", bench_result)
    done("bench")

    if cfg.get("ablations"):
        step("ablations")
        ablations = run_ablations(cfg, model_path, data, train_data if train_data != str(data) else None, out / "ablations")
        write_json(out / "ablations.json", ablations)
        done("ablations")
    else:
        ablations = {"rows": [], "skipped": "the small preset runs no ablations (use --preset full)" if preset == "small"
                     else "the ablations were switched off for this run (ablations=False)"}
        write_json(out / "ablations.json", ablations)
    suite = {"preset": preset, "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
             "overrides": {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()},
             "model": model_path, "model_arg": model_arg, "model_meta": {k: meta.get(k) for k in ("data", "sequences", "steps", "seconds", "final_losses")},
             "training_data": train_data, "eval_data": str(data), "out": str(out), "timings_s": timings,
             "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
             "wall_minutes": round((time.time() - started) / 60.0, 1)}
    write_json(out / "suite.json", suite)
    path = write_report(suite, result, stress, bench_result, ablations, docs)
    print(f"[evalsuite] wrote {path} ({suite['wall_minutes']} min)")
    return path


# =========================================================================== 7. the report

def _f(v, digits=4, pct=False):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if pct:
        return f"{100 * v:.3g}%"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(v)
    return f"{v:.{digits}f}" if abs(v) >= 10 ** -digits or v == 0 else f"{v:.2e}"


def _minutes(seconds):
    return "?" if seconds is None else f"{seconds / 60:.0f} min"


def _row_at(bench_result, engine, size, device="cpu"):
    rows = [r for r in bench_result["rows"] if r["engine"] == engine and r["device"] == device]
    if not rows:
        return None
    r = min(rows, key=lambda r: abs(math.log(r["vertices"] / size)))
    return r if abs(math.log(r["vertices"] / size)) < 0.2 else None


def targets(suite, result, stress, bench_result):
    """[(target, measured text, verdict)], verdict one of met / missed / not measured."""
    out = []
    cores = bench_result["machine"].get("cpu_affinity") or bench_result["machine"].get("cpu_count")
    for size, key in ((10000, "ms_10k"), (100000, "ms_100k")):
        r = _row_at(bench_result, "neurok", size)
        name = f"learned engine <= {TARGETS[key]:g} ms/frame at {size // 1000}k vertices on 2 CPU cores"
        if r is None:
            out.append((name, f"not measured ({suite['preset']} preset)", "not measured"))
        else:
            out.append((name, f"{r['ms_per_frame']:.2f} ms/frame at {r['vertices']} vertices ({cores} cores, "
                              f"{r.get('torch_threads')} torch threads)", "met" if r["ms_per_frame"] <= TARGETS[key] else "missed"))
    r, ref = _row_at(bench_result, "neurok", 10000), _row_at(bench_result, "reference", 10000)
    name = f">= {TARGETS['reference_speedup_10k']:g}x faster than the reference simulator at 10k vertices"
    if r and ref:
        x = ref["ms_per_frame"] / r["ms_per_frame"]
        out.append((name, f"{x:.0f}x ({ref['ms_per_frame']:.0f} vs {r['ms_per_frame']:.2f} ms/frame)",
                    "met" if x >= TARGETS["reference_speedup_10k"] else "missed"))
    else:
        out.append((name, "not measured", "not measured"))
    bl = [(b["vertices"], b["ms_per_frame"], _row_at(bench_result, "neurok", b["vertices"]))
          for b in bench_result["rows"] if b["engine"] == "blender_cloth"]
    if bl:
        parts = [f"{n} v: {ms / nr['ms_per_frame']:.1f}x" for n, ms, nr in bl if nr]
        met = all(ms > nr["ms_per_frame"] for n, ms, nr in bl if nr)
        out.append(("faster than Blender's cloth simulator (same mesh, same frames)", "; ".join(parts), "met" if met else "missed"))
    else:
        out.append(("faster than Blender's cloth simulator", "; ".join(bench_result.get("notes", [])) or "not measured",
                    "not measured"))
    frame, n_rel, bases = _late_frame(result)
    for b in ("latent_mlp", "pca_modal"):
        name = f"at frame 200, rel_l2 >= {TARGETS['baseline_factor_200']:g}x better than the {b} baseline"
        base = bases.get(b)
        if n_rel is None or base is None:
            out.append((name, "not measured", "not measured"))
            continue
        x = base / n_rel if n_rel > 0 else math.inf
        where = "" if frame == 200 else (f"; frame {frame}, the last frame of these sequences" if frame >= 190 else
                                         f"; frame {frame}: the sequences are shorter than 200 frames")
        m_n = result["splits"]["all"]["rel_l2"].get("mean")
        m_b = result["baselines"].get(b, {}).get("all", {}).get("rel_l2", {}).get("mean")
        context = f"; over the whole rollout (mean) {m_b / m_n:.2f}x" if m_n and m_b else ""
        text = f"{x:.2f}x (neurok {n_rel:.4f} vs {b} {base:.4f}, all splits{where}{context})"
        good = x >= TARGETS["baseline_factor_200"]
        verdict = ("met" if good else "missed") if frame >= 190 else \
            ("not measured (would be met at this frame)" if good else "not measured (would be missed at this frame)")
        out.append((name, text, verdict))
    sm = stress["summary"]
    out.append(("zero NaN in the stress suite", f"{sm['nan_runs']} of {sm['runs']} runs with NaN; "
                f"{sm['unstable_runs']} unstable (fault or blow-up)", "met" if sm["nan_runs"] == 0 else "missed"))
    drift = result.get("energy_drift", {}).get("implicit_midpoint")
    steps = result.get("energy_drift_detail", {}).get("steps")
    out.append((f"energy drift < 1% over {steps or 1000} undamped steps (implicit midpoint)",
                f"{_f(drift, pct=True)} (worst of {', '.join(result.get('energy_drift_detail', {}).get('per_mesh', {}))})",
                "not measured" if drift is None else ("met" if drift < TARGETS["energy_drift"] else "missed")))
    return out


def _late_frame(result):
    """(frame, neurok rel_l2, {baseline: rel_l2}) at frame 200, or else at the latest frame the
    sequences have (all splits)."""
    frame = 200 if result["splits"]["all"]["rel_l2"].get("200") is not None else None
    if frame:
        return 200, result["splits"]["all"]["rel_l2"]["200"], {
            b: blocks.get("all", {}).get("rel_l2", {}).get("200") for b, blocks in result["baselines"].items()}
    curve = result["splits"]["all"].get("rel_l2_curve") or []
    if len(curve) < 2:
        return None, None, {}
    frame = len(curve) - 1
    bases = {}
    for b, blocks in result["baselines"].items():
        c = blocks.get("all", {}).get("rel_l2_curve") or []
        bases[b] = c[frame] if len(c) > frame else None
    return frame, curve[frame], bases


def make_figures(result, stress, bench_result, ablations, fig_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    made = {}
    colors = {"neurok": "C0", "latent_mlp": "C1", "pca_modal": "C2", "hold_still": "C7"}
    # error vs frame
    splits = [s for s in ("train", "validation", "heldout") if s in result["splits"]]
    if splits:
        fig, axes = plt.subplots(1, len(splits), figsize=(4.2 * len(splits), 3.4), squeeze=False, sharey=True)
        for ax, split in zip(axes[0], splits):
            series = {"neurok": result["splits"][split].get("rel_l2_curve")}
            for b, blocks in result["baselines"].items():
                series[b] = blocks.get(split, {}).get("rel_l2_curve")
            for name, curve in series.items():
                if curve:
                    ys = np.array([np.nan if v is None else v for v in curve], float)
                    ax.plot(np.arange(1, len(ys)), ys[1:], label=name, color=colors.get(name), lw=2 if name == "neurok" else 1.2)
            ax.set_yscale("log")
            ax.set_title(f"{split} ({result['splits'][split]['sequences']} seq)")
            ax.set_xlabel("frame")
            ax.grid(alpha=0.3, which="both")
        axes[0][0].set_ylabel("rel_l2 (mean vertex error / diagonal)")
        axes[0][-1].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "error_vs_frame.png", dpi=110)
        plt.close(fig)
        made["error_vs_frame"] = "figures/error_vs_frame.png"
    # error vs force scale
    rows = [r for r in stress["rows"] if r["group"] == "force"]
    if rows:
        fig, ax = plt.subplots(figsize=(5.2, 3.6))
        xs = [r["param"] for r in rows]
        ax.plot(xs, [r.get("rel_l2_mean", np.nan) for r in rows], "o-", color="C0", label="neurok")
        ax.plot(xs, [r.get("hold_still_rel_l2_mean", np.nan) for r in rows], "s--", color="C7", label="hold still (= size of the motion)")
        bad = [(r["param"], r.get("rel_l2_mean", np.nan)) for r in rows if r.get("unstable")]
        if bad:
            ax.plot(*zip(*bad), "x", color="red", ms=10, label="unstable")
        ax.set_xscale("log"); ax.set_yscale("log")
        ax.set_xlabel(f"push / largest training push ({PUSH_MAX:g} m/s^2)")
        ax.set_ylabel("rel_l2 rollout mean")
        ax.grid(alpha=0.3, which="both"); ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "error_vs_force.png", dpi=110)
        plt.close(fig)
        made["error_vs_force"] = "figures/error_vs_force.png"
    # time vs vertices
    if bench_result["rows"]:
        fig, ax = plt.subplots(figsize=(5.4, 3.8))
        keys = sorted({(r["engine"], r["device"]) for r in bench_result["rows"]})
        for k, (eng, dev) in enumerate(keys):
            rs = sorted([r for r in bench_result["rows"] if r["engine"] == eng and r["device"] == dev], key=lambda r: r["vertices"])
            ax.plot([r["vertices"] for r in rs], [r["ms_per_frame"] for r in rs], "o-", label=f"{eng} ({dev})", color=f"C{k}")
        ax.plot([10000, 100000], [TARGETS["ms_10k"], TARGETS["ms_100k"]], "k*", ms=10, label="targets (neurok)")
        ax.set_xscale("log"); ax.set_yscale("log")
        ax.set_xlabel("vertices"); ax.set_ylabel("ms per frame")
        ax.grid(alpha=0.3, which="both"); ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "time_vs_vertices.png", dpi=110)
        plt.close(fig)
        made["time_vs_vertices"] = "figures/time_vs_vertices.png"
    # ablations
    run_rows = [r for r in ablations.get("rows", []) if r.get("status") == "run"]
    if run_rows:
        fig, ax = plt.subplots(figsize=(7.0, 0.45 * len(run_rows) + 1.2))
        names = [r["name"] for r in run_rows]
        vals = [r["rel_l2"]["mean"] if r["rel_l2"]["mean"] is not None else np.nan for r in run_rows]
        ax.barh(range(len(run_rows)), vals, color=[f"C{i % 10}" for i in range(len(run_rows))])
        ax.set_yticks(range(len(run_rows)), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("rel_l2 rollout mean (evaluation subset)")
        ax.grid(alpha=0.3, axis="x")
        fig.tight_layout()
        fig.savefig(fig_dir / "ablations.png", dpi=110)
        plt.close(fig)
        made["ablations"] = "figures/ablations.png"
    # energy drift
    curves = result.get("energy_drift_detail", {}).get("curves")
    if curves:
        fig, ax = plt.subplots(figsize=(5.6, 3.8))
        styles = {"backward_euler": "--", "implicit_midpoint": "-"}
        for k, (mesh, per) in enumerate(curves.items()):
            for integ, c in per.items():
                ys = np.maximum(np.array(c["drift"], float), 1e-12)
                ax.plot(c["step"], ys, styles.get(integ, ":"), color=f"C{k}", label=f"{mesh} {integ}")
        ax.axhline(TARGETS["energy_drift"], color="k", lw=0.8, label="1% target")
        ax.set_yscale("log"); ax.set_xlabel("latent step (undamped, no forces)"); ax.set_ylabel("|E(t) - E(0)| / E(0)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
        fig.savefig(fig_dir / "energy_drift.png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        made["energy_drift"] = "figures/energy_drift.png"
    return made


def _metric_row(name, block):
    r = block["rel_l2"]
    curve = block.get("rel_l2_curve") or []
    if block.get("rel_l2_last") is not None:
        last = f"{_f(block['rel_l2_last'])} ({block.get('last_frame')})"
    else:
        last = f"{_f(curve[-1])} ({len(curve) - 1})" if len(curve) > 1 else "n/a"
    return (f"| {name} | " + " | ".join(_f(r.get(str(f))) for f in (1, 10, 50, 100, 200)) + f" | {last} | {_f(r.get('mean'))} | "
            f"{_f(block.get('chamfer_l1'))} | {_f(block.get('unstable_share'), 2)} | {block.get('sequences')} |")


METRIC_HEADER = ("| engine | t=1 | t=10 | t=50 | t=100 | t=200 | last frame (t) | mean | chamfer_l1 | unstable | sequences |\n"
                 "|---|---|---|---|---|---|---|---|---|---|---|")


def _rel(p):
    """A path relative to the repository root where it lies inside it."""
    if p is None:
        return None
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def write_report(suite, result, stress, bench_result, ablations, docs):
    docs = Path(docs)
    suite = dict(suite)
    for key in ("model", "out", "eval_data", "training_data"):
        suite[key] = _rel(suite.get(key))
    model_opt = f" --model {_rel(suite['model_arg'])}" if suite.get("model_arg") else ""
    figs = make_figures(result, stress, bench_result, ablations, docs / "figures")
    m = bench_result["machine"]
    preset = suite["preset"]
    L = []
    add = L.append
    add("# NeuROK evaluation")
    add("")
    overrides = suite.get("overrides") or {}
    out_parent = Path(suite["out"]).parent
    if overrides:
        kw = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
        defaults = ", ".join(f"{k}={PRESETS[preset].get(k)!r}" for k in overrides if k in PRESETS[preset])
        model_kw = f", model_path={suite['model_arg']!r}" if suite.get("model_arg") else ""
        add(f"Generated on {suite['started']} ({suite['wall_minutes']} minutes) by the {preset} preset **with overrides** "
            f"({kw}): `python -c \"from engine.evalsuite import run_suite; run_suite('{preset}', '{out_parent}'{model_kw}, {kw})\"` "
            f"(the preset itself, `python -m engine evalsuite --preset {preset}`, uses {defaults}). Every number below "
            f"comes from that one run; the raw JSON is in `{suite['out']}/` (`eval.json`, `stress.json`, `bench.json`, "
            "`ablations.json`, `suite.json`).")
    else:
        add(f"Generated by `python -m engine evalsuite --preset {preset} --out {out_parent}{model_opt}` "
            f"on {suite['started']} ({suite['wall_minutes']} minutes). Every number below comes from that one run; the raw "
            f"JSON is in `{suite['out']}/` (`eval.json`, `stress.json`, `bench.json`, `ablations.json`, `suite.json`).")
    if preset == "small":
        add("")
        add("**This is the small preset** (a few short sequences, a quick bench, no ablations): a smoke run of the "
            "whole pipeline. The figures that decide the targets come from `--preset full`.")
    add("")
    add("## Set-up")
    add("")
    add(f"- Machine: {m.get('cpu')}, {m.get('cpu_affinity') or m.get('cpu_count')} CPU cores available, "
        f"torch {m.get('torch')} ({m.get('torch_threads')} threads), Python {m.get('python')}, {m.get('platform')}; "
        f"CUDA: {m.get('cuda') or 'none'}. Load average during the bench: {m.get('load_average')}.")
    mm = suite.get("model_meta") or {}
    add(f"- Model: `{suite['model']}` (trained {mm.get('steps')} steps / {_minutes(mm.get('seconds'))} on "
        f"{mm.get('sequences')} sequences of `{mm.get('data')}`).")
    cfg = suite["config"]
    add(f"- Evaluation set: `{suite['eval_data']}`, seed {cfg['seed']} (training data uses seed 1), {cfg['sequences']} "
        f"sequences x {cfg['frames']} frames at 1/24 s, {cfg['heldout']} of them from the held-out shape families "
        "(capsule, torus) the model never trained on. Split `train` = training shape families (new sequences), "
        "`validation` = the generator's validation draw of those families, `heldout` = unseen families. Ground truth: the "
        "reference simulator at the data generator's settings.")
    add(f"- Latent-MLP baseline trained on `{suite.get('training_data')}` "
        f"({result['baselines_info'].get('latent_mlp', {}).get('steps', '?')} steps, "
        f"{result['baselines_info'].get('latent_mlp', {}).get('seconds', '?')} s).")
    add("- Commands, step by step (what the suite runs):")
    add("")
    add("```")
    add(f"python -m engine evalsuite --preset {preset} --out {out_parent}{model_opt}"
        + ("   # this run: with the overrides above" if overrides else ""))
    add(f"# equivalent pieces: python -m engine eval --model {suite['model']} --data {suite['eval_data']} --json {suite['out']}/eval.json")
    add(f"#                    python -m engine bench --model {suite['model']} --json {suite['out']}/bench.json "
        f"--sizes {','.join(str(s) for s in cfg['bench_sizes'])} --frames {cfg['bench_frames']}")
    add("```")
    add("")
    add("## Targets")
    add("")
    add("| target | measured | verdict |")
    add("|---|---|---|")
    for name, text, verdict in targets(suite, result, stress, bench_result):
        mark = {"met": "**met**", "missed": "**missed**"}.get(verdict, verdict)
        add(f"| {name} | {text} | {mark} |")
    add("")
    add("## Accuracy against ground truth")
    add("")
    add("rel_l2(t) = mean vertex distance to the truth at frame t / rest bounding-box diagonal; chamfer_l1 = symmetric "
        "Chamfer-L1 of the surfaces / diagonal (2,048 area-sampled points per surface, up to 25 frames per sequence); "
        "unstable = share of rollouts with NaN/Inf, an engine fault, or leaving 10x the rest bounding sphere. "
        "n/a: no sequence that long.")
    add("")
    for split in [s for s in ("train", "validation", "heldout", "all") if s in result["splits"]]:
        add(f"**{split}**")
        add("")
        add(METRIC_HEADER)
        add(_metric_row("neurok", result["splits"][split]))
        for b, blocks in result["baselines"].items():
            if split in blocks:
                add(_metric_row(b, blocks[split]))
        add("")
    if "error_vs_frame" in figs:
        add(f"![error vs frame]({figs['error_vs_frame']})")
        add("")
    add("Baselines: **hold_still** = frame 0 forever. **pca_modal** = per-sequence PCA subspace (<= 8 modes) with a "
        "linear second-order model q(t+1) = A q(t) + B q(t-1) + C g(t) + c fitted by least squares on the *first 25% of "
        "that sequence's own true frames* (it is shown them, so its early frames are near-perfect and only its later "
        "frames are comparable), companion eigenvalues clamped into the unit circle, then rolled out. **latent_mlp** = "
        "non-Lagrangian stepper q(t+1) = q(t) + MLP(q(t), q(t) - q(t-1), forces, pins, floor, shape code, material) in "
        "the NeuROK model's own latent space (same frozen basis, same exact reduced forces/pins), trained with rollout "
        "loss on the training split's encoded latents.")
    add("")
    add(f"Mean pin drift (pinned vertices vs their targets / diagonal): neurok {_f(result['splits']['all'].get('pin_drift'), 6)}, "
        f"ground truth {_f(result['splits']['all'].get('pin_drift_truth'), 6)} (pins are stiff springs in both). "
        f"Replay speed during the evaluation: {_f(result.get('ms_per_frame'), 2)} ms/frame (mean).")
    add("")
    add("### Per shape family and scenario (learned engine, all splits)")
    add("")
    add(METRIC_HEADER.replace("| engine |", "| group |"))
    for fam, block in result["families"].items():
        add(_metric_row(f"family {fam}", block))
    for sc, block in result["scenarios"].items():
        add(_metric_row(f"scenario {sc}", block))
    add("")
    add("## Energy drift")
    add("")
    ed = result.get("energy_drift_detail", {})
    add(f"|E(t) - E(0)| / E(0), E = 1/2 |q'|^2 + w0^2 v(q), over {ed.get('steps')} undamped, force-free, gravity-free "
        "latent steps of the engine's own stepping (the bake code path), from a displacement and velocity of 1% of the "
        "diagonal in the elastic modes; max over the steps. Backward Euler is dissipative by design (its loss of "
        "energy is the point of it); implicit midpoint is the conservative option.")
    add("")
    add("| mesh | " + " | ".join(f"{i} (max)" for i in ed.get("max", {})) + " | " + " | ".join(f"{i} (final)" for i in ed.get("max", {})) + " |")
    add("|---|" + "---|" * (2 * len(ed.get("max", {}))))
    for mesh, per in ed.get("per_mesh", {}).items():
        add(f"| {mesh} | " + " | ".join(_f(per[i]["max"], pct=True) for i in ed["max"]) + " | "
            + " | ".join(_f(per[i]["final"], pct=True) for i in ed["max"]) + " |")
    if ed.get("errors"):
        add("")
        add("Errors: " + "; ".join(f"{k}: {v}" for k, v in ed["errors"].items()))
    if "energy_drift" in figs:
        add("")
        add(f"![energy drift]({figs['energy_drift']})")
    add("")
    add("## Stress suite")
    add("")
    add(f"Pinned push: the 15% slab at low x pinned, a uniform push along y; the largest push in the training scenes is "
        f"{PUSH_MAX:g} m/s^2. Ground truth from the reference simulator where marked; elsewhere only stability is checked. "
        f"Summary: {stress['summary']['runs']} runs, {stress['summary']['nan_runs']} with NaN, "
        f"{stress['summary']['unstable_runs']} unstable, {stress['summary']['faults']} engine faults.")
    add("")
    add("| case | vertices | frames | rel_l2 mean | rel_l2 last | hold still | unstable | NaN | ms/frame | notes |")
    add("|---|---|---|---|---|---|---|---|---|---|")
    for r in stress["rows"]:
        notes = []
        if r.get("truth"):
            notes.append("no ground truth")
        if r.get("cross_resolution_rel") is not None:
            notes.append(f"differs from the smallest mesh's motion by {r['cross_resolution_rel']:.4f}")
        if r.get("error"):
            notes.append(r["error"][:80])
        if r.get("truth_error"):
            notes.append("reference failed: " + r["truth_error"][:60])
        add(f"| {r['name']} | {r['vertices']} | {r['frames']} | {_f(r.get('rel_l2_mean'))} | {_f(r.get('rel_l2_last'))} | "
            f"{_f(r.get('hold_still_rel_l2_mean'))} | {_f(bool(r.get('unstable')))} | {_f(r['nan'])} | "
            f"{_f(r.get('ms_per_frame'), 2)} | {'; '.join(notes)} |")
    if "error_vs_force" in figs:
        add("")
        add(f"![error vs force]({figs['error_vs_force']})")
    add("")
    add("## Speed")
    add("")
    add(f"Scene: {bench_result.get('scene')}. ms_per_frame = step + decode of one frame after encoding once; "
        "peak_mb = peak resident memory above the level before the run (CUDA: device memory). The reference's frames "
        "are capped on large meshes (its cost per frame is steady); Blender's cloth runs the same mesh as a cloth "
        "shell, pinned by a vertex group, gravity only.")
    add("")
    add("| engine | device | vertices | frames | encode ms | ms/frame | peak MB | note |")
    add("|---|---|---|---|---|---|---|---|")
    for r in bench_result["rows"]:
        add(f"| {r['engine']} | {r['device']} | {r['vertices']} | {r['frames']} | {_f(r['encode_ms'], 1)} | "
            f"{_f(r['ms_per_frame'], 2)} | {_f(r['peak_mb'], 1)} | {r.get('note', '')} |")
    add("")
    for name, vals in bench_result.get("ratios", {}).items():
        add(f"- {name.replace('_', ' ')}: " + ", ".join(f"{k} v: {v:.1f}x" for k, v in vals.items()))
    for note in bench_result.get("notes", []):
        add(f"- {note}")
    if "time_vs_vertices" in figs:
        add("")
        add(f"![time vs vertices]({figs['time_vs_vertices']})")
    add("")
    add("## Ablations")
    add("")
    if ablations.get("skipped"):
        add(f"Not run: {ablations['skipped']}.")
    else:
        add(f"On {len(ablations.get('sequences', []))} sequences of the evaluation set (both held-out and training "
            "families), no baselines. Latent sizes are short training runs of the same length on the same data "
            f"({ablations.get('minutes')} minutes each, two at a time on one core each), so compare them with each other, "
            "not with the default model.")
        add("")
        add("| variant | t=1 | t=10 | t=50 | t=100 | t=200 | mean | heldout mean | unstable | status |")
        add("|---|---|---|---|---|---|---|---|---|---|")
        for r in ablations["rows"]:
            if r.get("status") != "run":
                add(f"| {r['name']} | | | | | | | | | not run: {r.get('reason')} |")
                continue
            rr = r["rel_l2"]
            add(f"| {r['name']} | " + " | ".join(_f(rr.get(str(f))) for f in (1, 10, 50, 100, 200)) +
                f" | {_f(rr.get('mean'))} | {_f(r.get('heldout_rel_l2_mean'))} | {_f(r.get('unstable_share'), 2)} | run |")
        if "ablations" in figs:
            add("")
            add(f"![ablations]({figs['ablations']})")
    add("")
    add("## Not covered")
    add("")
    gaps = [f"Long ({cfg.get('long_frames', 1000):,}-frame) stress rollouts are checked for stability only: the reference "
            "is too slow for their ground truth in this suite."]
    if cfg.get("truth_max_force"):
        gaps.append(f"Pushes above {cfg['truth_max_force']:g}x the largest training push have no ground truth in this preset "
                    "(the reference takes minutes there); only their stability is checked.")
    if preset == "small":
        gaps.append("Small preset: no frame-200 errors, no 100k-vertex timings, no ablations; run `--preset full`.")
    if not any(r["device"] == "cuda" for r in bench_result["rows"]):
        gaps.append("No CUDA rows: torch saw no GPU on this machine.")
    for g in gaps:
        add(f"- {g}")
    add("")
    docs.mkdir(parents=True, exist_ok=True)
    path = docs / "EVALUATION.md"
    from ..core.formats import atomic_write_text
    atomic_write_text(path, "\n".join(L))
    return path
