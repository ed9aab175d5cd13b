"""One latent step as a sum of small energy terms.

A backward-Euler step from (q_n, q'_n) minimises the incremental potential

    E(q) = inertia + elastic + external work + pins + damping + floor + colliders

over q. Each term below takes the trial state q and the step's `StepContext` and returns its
energy, gradient and Hessian (a `Terms` triple; the Hessian is positive semi-definite, projected
where the exact one is not). To add a force, write one more function of that shape and list it
in `TERMS`: the integrator, the runtime and training all sum the same list.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import interactions
from .latent_scene import LatentScene
from .materials import DTYPE


@dataclass
class Terms:
    energy: torch.Tensor
    grad: torch.Tensor
    hess: torch.Tensor | None

    def __add__(self, other):
        hess = None if self.hess is None or other.hess is None else self.hess + other.hess
        return Terms(self.energy + other.energy, self.grad + other.grad, hess)


@dataclass
class StepContext:
    """The inputs of one step, built in one place (`StepContext.build`)."""
    scene: LatentScene
    h: float
    q_n: torch.Tensor
    qd_n: torch.Tensor
    force: torch.Tensor          # generalised gravity + painted forces over the step
    pin_b: torch.Tensor          # pin targets at the end of the step, reduced
    damping: torch.Tensor        # Rayleigh D = alpha I + beta K(q_n)
    contact_prev: torch.Tensor   # contact sample positions at q_n (friction)
    exact_hessian: bool = True   # the exact elastic Hessian (Newton falls back to projected samples if needed)
    frame: int = 0               # the step runs from `frame` to `frame + 1` (colliders: interactions.py)

    @classmethod
    def build(cls, scene: LatentScene, frame: int, q_n, qd_n, h: float, damping=None):
        """`damping`: the Rayleigh matrix if the caller already has it (the runtime computes it
        once per frame; it costs an elastic Hessian)."""
        damping = rayleigh(scene, q_n) if damping is None else damping
        prev = scene.contact_rest + torch.einsum("kid,d->ki", scene.contact_V, q_n)
        force = scene.forcing(frame) + interactions.field_force(scene, frame, q_n, qd_n)  # fields on the deformed surface
        return cls(scene, h, q_n, qd_n, force, scene.pin_b(frame + 1), damping, prev, frame=frame)


def rayleigh(scene: LatentScene, q) -> torch.Tensor:
    """Rayleigh damping D = alpha I + beta K(q) (the mass matrix is I in this basis)."""
    mat = scene.setup.material
    D = float(mat.get("air_damping", 0.0)) * torch.eye(scene.dims, dtype=DTYPE, device=q.device)
    if mat.get("damping", 0.0) > 0:
        D = D + float(mat["damping"]) * elastic(q, None, scene).hess
    return D


def elastic(q, ctx, scene: LatentScene | None = None, need_hess=True) -> Terms:
    """w0^2 sum_k c_k psi(F_k(q)) (+ reduced quadratic bending for cloth): `LatentScene.elastic`.
    Per-sample Hessians are exact inside a step (inertia keeps the total positive definite; the
    integrator checks) and projected elsewhere (damping, posing)."""
    project = ctx is None or not ctx.exact_hessian
    return Terms(*(scene or ctx.scene).elastic(q, need_hess, project))


def elastic_energy(q, scene: LatentScene):
    """Energy only (line search): +inf where a sample would invert."""
    return scene.elastic_energy(q)


def inertia(q, ctx: StepContext, need_hess=True) -> Terms:
    r = q - ctx.q_n - ctx.h * ctx.qd_n
    eye = torch.eye(len(q), dtype=q.dtype, device=q.device) / ctx.h ** 2
    return Terms(0.5 * torch.dot(r, r) / ctx.h ** 2, r / ctx.h ** 2, eye)


def external_work(q, ctx: StepContext, need_hess=True) -> Terms:
    return Terms(-torch.dot(ctx.force, q), -ctx.force, torch.zeros(len(q), len(q), dtype=q.dtype, device=q.device))


def pins(q, ctx: StepContext, need_hess=True) -> Terms:
    P = ctx.scene.P
    return Terms(0.5 * q @ P @ q - torch.dot(ctx.pin_b, q), P @ q - ctx.pin_b, P)


def damping(q, ctx: StepContext, need_hess=True) -> Terms:
    dq = q - ctx.q_n
    D = ctx.damping / ctx.h
    return Terms(0.5 * dq @ D @ dq, D @ dq, D)


def floor_contact(q, ctx: StepContext, need_hess=True) -> Terms:
    """Penalty below the floor plus sliding friction, at the contact samples."""
    s = ctx.scene
    d = len(q)
    zero = Terms(torch.zeros((), dtype=q.dtype, device=q.device), torch.zeros_like(q),
                 torch.zeros(d, d, dtype=q.dtype, device=q.device))
    if not s.has_floor:
        return zero
    z = s.contact_rest[:, 2] + s.contact_Vz @ q
    if float(z.min()) >= s.floor:
        return zero
    x = s.contact_rest + torch.einsum("kid,d->ki", s.contact_V, q)
    pen = torch.clamp(x[:, 2] - s.floor, max=0.0)
    touching = (pen < 0).to(q.dtype)
    k = s.contact_mass * s.floor_k
    kf = s.contact_mass * s.friction / ctx.h ** 2 * touching
    slide = (x - ctx.contact_prev)[:, :2]
    energy = 0.5 * k * torch.dot(pen, pen) + 0.5 * torch.sum(kf[:, None] * slide ** 2)
    Vz, Vt = s.contact_V[:, 2, :], s.contact_V[:, :2, :]
    g = k * Vz.T @ pen + torch.einsum("k,ki,kid->d", kf, slide, Vt)
    H = k * Vz.T @ (touching[:, None] * Vz) + torch.einsum("k,kid,kie->de", kf, Vt, Vt)
    return Terms(energy, g, H)


def elastic_term(q, ctx: StepContext, need_hess=True) -> Terms:
    return elastic(q, ctx, need_hess=need_hess)


def collider_contact(q, ctx: StepContext, need_hess=True) -> Terms:
    """Penalty and friction against `setup.colliders` at the contact samples: `interactions.collider_contact`."""
    return Terms(*interactions.collider_contact(q, ctx, need_hess))


TERMS = (inertia, elastic_term, external_work, pins, damping, floor_contact, collider_contact)


def total(q, ctx: StepContext, need_hess=True) -> Terms:
    out = TERMS[0](q, ctx, need_hess)
    for term in TERMS[1:]:
        out = out + term(q, ctx, need_hess)
    return out


def total_energy(q, ctx: StepContext):
    """The incremental potential alone (line search), +inf where a sample would invert."""
    e = torch.zeros((), dtype=q.dtype, device=q.device)
    for term in TERMS:   # the same list as `total`; the elastic term has a cheaper energy-only path
        e = e + (elastic_energy(q, ctx.scene) if term is elastic_term else term(q, ctx, need_hess=False).energy)
    return e
