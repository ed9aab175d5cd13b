"""`neurok eval --model CKPT --data DIR --json OUT.json`: the learned engine against ground truth.

Metrics (DESIGN.md section 5; all lengths divided by the rest bounding-box diagonal):
- rel_l2(t): mean over vertices of |x_pred - x_true| at frame t; reported at frames 1, 10, 50,
  100, 200 (null where no sequence has that frame) and as the rollout mean (frames 1..T-1,
  averaged per sequence, then over sequences).
- chamfer_l1: symmetric Chamfer-L1 between predicted and true surfaces: 2048 points sampled on
  each surface by area (the same random numbers on both, so identical surfaces give 0), the
  mean nearest-point distance (scipy cKDTree) in each direction, averaged; mean over up to 25
  evenly spaced frames per sequence, then over sequences.
- unstable_share: share of rollouts that stopped with a fault, produced NaN/Inf, or put a
  vertex further than 10 rest half-diagonals from the centre of the true frame's bounding box
  (the rest bounding sphere scaled 10x, following the true motion). Frames after such an event
  are held at the last good frame for the error metrics.
- pin_drift: mean distance of pinned vertices from their (possibly animated) targets, frames
  1..T-1.
Predictions replay each sequence's recorded setup (`setup_from_sequence` + `prepare` + `bake`).
Baselines on the same sequences: hold_still, pca_modal, latent_mlp (see `baselines.py`).
energy_drift: max over 1,000 undamped, force-free latent steps of |E(t) - E(0)| / E(0),
E = 1/2 |q'|^2 + w0^2 v(q), per integrator (worst of three sample meshes).
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

from ..core.geometry import triangle_areas
from ..core.formats import NeurokError, atomic_write_text, read_sequence
from ..training.generate import load_index
from ..core.scene import setup_from_scene, setup_from_sequence

REPORT_FRAMES = (1, 10, 50, 100, 200)
SPLITS = ("train", "validation", "heldout")
CHAMFER_POINTS = 2048
CHAMFER_FRAMES = 25
UNSTABLE_RADIUS = 10.0      # in rest half-diagonals
ENERGY_STEPS = 1000
ENERGY_MESHES = ("jelly", "soft_toy", "flag")
DEFAULT_MLP_MINUTES = 3.0


# =========================================================================== metrics

def bbox_diagonal(rest) -> float:
    rest = np.asarray(rest, np.float64)
    return float(np.linalg.norm(rest.max(axis=0) - rest.min(axis=0))) or 1.0


def rel_l2_curve(pred, true, diag) -> np.ndarray:
    """rel_l2 per frame [T]."""
    return np.linalg.norm(np.asarray(pred, np.float64) - np.asarray(true, np.float64), axis=-1).mean(axis=-1) / diag


def sample_surface(x, faces, n=CHAMFER_POINTS, seed=0) -> np.ndarray:
    """n points on the triangle surface x[faces], drawn by area (vertices if there are no faces)."""
    x = np.asarray(x, np.float64)
    faces = np.asarray(faces)
    rng = np.random.default_rng(seed)
    if len(faces) == 0:
        return x
    a, b, c = x[faces[:, 0]], x[faces[:, 1]], x[faces[:, 2]]
    area = triangle_areas(x, faces)
    total = area.sum()
    p = area / total if total > 0 and np.isfinite(total) else np.full(len(faces), 1.0 / len(faces))
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    f = np.searchsorted(cdf, rng.random(n), side="right").clip(0, len(faces) - 1)
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1
    u[flip], v[flip] = 1 - u[flip], 1 - v[flip]
    return a[f] + u[:, None] * (b[f] - a[f]) + v[:, None] * (c[f] - a[f])


def chamfer_l1(x_pred, x_true, faces, diag, n=CHAMFER_POINTS, seed=0) -> float:
    """Symmetric Chamfer-L1 (mean of both directions' mean nearest distances) / diag."""
    from scipy.spatial import cKDTree
    p = sample_surface(x_pred, faces, n, seed)
    t = sample_surface(x_true, faces, n, seed)
    d_pt = cKDTree(t).query(p)[0]
    d_tp = cKDTree(p).query(t)[0]
    return float(0.5 * (d_pt.mean() + d_tp.mean()) / diag)


def first_unstable_frame(pred, rest, true=None, radius=UNSTABLE_RADIUS):
    """Index of the first frame that is NaN/Inf or leaves the rest bounding sphere scaled by
    `radius` (centred on the true frame's bounding-box centre when the truth is given); None if
    the whole rollout is fine."""
    pred = np.asarray(pred)
    rest = np.asarray(rest, np.float64)
    half = 0.5 * bbox_diagonal(rest)
    finite = np.all(np.isfinite(pred.reshape(len(pred), -1)), axis=1)
    if true is not None:
        true = np.asarray(true, np.float64)
        centre = 0.5 * (true.min(axis=1) + true.max(axis=1))            # [T,3]
    else:
        centre = np.repeat((0.5 * (rest.min(axis=0) + rest.max(axis=0)))[None], len(pred), axis=0)
    with np.errstate(invalid="ignore", over="ignore"):
        dist = np.linalg.norm(np.where(np.isfinite(pred), pred, 0.0) - centre[:, None, :], axis=-1).max(axis=1)
    bad = ~finite | (dist > radius * half)
    idx = np.nonzero(bad)[0]
    return int(idx[0]) if len(idx) else None


def hold_from(pred, frame):
    """Copy of pred with frames >= `frame` held at frame - 1 (the last good one)."""
    pred = np.array(pred, dtype=np.float32, copy=True)
    if frame is not None and frame < len(pred):
        pred[frame:] = pred[max(frame - 1, 0)]
    return pred


def pin_drift(pred, setup, diag) -> float | None:
    pinned = np.nonzero(np.asarray(setup.pin_weight) > 0)[0]
    if len(pinned) == 0 or len(pred) < 2:
        return None
    d = [np.linalg.norm(pred[t][pinned] - setup.pin_target(t)[pinned], axis=1).mean() for t in range(1, len(pred))]
    return float(np.mean(d) / diag)


def chamfer_frames(T, count=CHAMFER_FRAMES):
    frames = set(int(round(v)) for v in np.linspace(1, T - 1, min(count, max(T - 1, 1)))) if T > 1 else set()
    frames |= {f for f in REPORT_FRAMES if f < T}
    return sorted(f for f in frames if 1 <= f < T)


def sequence_metrics(pred, true, setup, fault=None, with_chamfer=True) -> dict:
    """Metrics of one rollout against its ground truth. `fault` is the frame where the engine
    gave up (None if it did not)."""
    true = np.asarray(true, np.float64)
    diag = bbox_diagonal(setup.rest)
    bad = first_unstable_frame(pred, setup.rest, true)
    stop = min(x for x in (bad, fault, len(pred)) if x is not None)
    held = hold_from(pred, stop if stop < len(pred) else None)
    curve = rel_l2_curve(held, true, diag)
    T = len(true)
    out = {"frames": T, "curve": curve, "rel_l2_mean": float(curve[1:].mean()) if T > 1 else 0.0,
           "unstable": stop < len(pred), "unstable_frame": stop if stop < len(pred) else None,
           "pin_drift": pin_drift(held, setup, diag), "pin_drift_truth": pin_drift(true, setup, diag)}
    if with_chamfer and T > 1:
        out["chamfer_l1"] = float(np.mean([chamfer_l1(held[f], true[f], setup.faces, diag, seed=f)
                                           for f in chamfer_frames(T)]))
    return out


def _mean(values):
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(values)) if values else None


def aggregate(records) -> dict:
    """The DESIGN.md metric block over per-sequence records."""
    block = {"rel_l2": {}, "chamfer_l1": None, "unstable_share": None, "sequences": len(records)}
    for f in REPORT_FRAMES:
        block["rel_l2"][str(f)] = _mean([r["curve"][f] for r in records if f < r["frames"]])
    block["rel_l2"]["mean"] = _mean([r["rel_l2_mean"] for r in records])
    block["chamfer_l1"] = _mean([r.get("chamfer_l1") for r in records])
    block["unstable_share"] = float(np.mean([r["unstable"] for r in records])) if records else None
    block["rel_l2_last"] = _mean([r["curve"][-1] for r in records if r["frames"] > 1])   # each sequence's last frame
    block["last_frame"] = min((r["frames"] - 1 for r in records), default=None)
    block["pin_drift"] = _mean([r.get("pin_drift") for r in records])
    block["pin_drift_truth"] = _mean([r.get("pin_drift_truth") for r in records])   # the reference's own (pins are springs)
    if records:
        T = max(r["frames"] for r in records)
        block["rel_l2_curve"] = [_mean([r["curve"][t] for r in records if t < r["frames"]]) for t in range(T)]
    return block


# =========================================================================== predictions

def predict_neurok(engine, setup):
    """(frames [T,N,3], fault frame or None, error text or None, ms per frame)."""
    from ..api import SimulationFault
    try:
        run = engine.prepare(setup)
        t1 = time.perf_counter()
        pred = run.bake()
        ms = 1000.0 * (time.perf_counter() - t1) / max(1, setup.frames - 1)
        return pred, None, None, ms
    except SimulationFault as fault:
        good = fault.positions if fault.positions is not None and len(fault.positions) else np.asarray(setup.x0)[None]
        pred = np.repeat(good[-1:], setup.frames, axis=0)
        pred[:len(good)] = good
        return pred.astype(np.float32), len(good), str(fault), None
    except (RuntimeError, ValueError, FloatingPointError) as e:  # a numerical failure inside the step
        pred = np.repeat(np.asarray(setup.x0, np.float32)[None], setup.frames, axis=0)
        return pred, 1, f"{type(e).__name__}: {str(e)[:200]}", None


# =========================================================================== energy drift

def energy_setup(name, frames=2):
    """An undamped, force-free, gravity-free, unpinned setup on one of the sample meshes."""
    from ..training.shapes import make_sample
    mesh = make_sample(name)
    preset = "cloth" if name == "flag" else "rubber"
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, 0.0],
             "material": {"preset": preset, "damping": 0.0, "air_damping": 0.0}, "pins": [], "forces": [], "floor": None}
    return setup_from_scene(mesh, scene)


def energy_drift(model, steps=ENERGY_STEPS, integrators=None, meshes=ENERGY_MESHES, amplitude=0.01, seed=0,
                 device="cpu", keep_curves=False) -> dict:
    """|E(t) - E(0)| / E(0), E = 1/2 |q'|^2 + w0^2 v(q), over `steps` undamped, force-free latent
    steps from a small displacement and velocity in the elastic modes (1% of the diagonal).

    It runs the engine's own stepping (`NeurokRun.latent_frames`, the same code a bake runs):
    the start state is decoded to vertex positions and velocities, which the run encodes
    exactly back (the basis is mass-orthonormal); a frame is `substeps` steps, and E is read
    at every frame. Returns {"max": {integrator: worst over meshes}, "final": {...},
    "per_mesh": {...}, "steps": n}."""
    from ..learned.integrators import INTEGRATORS
    from ..learned.model import TRANSLATION_MODES
    from ..learned.latent_scene import LatentScene
    from ..learned.runtime import NeurokRun
    integrators = integrators or INTEGRATORS
    result = {"steps": steps, "amplitude": amplitude, "max": {}, "final": {}, "per_mesh": {}}
    if keep_curves:
        result["curves"] = {}
    for name in meshes:
        base = energy_setup(name)
        with torch.no_grad():
            scene = LatentScene(model, base, device=device)
            d = scene.q0.shape[0]
            g = torch.Generator().manual_seed(seed)
            u1 = torch.randn(d, generator=g).to(scene.q0)
            u2 = torch.randn(d, generator=g).to(scene.q0)
            u1[:TRANSLATION_MODES] = 0.0
            u2[:TRANSLATION_MODES] = 0.0
            u1, u2 = u1 / u1.norm(), u2 / u2.norm()
            w0 = math.sqrt(scene.w0sq)
            q0, qd0 = amplitude * u1, amplitude * w0 * u2
            x0 = scene.decode_metres(q0)
            v0 = torch.einsum("nja,j->na", scene.red.phi, qd0).cpu().numpy() * scene.scale
        red, pot = scene.red, model.potential
        for integ in integrators:
            setup = energy_setup(name)
            setup.x0, setup.v0 = x0, v0
            run = NeurokRun(model, setup, device=device, integrator=integ)
            setup.frames = int(math.ceil(steps / run.substeps)) + 1

            def energy(q, qd):
                q = torch.as_tensor(np.asarray(q.cpu() if hasattr(q, "cpu") else q)).to(red.s)
                qd = torch.as_tensor(np.asarray(qd.cpu() if hasattr(qd, "cpu") else qd)).to(red.s)
                with torch.no_grad():
                    return float(0.5 * torch.dot(qd, qd) + scene.w0sq * pot(q, red.s, red.material, red.B))

            e0, worst, rel, curve = None, 0.0, 0.0, []
            try:
                for q, qd in run.latent_frames():
                    e = energy(q, qd)
                    if e0 is None:
                        e0 = e
                        continue
                    rel = abs(e - e0) / e0 if math.isfinite(e) else math.inf
                    worst = max(worst, rel)
                    if keep_curves:
                        curve.append(rel)
            except Exception as exc:  # noqa: BLE001 - a failed run is an infinite drift, recorded
                worst = rel = math.inf
                result.setdefault("errors", {})[f"{name}/{integ}"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            result["per_mesh"].setdefault(name, {})[integ] = {"max": worst, "final": rel, "e0": e0,
                                                             "steps": (setup.frames - 1) * run.substeps}
            result["max"][integ] = max(result["max"].get(integ, 0.0), worst)
            result["final"][integ] = max(result["final"].get(integ, 0.0), rel)
            if keep_curves:
                result["curves"].setdefault(name, {})[integ] = {"step": [run.substeps * (k + 1) for k in range(len(curve))],
                                                                "drift": curve}
    return result


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


def resolve_latent_mlp(model_path, data_dir, json_path, latent_mlp=None, mlp_minutes=None, mlp_steps=None, quiet=False):
    """The latent-MLP baseline: a given file, `<model>.latent_mlp.pt`, or trained now (on the
    model's own training data when it is on this machine, else on `data_dir`'s train split) and
    saved next to the JSON. Returns (module or None, info dict)."""
    from .baselines import load_latent_mlp, train_latent_mlp
    from ..learned.checkpoint import read_payload
    candidates = [latent_mlp] if latent_mlp else [str(model_path) + ".latent_mlp.pt"]
    for c in candidates:
        if c and Path(c).is_file():
            net = load_latent_mlp(c)
            return net, {"source": str(c), **getattr(net, "meta", {})}
    if latent_mlp:
        raise NeurokError(f"{latent_mlp}: no such latent-MLP baseline file")
    meta = json.loads(read_payload(model_path).get("meta", "{}"))
    root = Path(__file__).resolve().parent.parent
    train_dirs = [meta.get("data"), str(root / meta["data"]) if meta.get("data") else None, str(data_dir)]
    for d in train_dirs:
        if not d or not Path(d).is_dir():
            continue
        try:
            if not any(e.get("split", "train") == "train" for e in load_index(d)):
                continue
        except NeurokError:
            continue
        out = Path(json_path).with_suffix(".latent_mlp.pt")
        minutes = mlp_minutes if mlp_minutes is not None else float(os.environ.get("NEUROK_MLP_MINUTES", DEFAULT_MLP_MINUTES))
        net = train_latent_mlp(model_path, d, minutes=None if mlp_steps else minutes, steps=mlp_steps, out=out, quiet=quiet)
        return net, {"source": str(out), "trained_now": True, **net.meta}
    return None, {"skipped": "no training data found for the latent-MLP baseline"}


def evaluate(model_path, data_dir, max_sequences=None, latent_mlp=None, json_path="eval.json", mlp_minutes=None,
             mlp_steps=None, energy_steps=ENERGY_STEPS, integrator="backward_euler", quiet=False,
             baselines=True, chamfer=True, entries=None, name=None, engine=None, energy_curves=False) -> dict:
    """Evaluate a model on a data folder; returns the eval dict (see the module docstring).
    `engine` replaces the engine loaded from `model_path` (ablations); `entries` replaces the
    data folder's index (a subset)."""
    from .baselines import hold_still, pca_modal, rollout_latent_mlp
    from ..core.progress import ProgressBar
    from ..learned.runtime import NeurokEngine
    engine = engine or NeurokEngine(model_path, integrator=integrator)
    if entries is None:
        entries = pick_entries(load_index(data_dir), max_sequences)
    if not entries:
        raise NeurokError(f"{data_dir}: no sequences to evaluate")
    mlp, mlp_info = (None, {"skipped": "baselines off"})
    if baselines:
        mlp, mlp_info = resolve_latent_mlp(model_path, data_dir, json_path, latent_mlp, mlp_minutes, mlp_steps, quiet)
    names = ["hold_still", "pca_modal"] + (["latent_mlp"] if mlp is not None else []) if baselines else []
    records = {"neurok": [], **{n: [] for n in names}}
    per_sequence = []
    bar = None if quiet else ProgressBar(len(entries), f"eval ({len(entries)} seq)")
    t_start = time.perf_counter()
    for e in entries:
        seq = read_sequence(e["path"])
        setup = setup_from_sequence(seq)
        true = seq.positions
        pred, fault, err, ms = predict_neurok(engine, setup)
        rec = sequence_metrics(pred, true, setup, fault, chamfer)
        rec.update(entry=e, ms_per_frame=ms, error=err)
        records["neurok"].append(rec)
        row = {"file": e["file"], "split": e.get("split", "train"), "family": e.get("family"),
               "scenario": e.get("scenario"), "vertices": int(setup.num_vertices), "frames": int(setup.frames),
               "rel_l2_mean": rec["rel_l2_mean"], "rel_l2_last": float(rec["curve"][-1]),
               "chamfer_l1": rec.get("chamfer_l1"), "unstable": rec["unstable"], "ms_per_frame": ms}
        if err:
            row["error"] = err
        if baselines:
            rs = sequence_metrics(hold_still(setup), true, setup, None, chamfer)
            records["hold_still"].append(rs)
            pp, info = pca_modal(true, setup)
            rp = sequence_metrics(pp, true, setup, None, chamfer)
            rp["pca"] = info
            records["pca_modal"].append(rp)
            row["baselines_rel_l2_mean"] = {"hold_still": rs["rel_l2_mean"], "pca_modal": rp["rel_l2_mean"]}
            if mlp is not None:
                pm, fm = rollout_latent_mlp(mlp, engine.model, setup)
                rm = sequence_metrics(pm, true, setup, fm, chamfer)
                records["latent_mlp"].append(rm)
                row["baselines_rel_l2_mean"]["latent_mlp"] = rm["rel_l2_mean"]
        per_sequence.append(row)
        if bar:
            bar.update(1, postfix=f"{e.get('family')}/{e.get('scenario')} rel_l2 {rec['rel_l2_mean']:.4f}")
    if bar:
        bar.close()

    def split_blocks(recs):
        out = {}
        for split in SPLITS + tuple(sorted({r["entry"].get("split", "train") for r in recs} - set(SPLITS))):
            chosen = [r for r, n in zip(recs, records["neurok"]) if n["entry"].get("split", "train") == split]
            if chosen:
                out[split] = aggregate(chosen)
        out["all"] = aggregate(recs)
        return out

    for name_, recs in records.items():  # attach entries to baseline records (same order)
        for r, n in zip(recs, records["neurok"]):
            r.setdefault("entry", n["entry"])
    result = {"format": "neurok.eval/1", "model": str(model_path), "data": str(data_dir), "integrator": integrator,
              "splits": split_blocks(records["neurok"]),
              "baselines": {n: split_blocks(records[n]) for n in names},
              "families": _grouped(records["neurok"], "family"),
              "scenarios": _grouped(records["neurok"], "scenario"),
              "baselines_info": {"hold_still": "every frame is frame 0",
                                 "pca_modal": f"per-sequence PCA (<= 8 modes) + linear 2nd-order model fitted on the first "
                                              f"{int(100 * 0.25)}% of that sequence's true frames (which it is shown), "
                                              "then rolled out", "latent_mlp": mlp_info},
              "ms_per_frame": _mean([r["ms_per_frame"] for r in records["neurok"]]),
              "per_sequence": per_sequence}
    if names:
        result["families_baselines"] = {n: _grouped(records[n], "family") for n in names}
    if energy_steps:
        result["energy_drift_detail"] = energy_drift(engine.model, steps=energy_steps, keep_curves=energy_curves)
        result["energy_drift"] = result["energy_drift_detail"]["max"]
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    result["machine"] = machine_info()
    if name:
        result["name"] = name
    return result


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


def _json_clean(obj):
    if isinstance(obj, dict):
        return {str(k): _json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_clean(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return _json_clean(obj.tolist())
    return obj


def write_json(path, data):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(_json_clean(data), indent=1))


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
        r = block["rel_l2"]
        base = {n: b.get(split, {}).get("rel_l2", {}).get("mean") for n, b in result["baselines"].items()}
        shown = ", ".join(f"{n} {v:.4f}" for n, v in base.items() if v is not None)
        print(f"{split}: {block['sequences']} seq, rel_l2 mean {_fmt(r['mean'])} (frame 1 {_fmt(r['1'])}, "
              f"last reported {_fmt(_last(r))}), chamfer {_fmt(block['chamfer_l1'])}, unstable "
              f"{block['unstable_share']:.2f}" + (f"; baselines: {shown}" if shown else ""))
    if "energy_drift" in result:
        print("energy drift over %d undamped steps: %s" % (result["energy_drift_detail"]["steps"],
              ", ".join(f"{k} {100 * v:.3g}%" for k, v in result["energy_drift"].items())))
    print(f"wrote {json_path}")
    return result


def _fmt(v):
    return "n/a" if v is None else f"{v:.4f}"


def _last(r):
    vals = [r[str(f)] for f in REPORT_FRAMES if r.get(str(f)) is not None]
    return vals[-1] if vals else None
