"""Ablations (full preset): latent sizes by short training runs (subprocesses, two at a time),
the integrators, and a prior-only potential (geometry only, no dynamics learned).

They reach into the learned model (its potential, its prior, its mode counts), so each one that
no longer fits the learned model is reported as not run, with the reason.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ..core.formats import read_sequence
from ..core.scene import setup_from_sequence
from ..training.generate import load_index
from .metrics import evaluate, pick_entries, predict_neurok, sequence_metrics

ROOT = Path(__file__).resolve().parent.parent.parent


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
    try:
        measure("integrator: implicit_midpoint (default model)", engine=NeurokEngine(model_path, integrator="implicit_midpoint"),
                group="integrator")
    except (TypeError, ValueError, KeyError) as exc:     # the learned engine offers other integrators
        rows.append({"name": "integrator: implicit_midpoint", "status": "not run", "group": "integrator",
                     "reason": f"{type(exc).__name__}: {str(exc)[:120]}"})
    if train_data:
        try:
            c, scores = fit_prior_scale(model_path, train_data)
            measure(f"potential: prior-only (default model's basis and prior, c = {c:g})",
                    engine=prior_only_engine(model_path, c), group="potential", prior_scale=c, prior_scale_scores=scores)
            rows.append(dict(default_row, name="potential: learned (default model; same run as backward_euler)", group="potential"))
        except (AttributeError, ImportError, TypeError, KeyError) as exc:   # the learned model changed shape
            rows.append({"name": "potential: prior-only", "status": "not run",
                         "reason": f"does not fit this learned model ({type(exc).__name__}: {str(exc)[:120]})"})
    else:
        rows.append({"name": "potential: prior-only", "status": "not run", "reason": "no training data to fit its constant"})
    # latent sizes by short training runs (in parallel, one core each)
    minutes = float(os.environ.get("NEUROK_ABLATION_MINUTES", cfg["ablation_minutes"]))
    try:
        from ..learned.model import AFFINE_MODES, TRANSLATION_MODES
    except ImportError:
        AFFINE_MODES, TRANSLATION_MODES = 0, 0
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
