"""Training: `neurok train --data DIR --out CKPT [--init CKPT] [--steps N | --minutes M]`.

Three stages share the budget (DESIGN.md section 2):
1. autoencoder (first 15%): the basis must span the observed deformations — mass-weighted
   projection error of frames, with latent noise injection and the VAE's KL term;
2. Euler-Lagrange warm start (next 10%): the residual of the discrete equations of motion
   between consecutive encoded frames (cheap; fits the potential's scale);
3. rollouts (the rest): batches of short rollouts through the implicit step (gradient by the
   implicit-function trick, `integrators.BatchedSolver`), decoded and compared with the true
   frames, starting from noisy encoded states. The autoencoder loss stays on throughout.

Resumable: the state (weights, optimiser, step, elapsed time) is saved to OUT.resume every
few minutes and when the run ends; running the same command again continues from there.
Under `torchrun` each process trains on its own batches and gradients are averaged (gloo on
CPU, nccl on GPU); only rank 0 writes files.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.func import vmap

from ..learned.checkpoint import read_payload, save_checkpoint
from ..learned.dynamics import DTYPE, SUBSTEP, decode, elastic_hessian, encode, mesh_tensors
from ..core.formats import NeurokError, atomic_write_bytes, read_sequence
from .generate import load_index
from ..learned.integrators import BatchedSolver
from ..learned.model import ModelConfig, NeurokModel
from ..core.physics import material_omega2
from ..core.progress import ProgressBar
from ..learned.latent_scene import LatentScene
from ..core.scene import setup_from_sequence

AUTOENCODER_SHARE, EULER_LAGRANGE_SHARE = 0.15, 0.10
BATCH = 8
ROLLOUT_FRAMES = (4, 8)      # rollout length grows from the first to the second over stage 3
START_NOISE = 2e-3           # std of the noise on the start latent (normalised lengths)
KL_WEIGHT = 1e-4
LEARNING_RATE = 1e-3
SAVE_EVERY_SECONDS = 300
REFRESH_DATA_SECONDS = 300   # sequences still being generated join the run as they appear


@dataclass
class TrainItem:
    setup: object
    mt: object
    xs: torch.Tensor       # [T,N,3] normalised positions
    entry: dict


def load_items(data_dir, splits=("train",), limit=None, device="cpu", skip=()) -> list[TrainItem]:
    entries = [e for e in load_index(data_dir) if e.get("split", "train") in splits and e["file"] not in skip]
    if limit:
        entries = entries[:limit]
    items = []
    for e in entries:
        seq = read_sequence(e["path"])
        setup = setup_from_sequence(seq)
        mt = mesh_tensors(setup.rest, setup.faces, setup.material["kind"], setup.vertex_mass, device=device)
        xs = torch.as_tensor(mt.norm.forward(seq.positions), dtype=DTYPE, device=device)
        items.append(TrainItem(setup, mt, xs, e))
    return items


# --------------------------------------------------------------------------- losses

def mass_rms(mu, err):
    """Mass-weighted RMS of a displacement error [...,N,3] (normalised lengths)."""
    return torch.sqrt(torch.einsum("n,...na->...", mu, err ** 2) + 1e-12)


def autoencoder_loss(model, scene, item, frames):
    x = item.xs[frames]
    q = encode(scene.red, scene.mt, x)
    std = torch.exp(model.prior.posterior_log_std)
    q_noisy = q + std * torch.randn_like(q)
    recon = mass_rms(scene.mt.mu, decode(scene.red, scene.mt, q_noisy) - x).mean()
    prior_std = model.prior.prior_std(scene.red.s, scene.red.material)
    kl = (torch.log(prior_std / std) + (std ** 2 + q ** 2) / (2 * prior_std ** 2) - 0.5).sum(-1).mean()
    return recon, kl


def static_context(scene, h):
    """The parts of a step context that stay fixed over a rollout."""
    m = scene.setup.material
    t = lambda v: torch.tensor(v, dtype=DTYPE)  # noqa: E731
    return {"s": scene.red.s, "mat": scene.red.material, "B": scene.red.B, "P": scene.P, "phi_c": scene.phi_c,
            "z_c": scene.z_c, "floor": t(scene.floor), "has_floor": t(0.0 if scene.setup.floor_z is None else 1.0),
            "w0sq": t(scene.w0sq), "alpha": t(m["air_damping"]), "beta": t(m["damping"]), "h": t(h)}


def stack(dicts):
    return {k: torch.stack([d[k] for d in dicts]) for k in dicts[0]}


class Trainer:
    def __init__(self, model: NeurokModel, items, rng):
        self.model, self.items, self.rng = model, items, rng
        self.solver = BatchedSolver(model.potential)
        self.potential_hessian = vmap(lambda q, s, mat, B: elastic_hessian(model.potential, q, {"s": s, "mat": mat, "B": B}))

    def sample(self, frames_needed):
        picks = []
        while len(picks) < BATCH:
            item = self.items[int(self.rng.integers(len(self.items)))]
            T = item.xs.shape[0]
            if T < 2:
                continue
            t0 = int(self.rng.integers(0, max(1, T - frames_needed)))
            picks.append((item, t0, min(frames_needed, T - 1 - t0)))
        return picks

    def scenes(self, picks):
        return [LatentScene(self.model, item.setup, mt=item.mt) for item, _, _ in picks]

    def autoencoder_terms(self, picks, scenes):
        recon, kl = [], []
        for (item, t0, n), scene in zip(picks, scenes):
            frames = torch.as_tensor(self.rng.integers(0, item.xs.shape[0], size=4))
            r, k = autoencoder_loss(self.model, scene, item, frames)
            recon.append(r); kl.append(k)
        return torch.stack(recon).mean(), torch.stack(kl).mean()

    def start_state(self, scene, item, t0):
        q = encode(scene.red, scene.mt, item.xs[t0])
        if t0 == 0:
            qd = scene.qd0
        else:
            qd = (q - encode(scene.red, scene.mt, item.xs[t0 - 1])) / item.setup.dt
        return q, qd

    def euler_lagrange_loss(self, picks, scenes):
        """Residual of one backward-Euler step (h = dt) between consecutive encoded frames."""
        ctxs, q_next = [], []
        for (item, t0, n), scene in zip(picks, scenes):
            q, qd = self.start_state(scene, item, t0)
            ctx = static_context(scene, item.setup.dt)
            ctx.update(q_n=q, qd_n=qd, f=scene.forcing(t0), b=scene.pin_b(t0 + 1))
            ctxs.append(ctx)
            q_next.append(encode(scene.red, scene.mt, item.xs[t0 + 1]))
        ctx = stack(ctxs)
        with torch.no_grad():
            ctx["Hd"] = self.potential_hessian(ctx["q_n"], ctx["s"], ctx["mat"], ctx["B"])
        z = ctx["z_c"] + torch.einsum("bkj,bj->bk", ctx["phi_c"][..., 2], ctx["q_n"])
        ctx["contact"] = (z < ctx["floor"][:, None]).to(DTYPE) * ctx["has_floor"][:, None]
        _, g, _ = self.solver.terms(torch.stack(q_next).detach(), ctx)
        h2 = ctx["h"][:, None] ** 2
        return torch.sqrt(((g * h2) ** 2).sum(-1) + 1e-12).mean()

    def rollout_loss(self, picks, scenes):
        dts = [item.setup.dt for item, _, _ in picks]
        substeps = max(1, int(math.ceil(max(dts) / SUBSTEP - 1e-9)))
        ctxs, qs, qds = [], [], []
        for (item, t0, n), scene in zip(picks, scenes):
            q, qd = self.start_state(scene, item, t0)
            q = q + START_NOISE * torch.randn_like(q)
            ctxs.append(static_context(scene, item.setup.dt / substeps))
            qs.append(q); qds.append(qd)
        static = stack(ctxs)
        q, qd = torch.stack(qs), torch.stack(qds)
        steps = min(n for _, _, n in picks)
        errors = []
        for k in range(steps):
            f = torch.stack([scene.forcing(t0 + k) for (_, t0, _), scene in zip(picks, scenes)])
            b = torch.stack([scene.pin_b(t0 + k + 1) for (_, t0, _), scene in zip(picks, scenes)])
            for _ in range(substeps):
                ctx = dict(static, q_n=q, qd_n=qd, f=f, b=b)
                with torch.no_grad():
                    ctx["Hd"] = self.potential_hessian(q, ctx["s"], ctx["mat"], ctx["B"])
                    z = ctx["z_c"] + torch.einsum("bkj,bj->bk", ctx["phi_c"][..., 2], q)
                    ctx["contact"] = (z < ctx["floor"][:, None]).to(DTYPE) * ctx["has_floor"][:, None]
                q_new = self.solver.solve(ctx)
                qd = (q_new - q) / static["h"][:, None]
                q = q_new
            for i, ((item, t0, _), scene) in enumerate(zip(picks, scenes)):
                err = decode(scene.red, scene.mt, q[i]) - item.xs[t0 + k + 1]
                errors.append(mass_rms(scene.mt.mu, err))
        return torch.stack(errors).mean()


# --------------------------------------------------------------------------- the loop

def distributed():
    """(rank, world) under torchrun, else (0, 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return int(os.environ.get("RANK", "0")), world


def average_gradients(model, world):
    if world == 1:
        return
    for p in model.parameters():
        if p.grad is not None:
            torch.distributed.all_reduce(p.grad)
            p.grad /= world


def data_statistics(model, items, limit=64):
    """Shape-code statistics and material ranges of the training data, kept in the checkpoint
    for the out-of-distribution indicator."""
    codes, omega = [], {"solid": [], "cloth": []}
    with torch.no_grad():
        for item in items[:limit]:
            codes.append(model.shape_encoder(item.mt.points[None], item.mt.normals[None], item.mt.is_cloth[None])[0].numpy())
    for item in items:
        omega[item.setup.material["kind"]].append(material_omega2(item.setup.material, item.mt.norm.scale))
    codes = np.stack(codes)
    return {"shape_code_stats": {"mean": codes.mean(0).tolist(), "std": codes.std(0).tolist()},
            "omega2_range": {k: [min(v), max(v)] for k, v in omega.items() if v}}


def train(data, out, init=None, steps=None, minutes=None, seed=0, latent=None, quiet=False, log=None,
          progress=None, cancel=None):
    """Train (or fine-tune from `init`) and write the checkpoint `out`. `progress(fraction)` is
    called after each step; setting the `cancel` event stops early (the checkpoint is saved)."""
    rank, world = distributed()
    torch.manual_seed(seed + rank)
    rng = np.random.default_rng([seed, rank])
    torch.set_num_threads(1)  # many tiny ops: threads only add overhead (measured 5x slower with 2)
    if steps is None and minutes is None:
        steps = 2000
    out = Path(out)
    resume = out.with_name(out.name + ".resume")
    items = load_items(data, ("train",))
    if not items:
        raise NeurokError(f"{data}: no training sequences (split 'train')")
    val_items = load_items(data, ("validation",), limit=8)
    model, state = _initial_model(init, latent, resume)
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    if state:
        opt.load_state_dict(state["optimizer"])
    step, elapsed = (state["step"], state["elapsed"]) if state else (0, 0.0)
    trainer = Trainer(model, items, rng)
    budget = ("steps", steps) if steps is not None else ("seconds", minutes * 60.0)
    bar = None if (quiet or rank) else ProgressBar(budget[1] if budget[0] == "steps" else int(budget[1]),
                                                   f"train ({len(items)} seq)")
    history = []
    t_start = time.perf_counter() - elapsed
    last_save = last_refresh = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - t_start
        fraction = step / budget[1] if budget[0] == "steps" else elapsed / budget[1]
        if fraction >= 1.0 or (cancel is not None and cancel.is_set()):
            break
        stage = "autoencoder" if fraction < AUTOENCODER_SHARE else \
            "euler_lagrange" if fraction < AUTOENCODER_SHARE + EULER_LAGRANGE_SHARE else "rollout"
        r = ROLLOUT_FRAMES[0] + int((ROLLOUT_FRAMES[1] - ROLLOUT_FRAMES[0]) * max(0.0, fraction - 0.25) / 0.75 + 0.5)
        picks = trainer.sample(r + 1)
        scenes = trainer.scenes(picks)
        recon, kl = trainer.autoencoder_terms(picks, scenes)
        loss = recon + KL_WEIGHT * kl
        terms = {"recon": float(recon.detach())}
        if stage == "euler_lagrange":
            el = trainer.euler_lagrange_loss(picks, scenes)
            loss = loss + el
            terms["el"] = float(el.detach())
        elif stage == "rollout":
            roll = trainer.rollout_loss(picks, scenes)
            loss = loss + roll
            terms["rollout"] = float(roll.detach())
        opt.zero_grad()
        loss.backward()
        average_gradients(model, world)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):
            opt.step()
        step += 1
        history.append(dict(terms, step=step, stage=stage))
        if log:
            log(history[-1])
        if progress:
            progress(min(1.0, fraction))
        if bar:
            shown = " ".join(f"{k}={v:.4f}" for k, v in terms.items())
            bar.update(done=step if budget[0] == "steps" else int(time.perf_counter() - t_start), postfix=f"{stage} {shown}")
        if time.perf_counter() - last_refresh > REFRESH_DATA_SECONDS:
            items.extend(load_items(data, ("train",), skip={i.entry["file"] for i in items}))
            last_refresh = time.perf_counter()
            if bar:
                bar.desc = f"train ({len(items)} seq)"
        if rank == 0 and time.perf_counter() - last_save > SAVE_EVERY_SECONDS:
            _save(out, resume, model, opt, step, time.perf_counter() - t_start, items, history, data)
            last_save = time.perf_counter()
    if bar:
        bar.close()
    if rank == 0:
        _save(out, resume, model, opt, step, time.perf_counter() - t_start, items, history, data)
        if val_items and not quiet:
            print(f"validation: {validation_summary(model, val_items)}")
    return model, history


def _initial_model(init, latent, resume):
    if resume.is_file():
        payload = read_payload(resume)
        model = NeurokModel(ModelConfig(**json.loads(payload["config"])))
        model.load_state_dict(payload["state"])
        return model, {"optimizer": payload["optimizer"], "step": int(payload["step"]), "elapsed": float(payload["elapsed"])}
    if init:
        payload = read_payload(init)
        model = NeurokModel(ModelConfig(**json.loads(payload["config"])))
        model.load_state_dict(payload["state"])
        return model, None
    return NeurokModel(ModelConfig(latent=latent) if latent else ModelConfig()), None


def _save(out, resume, model, opt, step, elapsed, items, history, data):
    meta = data_statistics(model, items)
    recent = history[-50:]
    meta.update({"data": str(data), "sequences": len(items), "steps": step, "seconds": round(elapsed, 1),
                 "final_losses": {k: float(np.mean([h[k] for h in recent if k in h]))
                                  for k in ("recon", "el", "rollout") if any(k in h for h in recent)}})
    save_checkpoint(out, model, meta)
    save_checkpoint(resume, model, meta, extra={"optimizer": opt.state_dict(), "step": step, "elapsed": elapsed})


def validation_summary(model, items, frames=24):
    """Mean rel_l2 of runtime rollouts (first `frames` frames) on validation sequences, and
    the same for holding still at frame 0."""
    from ..learned.runtime import NeurokRun
    errs, still = [], []
    with torch.no_grad():
        for item in items:
            setup = item.setup
            T = min(frames, setup.frames)
            run = NeurokRun(model, _truncate(setup, T))
            pred = run.bake()
            true = item.mt.norm.inverse(item.xs[:T].numpy())
            diag = item.mt.norm.scale
            errs.append(np.linalg.norm(pred - true, axis=2).mean() / diag)
            still.append(np.linalg.norm(true[0][None] - true, axis=2).mean() / diag)
    return {"rel_l2": round(float(np.mean(errs)), 5), "hold_still": round(float(np.mean(still)), 5)}


def _truncate(setup, frames):
    import copy
    s = copy.copy(setup)
    s.frames = frames
    return s
