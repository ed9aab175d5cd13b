"""Baselines the learned engine is measured against (DESIGN.md section 5), on the same data.

hold_still
    Every frame is frame 0. The floor any dynamics model has to beat.

pca_modal  (per-mesh PCA subspace, linear second-order modal dynamics)
    For one test sequence of T frames, the baseline is *given the first K = 25% of that
    sequence's own ground truth* (at least 4 frames). It builds a PCA basis Phi (r <= 8 modes)
    of those frames' displacements from the rest shape, projects them (q_t = Phi^T u_t) and fits
    by least squares a linear second-order model

        q_{t+1} = A q_t + B q_{t-1} + C g_t + c,     g_t = Phi^T (external_accel_t + gravity),

    lightly ridge-regularised towards free inertia (A = 2I, B = -I, C = dt^2 I, c = 0). Eigenvalues of
    the model's companion matrix are clamped into the unit disk (a fitted linear model may be
    unstable on its own; clamping makes it a fair, stable baseline). Frames 0..K-1 are the
    projection of the true frames it was shown; it is rolled out from there for frames K..T-1.
    So it has seen part of the truth the learned engine never sees, and its early-frame errors
    are not comparable; frame 50 and later (sequences of 200 frames) are.

latent_mlp  (non-Lagrangian latent stepper with the NeuROK decoder)
    q_{t+1} = q_t + (q_t - q_{t-1}) + MLP(q_t, q_t - q_{t-1}, f_t, pins, floor, material), so a
    zero network continues at constant velocity. q lives in the NeuROK model's latent space: the
    same per-mesh skinning subspace (model v2's `LatentScene`: affine handles, mass-orthonormal)
    encodes the ground truth and decodes the prediction, so the only difference from the learned
    engine is the dynamics (an unconstrained MLP instead of the Euler-Lagrange equations of the
    learned strain energy). Forces (gravity + painted, `scene.forcing(t)`), pin springs and the
    floor enter as the same exact reduced quantities the learned engine uses. A mesh's latent
    has `scene.dims` <= 12 x handles coordinates (flat sheets keep fewer); it is zero-padded to
    12 x handles and the padding is masked. Trained on the training split's encoded latents with
    multi-step rollout loss (4..16 frames, noise on the start state), one step per frame.
    Weights: `torch.save` of plain tensors and strings, loadable with `weights_only=True`.
"""
from __future__ import annotations

import json
import os
import math
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..core.formats import FormatError, NeurokError, atomic_write_bytes, read_sequence
from ..core.physics import pin_omega2
# the latent-MLP baseline steps in the learned model's own latent space, so it reads that model's
# internals (the one part of the evaluation that does: model v2's `LatentScene`)
from ..learned.checkpoint import load_checkpoint, read_payload
from ..learned.strain_energy import BASE_FEATURES, DTYPE


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.SiLU())
    return nn.Sequential(*layers)


from ..core.scene import setup_from_sequence
from ..core.setup import Setup
from ..training.generate import load_index

MLP_FORMAT = "neurok.latent_mlp/1"
BLOWUP = 1e3               # |q| (normalised lengths: bounding-box diagonals) beyond which a rollout is a blow-up
PCA_FIT_SHARE = 0.25
PCA_MAX_MODES = 8
DEFAULT_MLP_MINUTES = 3.0


# =========================================================================== hold still

def hold_still(setup: Setup) -> np.ndarray:
    return np.repeat(np.asarray(setup.x0, np.float32)[None], setup.frames, axis=0)


# =========================================================================== PCA modal

def pca_modal(positions: np.ndarray, setup: Setup, fit_share: float = PCA_FIT_SHARE,
              max_modes: int = PCA_MAX_MODES) -> tuple[np.ndarray, dict]:
    """Prediction [T,N,3] of the PCA modal baseline for a sequence whose true frames are
    `positions` (only the first K are used). Returns (prediction, info)."""
    pos = np.asarray(positions, np.float64)
    T, N, _ = pos.shape
    rest = np.asarray(setup.rest, np.float64)
    K = min(T, max(4, int(round(fit_share * T))))
    U = (pos[:K] - rest[None]).reshape(K, -1)                         # [K, 3N]
    _, sv, vt = np.linalg.svd(U, full_matrices=False)
    keep = sv > 1e-9 * max(sv[0], 1e-30) if len(sv) else np.zeros(0, bool)
    r = int(min(max_modes, K - 1, keep.sum()))
    info = {"fit_frames": K, "modes": r}
    if r < 1 or T <= K:   # nothing moved in the frames it saw (or it saw them all): hold them
        pred = pos.copy()
        pred[K:] = pos[K - 1]
        return pred.astype(np.float32), info
    phi = vt[:r].T                                                    # [3N, r], orthonormal
    q = U @ phi                                                       # [K, r]
    g = np.stack([(np.asarray(setup.external_accel(t)) + np.asarray(setup.gravity)[None]).ravel() @ phi
                  for t in range(T)])                                 # [T, r]
    dt = setup.dt
    # rows t = 1..K-2: q_{t+1} = W [q_t, q_{t-1}, g_t, 1]
    X = np.concatenate([q[1:K - 1], q[0:K - 2], g[1:K - 1], np.ones((K - 2, 1))], axis=1)
    Y = q[2:K]
    prior = np.concatenate([2.0 * np.eye(r), -np.eye(r), dt ** 2 * np.eye(r), np.zeros((1, r))], axis=0)  # [3r+1, r]
    XtX = X.T @ X
    lam = 1e-4 * np.diag(XtX) + 1e-12 * (np.trace(XtX) + 1e-30)   # small, per column (scale-free)
    W = prior + np.linalg.solve(XtX + np.diag(lam), X.T @ (Y - X @ prior))
    A, B, C, c = W[:r].T, W[r:2 * r].T, W[2 * r:3 * r].T, W[3 * r]
    A, B, clamped = _stabilise(A, B)
    info["clamped_eigenvalues"] = clamped
    qs = np.zeros((T, r))
    qs[:K] = q
    for t in range(K - 1, T - 1):
        qs[t + 1] = A @ qs[t] + B @ qs[t - 1] + C @ g[t] + c
    pred = rest[None] + (qs @ phi.T).reshape(T, N, 3)
    return pred.astype(np.float32), info


def _stabilise(A, B, radius=1.0):
    """Clamp the eigenvalues of the companion matrix [[A, B], [I, 0]] into |z| <= radius."""
    r = A.shape[0]
    M = np.block([[A, B], [np.eye(r), np.zeros((r, r))]])
    lam, V = np.linalg.eig(M)
    big = np.abs(lam) > radius
    if not big.any():
        return A, B, 0
    lam = np.where(big, lam / np.abs(lam) * radius, lam)
    try:
        M2 = np.real(V @ np.diag(lam) @ np.linalg.inv(V))
    except np.linalg.LinAlgError:
        M2 = M / max(np.abs(np.linalg.eigvals(M)).max(), 1e-12) * radius
    return M2[:r, :r], M2[:r, r:], int(big.sum())


# =========================================================================== latent MLP stepper

class LatentMLP(nn.Module):
    """q_{t+1} = mask * (q_t + (q_t - q_{t-1}) + out_std * net(normalised features)).
    (`shape_code`: width of a per-mesh shape code among the inputs; model v2 has none, 0.)"""

    def __init__(self, latent: int, shape_code: int = 0, hidden: int = 256):
        super().__init__()
        self.latent, self.shape_code, self.hidden = latent, shape_code, hidden
        n_in = 6 * latent + shape_code + BASE_FEATURES + 5
        self.net = mlp([n_in, hidden, hidden, hidden, latent])
        with torch.no_grad():
            self.net[-1].weight.mul_(0.01)
            self.net[-1].bias.zero_()
        self.register_buffer("in_mean", torch.zeros(n_in))
        self.register_buffer("in_std", torch.ones(n_in))
        self.register_buffer("out_std", torch.ones(latent))
        self.to(DTYPE)  # the NeuROK model's latents are in DTYPE

    def config(self):
        return {"latent": self.latent, "shape_code": self.shape_code, "hidden": self.hidden}

    def forward(self, feats, q, q_prev, mask=None):
        out = q + (q - q_prev) + self.out_std * self.net((feats - self.in_mean) / self.in_std)
        return out if mask is None else out * mask


CONTACT_ROWS = 512          # contact samples per mesh, padded by repeating the first (the minimum is unchanged)


def _pad(x, size, dim=-1):
    pad = size - x.shape[dim]
    if pad <= 0:
        return x
    shape = list(x.shape)
    shape[dim] = pad
    return torch.cat([x, torch.zeros(shape, dtype=x.dtype, device=x.device)], dim=dim)


class SceneTerms:
    """The reduced, exact inputs of one sequence for the latent stepper, from the NeuROK model's
    `LatentScene` (same subspace, forces, pins and floor as the learned engine), padded to
    `latent` coordinates."""

    def __init__(self, scene, latent: int):
        setup = scene.setup
        T = setup.frames
        d = scene.dims
        if d > latent:
            raise NeurokError(f"this mesh's latent has {d} coordinates, more than the baseline's {latent}")
        self.scene, self.d, self.latent = scene, d, latent
        self.dt = setup.dt
        self.mask = _pad(torch.ones(d, dtype=DTYPE), latent)
        self.F = _pad(torch.stack([scene.forcing(t) for t in range(T)]) * setup.dt ** 2, latent)         # [T,D]
        omega = pin_omega2(scene.w0sq)
        self.Pb = _pad(torch.stack([scene.pin_b(min(t + 1, T - 1)) for t in range(T)]) / omega, latent)  # [T,D]
        self.P = _pad(_pad(scene.P / omega, latent, -1), latent, -2)                                    # [D,D]
        Vz, z_c = scene.contact_Vz, scene.contact_rest[:, 2]
        Vz, z_c = Vz[:CONTACT_ROWS], z_c[:CONTACT_ROWS]
        extra = CONTACT_ROWS - len(z_c)
        if extra > 0:
            Vz = torch.cat([Vz, Vz[:1].expand(extra, -1)])
            z_c = torch.cat([z_c, z_c[:1].expand(extra)])
        self.phi_z, self.z_c = _pad(Vz, latent), z_c                                                   # [K,D], [K]
        self.floor, self.has_floor = float(scene.floor), 0.0 if setup.floor_z is None else 1.0
        m = setup.material
        w0 = math.sqrt(scene.w0sq)
        const = [math.log10(max(scene.w0sq, 1e-12)) / 3.0, math.log10(max(m.damping * w0, 1e-6)) / 3.0,
                 m.air_damping * setup.dt, self.has_floor]
        self.cond = torch.cat([scene.features[:BASE_FEATURES].detach().to(DTYPE).cpu(), torch.tensor(const, dtype=DTYPE)])

    def features(self, t, q, q_prev):
        """Features [..., n_in] for the step t -> t+1; t is an int or a long tensor [...]."""
        F, Pb = self.F[t], self.Pb[t]
        pin = Pb - q @ self.P.T
        z = self.z_c + q @ self.phi_z.T
        gap = self.has_floor * torch.clamp(z.min(dim=-1, keepdim=True).values - self.floor, -1.0, 1.0)
        diagP = torch.diagonal(self.P).expand_as(q)
        mask = self.mask.expand_as(q)
        cond = self.cond.expand(q.shape[:-1] + self.cond.shape)
        return torch.cat([q, q - q_prev, F, pin, diagP, mask, cond, gap], dim=-1)


def _start_latents(scene, latent):
    q0 = _pad(scene.q0.cpu(), latent)
    return q0, q0 - scene.setup.dt * _pad(scene.qd0.cpu(), latent)


def _latent_size(model) -> int:
    return 12 * int(model.cfg.handles)


def base_resolution(model):
    """The stepper works in the model's base subspace (its weight field's handles on the base
    lattice, at most 96 coordinates) whatever the mesh: one network for every mesh."""
    from ..learned.subspace import Resolution
    return Resolution(int(model.cfg.handles), int(model.cfg.lattice_cells))


def rollout_latent_mlp(stepper: LatentMLP, model, setup: Setup, device="cpu"):
    """Predicted frames [T,N,3] and the first frame that blew up (None if stable)."""
    from ..learned.latent_scene import LatentScene
    with torch.no_grad():
        scene = LatentScene(model, setup, device=device, fixed=base_resolution(model))
        terms = SceneTerms(scene, stepper.latent)
        q, q_prev = _start_latents(scene, stepper.latent)
        out = np.empty((setup.frames, setup.num_vertices, 3), np.float32)
        out[0] = setup.x0
        fault = None
        for t in range(setup.frames - 1):
            q_new = stepper(terms.features(t, q, q_prev), q, q_prev, terms.mask)
            # rigid motion is part of every coordinate here, so only a non-finite or absurd state is a blow-up
            if not bool(torch.all(torch.isfinite(q_new))) or float(torch.linalg.norm(q_new)) > BLOWUP:
                fault = t + 1
                out[t + 1:] = out[t]
                break
            q_prev, q = q, q_new
            out[t + 1] = scene.decode_metres(q[:terms.d])
    return out, fault


class _Sequence:
    def __init__(self, item, latent):
        self.terms = SceneTerms(item.scene, latent)
        self.Q = _pad(item.qs.detach().cpu(), latent)                  # [T,D] encoded ground truth
        _, self.Q_prev0 = _start_latents(item.scene, latent)
        self.T = self.Q.shape[0]


def train_latent_mlp(model_path, data_dir, minutes: float | None = 5.0, steps: int | None = None, out=None,
                     seed: int = 0, quiet: bool = False, batch: int = 64, hidden: int = 256, log=None,
                     sequences: int | None = None):
    """Train the latent-MLP baseline on the training split of `data_dir` (its first `sequences`
    when given), in the latent space of the (frozen) NeuROK model at `model_path`. Saves to `out`
    when given; returns the module."""
    from ..core.progress import ProgressBar
    from ..training.train import load_items
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model, _ = load_checkpoint(model_path)
    for p in model.parameters():
        p.requires_grad_(False)
    items = load_items(model, data_dir, ("train",), limit=sequences, fixed=base_resolution(model))
    if not items:
        raise NeurokError(f"{data_dir}: no training sequences for the latent-MLP baseline")
    with torch.no_grad():
        D = _latent_size(model)
        seqs = [_Sequence(it, D) for it in items if it.qs.shape[0] >= 3 and it.scene.dims <= D]
    if not seqs:
        raise NeurokError(f"{data_dir}: training sequences are too short for the latent-MLP baseline")
    net = LatentMLP(D, 0, hidden)
    _fit_normalisation(net, seqs)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    budget_steps = steps if steps is not None else None
    budget_seconds = None if steps is not None else 60.0 * (minutes if minutes is not None else 5.0)
    total = budget_steps if budget_steps is not None else int(budget_seconds)
    bar = None if quiet else ProgressBar(total, f"latent-MLP baseline ({len(seqs)} seq)")
    t_start = time.perf_counter()
    step, history = 0, []
    while True:
        elapsed = time.perf_counter() - t_start
        progress = step / budget_steps if budget_steps is not None else elapsed / budget_seconds
        if progress >= 1.0:
            break
        for g in opt.param_groups:
            g["lr"] = 1e-3 * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))
        L = int(round(4 + 12 * min(1.0, progress / 0.7)))
        loss = _rollout_loss(net, seqs, rng, batch, L)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        if all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None):
            opt.step()
        step += 1
        history.append(float(loss.detach()))
        if log:
            log({"step": step, "loss": history[-1], "rollout": L})
        if bar:
            bar.update(done=step if budget_steps is not None else int(time.perf_counter() - t_start),
                       postfix=f"rollout {L} loss {np.mean(history[-20:]):.5f}")
    if bar:
        bar.close()
    net.eval()
    meta = {"model": str(model_path), "data": str(data_dir), "sequences": len(seqs), "steps": step,
            "seconds": round(time.perf_counter() - t_start, 1),
            "final_loss": float(np.mean(history[-50:])) if history else None}
    net.meta = meta
    if out is not None:
        save_latent_mlp(out, net, meta)
    return net


def _fit_normalisation(net, seqs):
    feats, acc = [], []
    with torch.no_grad():
        for s in seqs:
            t = torch.arange(1, s.T - 1)
            feats.append(s.terms.features(t, s.Q[1:-1], s.Q[:-2]))
            acc.append(s.Q[2:] - 2 * s.Q[1:-1] + s.Q[:-2])
        feats, acc = torch.cat(feats), torch.cat(acc)
        net.in_mean.copy_(feats.mean(0))
        net.in_std.copy_(feats.std(0).clamp_min(1e-6) if len(feats) > 1 else torch.ones_like(net.in_std))
        net.out_std.copy_(acc.std(0).clamp_min(1e-7) if len(acc) > 1 else torch.ones_like(net.out_std))


def _rollout_loss(net, seqs, rng, batch, L, noise=2e-3):
    """Mean latent error (= mass-weighted RMS vertex error beyond the projection error, the
    basis being mass-orthonormal) of `batch` rollouts of up to L frames from noisy true starts."""
    picks = []
    for _ in range(batch):
        s = seqs[int(rng.integers(len(seqs)))]
        n = min(L, s.T - 1)
        t0 = int(rng.integers(0, s.T - n))
        picks.append((s, t0, n))
    n = min(p[2] for p in picks)
    q = torch.stack([s.Q[t0] for s, t0, _ in picks])
    q_prev = torch.stack([s.Q[t0 - 1] if t0 > 0 else s.Q_prev0 for s, t0, _ in picks])
    shift = noise * torch.randn_like(q)
    shift = shift * torch.stack([s.terms.mask for s, _, _ in picks])
    q, q_prev = q + shift, q_prev + shift  # same offset: a position error, not a velocity kick
    F = torch.stack([s.terms.F[t0:t0 + n] for s, t0, _ in picks])              # [B,n,d]
    Pb = torch.stack([s.terms.Pb[t0:t0 + n] for s, t0, _ in picks])
    target = torch.stack([s.Q[t0 + 1:t0 + n + 1] for s, t0, _ in picks])       # [B,n,d]
    P = torch.stack([s.terms.P for s, _, _ in picks])                           # [B,d,d]
    phi_z = torch.stack([s.terms.phi_z for s, _, _ in picks])                   # [B,K,d]
    z_c = torch.stack([s.terms.z_c for s, _, _ in picks])                       # [B,K]
    floor = torch.tensor([s.terms.floor for s, _, _ in picks], dtype=q.dtype)[:, None]
    has_floor = torch.tensor([s.terms.has_floor for s, _, _ in picks], dtype=q.dtype)[:, None]
    cond = torch.stack([s.terms.cond for s, _, _ in picks])
    mask = torch.stack([s.terms.mask for s, _, _ in picks])
    diagP = torch.diagonal(P, dim1=1, dim2=2)
    errs = []
    for k in range(n):
        pin = Pb[:, k] - torch.einsum("bij,bj->bi", P, q)
        z = z_c + torch.einsum("bkj,bj->bk", phi_z, q)
        gap = has_floor * torch.clamp(z.min(dim=-1, keepdim=True).values - floor, -1.0, 1.0)
        feats = torch.cat([q, q - q_prev, F[:, k], pin, diagP, mask, cond, gap], dim=-1)
        q_new = net(feats, q, q_prev, mask)
        errs.append(torch.sqrt(((q_new - target[:, k]) ** 2).sum(-1) + 1e-12))
        q_prev, q = q, q_new
    return torch.stack(errs).mean()


def save_latent_mlp(path, net: LatentMLP, meta: dict | None = None):
    import io
    payload = {"format": MLP_FORMAT, "config": json.dumps(net.config()), "meta": json.dumps(meta or {}),
               "state": {k: v.detach().cpu() for k, v in net.state_dict().items()}}
    buf = io.BytesIO()
    torch.save(payload, buf)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue())


def load_latent_mlp(path) -> LatentMLP:
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one clear error
        raise FormatError(f"{path}: not a loadable latent-MLP baseline ({type(e).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != MLP_FORMAT:
        raise FormatError(f"{path}: not a '{MLP_FORMAT}' file")
    net = LatentMLP(**json.loads(payload["config"]))
    net.load_state_dict(payload["state"])
    net.meta = json.loads(payload.get("meta", "{}"))
    net.eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return net




def model_training_data(model_path, fallback=None):
    """(folder of the model's own training data when it is on this machine, else `fallback` if it
    has a train split, else None; the checkpoint's meta dict)."""
    meta = json.loads(read_payload(model_path).get("meta", "{}"))
    root = Path(__file__).resolve().parent.parent.parent
    for d in (meta.get("data"), str(root / meta["data"]) if meta.get("data") else None, fallback):
        if not d or not Path(d).is_dir():
            continue
        try:
            if any(e.get("split", "train") == "train" for e in load_index(d)):
                return str(d), meta
        except NeurokError:
            continue
    return None, meta


def resolve_latent_mlp(model_path, data_dir, json_path, latent_mlp=None, mlp_minutes=None, mlp_steps=None, quiet=False):
    """The latent-MLP baseline: a given file, `<model>.latent_mlp.pt`, or trained now (on the
    model's own training data when it is on this machine, else on `data_dir`'s train split) and
    saved next to the JSON. Returns (module or None, info dict)."""

    candidates = [latent_mlp] if latent_mlp else [str(model_path) + ".latent_mlp.pt"]
    for c in candidates:
        if c and Path(c).is_file():
            net = load_latent_mlp(c)
            return net, {"source": str(c), **getattr(net, "meta", {})}
    if latent_mlp:
        raise NeurokError(f"{latent_mlp}: no such latent-MLP baseline file")
    d, _ = model_training_data(model_path, str(data_dir))
    if d is None:
        return None, {"skipped": "no training data found for the latent-MLP baseline"}
    out = Path(json_path).with_suffix(".latent_mlp.pt")
    minutes = mlp_minutes if mlp_minutes is not None else float(os.environ.get("NEUROK_MLP_MINUTES", DEFAULT_MLP_MINUTES))
    net = train_latent_mlp(model_path, d, minutes=None if mlp_steps else minutes, steps=mlp_steps, out=out, quiet=quiet)
    return net, {"source": str(out), "trained_now": True, **net.meta}
