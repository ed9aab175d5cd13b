"""The terms of a latent step's incremental potential, one function each (the step that sums
and minimises them, and the `StepContext` they read: `integrators.py`).

A backward-Euler step from (q_n, q'_n) minimises over q

    E(q) = inertia + elastic + contact (floor, colliders, friction) + forces (external work, pins) + damping

Each term takes the trial state q and the step's `StepContext` and returns its energy, gradient
and Hessian (a `Terms` triple; the Hessian is positive semi-definite, projected where the exact
one is not), or None where it has nothing to add (no floor, no collider). To add a force, write
one more function of that shape and list it in `QUADRATIC_TERMS` (exactly quadratic in q:
inertia, external work, pins, damping) or `NONLINEAR_TERMS`: the integrator, the runtime and
training all sum the same lists. The quadratic terms are summed once per step into one constant
quadratic (`integrators.quadratic_part`), so each Newton iteration costs one matrix-vector
product for all of them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.friction import FRICTION_SLIP_SPEED, collider_contacts, floor_contacts, smoothed_slide
from . import latent_world_forces
from .latent_scene import LatentScene
from .strain_energy import DTYPE, with_gradient_of


@dataclass
class Terms:
    energy: torch.Tensor
    grad: torch.Tensor
    hess: torch.Tensor | None

    def __add__(self, other):
        hess = None if self.hess is None or other.hess is None else self.hess + other.hess
        return Terms(self.energy + other.energy, self.grad + other.grad, hess)


# --------------------------------------------------------------------------- inertia

def inertia(q, ctx: StepContext, need_hess=True) -> Terms:
    r = q - ctx.q_n - ctx.h * ctx.qd_n
    eye = torch.eye(len(q), dtype=q.dtype, device=q.device) / ctx.h ** 2
    return Terms(0.5 * torch.dot(r, r) / ctx.h ** 2, r / ctx.h ** 2, eye)


# --------------------------------------------------------------------------- elastic

def elastic_term(q, ctx: StepContext, need_hess=True) -> Terms:
    """The elastic energy, and the damping's per-sample part where it has one: that lives at the
    same samples, so its Hessian is assembled with the elastic one."""
    sample = sample_damping(q, ctx)
    if sample is None:
        return elastic(q, ctx, need_hess=need_hess)
    t = elastic(q, ctx, need_hess=need_hess, extra=ctx.damping.blocks / ctx.h if need_hess else None)
    return Terms(t.energy + sample[0], t.grad + sample[1], t.hess)


def elastic(q, ctx, scene: LatentScene | None = None, need_hess=True, extra=None) -> Terms:
    """w0^2 sum_k c_k psi(F_k(q)) (+ reduced quadratic bending for cloth): `LatentScene.elastic`.
    Per-sample Hessians are exact inside a step (inertia keeps the total positive definite; the
    integrator checks) and projected elsewhere (damping, posing). `extra`: per-sample Hessians
    assembled with the elastic ones."""
    project = ctx is None or not ctx.exact_hessian
    fast = ctx is not None and ctx.fast_hessian
    return Terms(*(scene or ctx.scene).elastic(q, need_hess, project, fast, extra))


def elastic_energy(q, scene: LatentScene):
    """Energy only (line search): +inf where a sample would invert."""
    return scene.elastic_energy(q)


def sample_damping(q, ctx: StepContext):
    """(energy, gradient) of the damping's per-sample part (`Damping.blocks`), or None."""
    if ctx.damping.blocks is None:
        return None
    dq = q - ctx.q_n
    Bdq = ctx.scene.sample_apply(ctx.damping.blocks, dq) / ctx.h
    return 0.5 * torch.dot(dq, Bdq), Bdq


# --------------------------------------------------------------------------- contact

def floor_contact(q, ctx: StepContext, need_hess=True) -> Terms | None:
    """Penalty below the floor at every vertex below it (the reference's law: each as stiff as
    the mass it carries, k = m FLOOR_OMEGA2; its friction is `friction`). The vertices are found
    at q itself (`LatentScene.floor_vertices`), so the energy is that of all vertices: a fixed set
    of samples pressed a round body unevenly (a jelly ball at rest slid 10 cm in 3 s), and a set
    fixed at the step's start let a hard push drive the rest through the floor."""
    s = ctx.scene
    if ctx.node_heights is None:
        return None
    vertices = s.floor_vertices(q, ctx.q_n, ctx.node_heights)
    if vertices is None:
        return None
    pen = torch.clamp(vertices.heights(q) - s.floor, max=0.0)
    k = vertices.mass * s.floor_k
    H = None
    if need_hess:
        touching = torch.nonzero(pen < 0).flatten()
        rows = vertices.height_rows(touching)
        H = rows.T @ (k[touching, None] * rows)
    return Terms(0.5 * torch.dot(k * pen, pen), vertices.pull_back_heights(k * pen), H)


def collider_contact(q, ctx: StepContext, need_hess=True) -> Terms | None:
    """Penalty and friction against `setup.colliders` at the contact samples: `latent_world_forces.collider_contact`."""
    if not ctx.scene.latent_colliders:
        return None
    return Terms(*latent_world_forces.collider_contact(q, ctx, need_hess))


def friction(q, ctx: StepContext, need_hess=True) -> Terms | None:
    """Coulomb friction at the floor's and colliders' contacts (`engine.core.friction`): the
    smoothed dissipation potential mu lambda f0(|u|) of each contact's tangential slide u over the step."""
    c = ctx.slip
    if c is None:
        return None
    slide = torch.einsum("aid,d->ai", c.V, q - ctx.q_n) - c.surface_slide
    n = c.normal
    u = slide - torch.sum(slide * n, dim=1, keepdim=True) * n
    y = torch.sqrt(torch.sum(u * u, dim=1) + 1e-300)
    f0, f1_over_y, _ = smoothed_slide(y, FRICTION_SLIP_SPEED * ctx.h / ctx.scene.scale)
    g = torch.einsum("a,ai,aid->d", c.weight * f1_over_y, u, c.V)
    H = None
    if need_hess:       # the majorizer mu lambda f1/|u| (I - n n^T): docs/DESIGN_NOTES.md §5
        VT = c.V - n[:, :, None] * torch.einsum("ai,aid->ad", n, c.V)[:, None, :]       # (I - n n^T) V
        H = torch.einsum("a,aid,aie->de", c.weight * f1_over_y, VT, VT)
    return Terms(torch.sum(c.weight * f0), g, H)


@dataclass
class SlipContacts:
    """Friction contacts of one step in latent form: the points' basis [A,3,d], with the
    `engine.core.friction.FrictionContacts` found at q_n (normal, mu lambda, the surface's own
    slide over the step)."""
    V: torch.Tensor
    normal: torch.Tensor
    weight: torch.Tensor
    surface_slide: torch.Tensor


def slip_contacts(scene: LatentScene, frame: int, q_n, contact_prev, node_heights, h) -> SlipContacts | None:
    """The floor's contacts (its vertices below it at q_n) and the colliders' (contact samples in
    their shells at `frame`), each with its normal force at q_n: friction is lagged, as in the
    reference."""
    found = []          # (the basis of the contacts at these indices, the contacts)
    if node_heights is not None and scene.setup.floor_friction > 0.0:
        vertices = scene.floor_vertices(q_n, q_n, node_heights)
        if vertices is not None:
            found.append((vertices.basis, floor_contacts(scene.floor, scene.setup.floor_friction,
                                                         vertices.positions(q_n).detach().cpu().numpy(),
                                                         (vertices.mass * scene.floor_k).cpu().numpy())))
    colliders = [c for c in scene.latent_colliders if c.friction > 0.0]
    if colliders:
        stiffness = np.full(len(contact_prev), scene.contact_mass * scene.collider_k)
        dt = scene.setup.dt
        found.append((lambda index: scene.contact_V[index],
                      collider_contacts(colliders, contact_prev.detach().cpu().numpy(), stiffness,
                                        float(frame), lambda c: h * c.velocity(frame, dt))))
    found = [(basis(torch.as_tensor(f.index, device=q_n.device)), f) for basis, f in found
             if f is not None and len(f.index)]
    if not found:
        return None
    joined = lambda arrays: torch.as_tensor(np.concatenate(arrays), dtype=q_n.dtype, device=q_n.device)
    return SlipContacts(torch.cat([V for V, _ in found]), joined([f.normal for _, f in found]),
                        joined([f.weight for _, f in found]), joined([f.surface_slide for _, f in found]))


def slip_at(ctx: StepContext, q) -> SlipContacts | None:
    """The friction contacts of the trial state q (a lagged update, `integrators.minimize_with_friction`)."""
    s = ctx.scene
    if not (s.has_floor or s.latent_colliders):
        return None
    q = q.detach()
    heights = s.node_heights(q) if s.has_floor else None
    return slip_contacts(s, ctx.frame, q, s.contact_rest + torch.einsum("kid,d->ki", s.contact_V, q), heights, ctx.h)


# --------------------------------------------------------------------------- forces

def external_work(q, ctx: StepContext, need_hess=True) -> Terms:
    return Terms(-torch.dot(ctx.force, q), -ctx.force, torch.zeros(len(q), len(q), dtype=q.dtype, device=q.device))


def pins(q, ctx: StepContext, need_hess=True) -> Terms:
    P = ctx.scene.P
    return Terms(0.5 * q @ P @ q - torch.dot(ctx.pin_b, q), P @ q - ctx.pin_b, P)


# --------------------------------------------------------------------------- damping

def damping(q, ctx: StepContext, need_hess=True) -> Terms:
    """The dense part of the damping (all of it in a small subspace; `elastic_term` adds the rest)."""
    dq = q - ctx.q_n
    D = ctx.damping.dense / ctx.h
    return Terms(0.5 * dq @ D @ dq, D @ dq, D)


@dataclass
class Damping:
    """A step's Rayleigh damping matrix as D = dense + sum_k G_k^T b_k G_k. In a small subspace
    it is all `dense` (K projected as a whole). In a larger one K is projected sample by sample,
    and those samples' matrices `blocks` [K,m,m] are kept apart: D is applied to a vector
    sample by sample, and its Hessian is assembled together with the elastic term's, so a
    Newton matrix costs one assembly, not two (a 10k-vertex cloth sheet: see the README's
    speed section)."""
    dense: torch.Tensor
    blocks: torch.Tensor | None = None


REDUCED_PROJECTION_DIMS = 192   # up to this many coordinates K is projected as a whole


def damping_per_sample(scene: LatentScene) -> bool:
    """Is the damping's K kept as per-sample blocks (`Damping.blocks`) rather than one reduced matrix?"""
    return scene.dims > REDUCED_PROJECTION_DIMS


def rayleigh(scene: LatentScene, q, fast=False, hessian=None) -> Damping:
    """Rayleigh damping D = alpha I + beta K(q) (the mass matrix is I in this basis), with K made
    positive semi-definite (`stiffness_psd`; past REDUCED_PROJECTION_DIMS per sample, kept as
    `Damping.blocks`). `fast`: K assembled in float32; `hessian`: the exact elastic Hessian at q
    if the caller has it."""
    mat = scene.setup.material
    beta, alpha = scene.damping_scales()
    D = mat.air_damping * alpha * torch.eye(scene.dims, dtype=DTYPE, device=q.device)
    if mat.damping <= 0:
        return Damping(D)
    b = mat.damping * beta
    if damping_per_sample(scene):
        blocks, bending = scene.sample_hessians(q)
        return Damping(D if bending is None else D + b * bending, b * blocks)
    return Damping(D + b * stiffness_psd(scene, q, fast, hessian))


def stiffness_psd(scene: LatentScene, q, fast=False, hessian=None) -> torch.Tensor:
    """The elastic Hessian at q with its negative eigenvalues set to zero, done on the reduced
    matrix itself (one eigendecomposition): exact where K is positive semi-definite already, and
    in a small subspace 2-3x cheaper than projecting every sample's 9x9 Hessian (which also
    stiffens the modes the samples' negative curvatures cancel in the sum). Larger subspaces
    project each sample's Hessian instead (`LatentScene.sample_hessians`, in `rayleigh`).
    `hessian`: the exact elastic Hessian at q if the caller has it."""
    K = scene.elastic(q, True, False, fast)[2] if hessian is None else hessian
    K = 0.5 * (K + K.T)
    if int(torch.linalg.cholesky_ex(K)[1]) == 0:
        return K
    if fast and not K.requires_grad:   # float32 like the matrix itself (an eighth faster at 96 coordinates)
        vals, vecs = torch.linalg.eigh(K.to(torch.float32))
        return ((vecs * vals.clamp(min=0.0)) @ vecs.T).to(K.dtype)
    vals, vecs = torch.linalg.eigh(K.detach())
    return with_gradient_of(K, (vecs * vals.clamp(min=0.0)) @ vecs.T)


# --------------------------------------------------------------------------- the terms, in the order the step sums them

QUADRATIC_TERMS = (inertia, external_work, pins, damping)
NONLINEAR_TERMS = (elastic_term, floor_contact, collider_contact, friction)
TERMS = QUADRATIC_TERMS + NONLINEAR_TERMS
