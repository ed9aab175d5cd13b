"""One latent step, from the state (q_n, q'_n) to the next state; this module reads top to bottom.

`step` picks the integrator, which sets the step's length and Newton's guess. `StepContext.build`
gathers what the step needs at its start: the forces over the step, the pins' targets at its end,
the Rayleigh damping, the contacts and their friction. `minimize` then runs Newton's method with
a backtracking line search on the step's incremental potential (`total`)

    E(q) = inertia + elastic + contact (floor, colliders, friction) + forces (external work, pins) + damping

whose terms are the functions of `terms.py`, one each.

- backward Euler (default): stable at 1/24 s frames with stiff materials, dissipates a little;
- implicit midpoint: backward Euler over half the step to the midpoint, then extrapolated; it
  conserves energy far better (bouncy materials) at the same cost;
- the theta method between them (`theta_step`), which the run time uses for solids at twice the
  reference's step with the theta that damps as the reference does (`matched_theta`).

`differentiable_step` is what training back-propagates through: the step is solved without a
graph, then one Newton step from the solution is taken with the Hessian held fixed, so gradients
reach the learned energy by the implicit-function theorem at the cost of one linear solve.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch

from ..core.friction import changed
from . import latent_world_forces
from .latent_scene import LatentScene
from .terms import (NONLINEAR_TERMS, QUADRATIC_TERMS, Damping, SlipContacts, Terms, damping_per_sample, elastic_energy,
                    elastic_term, rayleigh, sample_damping, slip_at, slip_contacts)

INTEGRATORS = ("backward_euler", "implicit_midpoint")
NEWTON_ITERATIONS = 20
# training steps start from encoded true states, which a folded sheet's locked subspace can only
# show stretched: such steps took 20-50 iterations, and the 20 dropped most cloth rollouts
TRAINING_NEWTON_ITERATIONS = 60
MIDPOINT_TOLERANCE = 1e-8
FRICTION_UPDATES = 2      # re-solves of a step with friction's normal forces at its solution (`minimize_with_friction`)
TOLERANCE = 1e-5          # stop when a Newton step moves the body less than this (RMS, in bounding-box diagonals)


# --------------------------------------------------------------------------- the step

def step(scene, frame, q_n, qd_n, h, integrator="backward_euler", fast=False, iterations=NEWTON_ITERATIONS, theta=None):
    """One step -> (q, q', converged). `fast`: Newton's matrix and the damping's stiffness
    assembled in float32 (the run time's choice; the solution is the same to the tolerance,
    since it is set by the float64 gradient). `integrator` "theta" takes `theta` (`theta_step`)."""
    if integrator == "theta":
        return theta_step(scene, frame, q_n, qd_n, h, theta, fast, iterations)
    if integrator == "implicit_midpoint":
        # solved tighter: its energy conservation is only as good as the solve (1e-5: 2.2 % drift
        # over 500 steps, 1e-8: 1.3 %, measured on a spinning jelly box)
        ctx = StepContext.build(scene, frame, q_n, qd_n, 0.5 * h, fast)
        q_mid, ok, _ = minimize_with_friction(ctx, q_n + 0.5 * h * qd_n, iterations, tolerance=MIDPOINT_TOLERANCE)
        return 2.0 * q_mid - q_n, 4.0 * (q_mid - q_n) / h - qd_n, ok
    ctx = StepContext.build(scene, frame, q_n, qd_n, h, fast)
    q, ok, _ = minimize_with_friction(ctx, q_n + h * qd_n, iterations)
    return q, (q - q_n) / h, ok


def matched_theta(h: float, reference_step: float) -> float:
    """The theta at which a step of h damps every slow mode as backward Euler at
    `reference_step` does: a mode of frequency w loses (2 theta - 1) w h / 2 of its amplitude per
    radian, so (2 theta - 1) h = reference_step (3/4 at twice the reference's step; backward
    Euler, 1, at or below it)."""
    return min(1.0, 0.5 * (1.0 + reference_step / h))


def theta_step(scene, frame, q_n, qd_n, h, theta, fast=False, iterations=NEWTON_ITERATIONS):
    """One-leg theta method: backward Euler over theta h (a minimisation: it never leaves the
    valid states), then extrapolated to h; theta 1 is backward Euler, 1/2 implicit midpoint.
    An extrapolation that would invert a sample is shortened until it does not.
    The Rayleigh damping's K is taken at the midpoint of the step's chord q_n -> q_n+1 predicted
    from q'_n, not at q_n: its null space (the motions that strain nothing) then holds a turning
    body's chord to third order in the angle turned, where K at q_n charges it to second order.
    A rubber cube spinning at 6 rad/s keeps 0.67x the reference's kinetic energy after 12 frames
    with K there, 0.12x with K at q_n (backward Euler at 1/48 s: 0.49x; tests/test_model.py)."""
    middle = q_n + 0.5 * h * qd_n
    if not scene.admissible(middle):
        middle = None
    ctx = StepContext.build(scene, frame, q_n, qd_n, theta * h, fast, damping_at=middle)
    q_t, ok, _ = minimize_with_friction(ctx, q_n + theta * h * qd_n, iterations)
    qd_t = (q_t - q_n) / (theta * h)
    for halvings in range(4):
        reach = 1.0 + (1.0 / theta - 1.0) / 2 ** halvings
        if scene.admissible(q_n + reach * (q_t - q_n)):
            break
    else:
        reach = 1.0
    return q_n + reach * (q_t - q_n), qd_n + reach * (qd_t - qd_n), ok


def differentiable_step(scene, frame, q_n, qd_n, h):
    """Backward-Euler step whose result carries gradients to the learned energy and to (q_n, q'_n)."""
    with torch.no_grad():
        ctx0 = StepContext.build(scene, frame, q_n.detach(), qd_n.detach(), h)
        q_star, ok, solved = minimize_with_friction(ctx0, q_n.detach() + h * qd_n.detach(),
                                                    iterations=TRAINING_NEWTON_ITERATIONS)
        H = total(q_star, solved).hess
    ctx = replace(StepContext.build(scene, frame, q_n, qd_n, h), slip=solved.slip)
    t = total(q_star, ctx, need_hess=False)
    q = q_star - solve(H, t.grad)
    return q, (q - q_n) / h, ok


# --------------------------------------------------------------------------- what a step needs at its start

@dataclass
class StepContext:
    """The inputs of one step, built in one place (`StepContext.build`). Nothing changes one once
    built but the memo of its quadratic terms (`quadratic_part`): where Newton goes on with other
    inputs (projected samples, `factorize`; friction taken again, `minimize_with_friction`), it
    goes on in a copy."""
    scene: LatentScene
    h: float
    q_n: torch.Tensor
    qd_n: torch.Tensor
    force: torch.Tensor          # generalised gravity + painted forces over the step
    pin_b: torch.Tensor          # pin targets at the end of the step, reduced
    damping: Damping             # Rayleigh D = alpha I + beta K(q_n)
    contact_prev: torch.Tensor   # contact sample positions at q_n
    node_heights: torch.Tensor | None = None   # the nodes' heights at q_n (floor contact: `LatentScene.floor_vertices`)
    exact_hessian: bool = True   # the exact elastic Hessian (Newton goes on in a copy with it off where
                                 # that leaves its matrix indefinite: `factorize`)
    frame: int = 0               # the step runs from `frame` to `frame + 1` (colliders: latent_world_forces.py)
    fast_hessian: bool = False   # assemble the elastic Hessian in float32 (Newton's matrix only; energy and gradient stay float64)
    quadratic: tuple | None = None   # (energy, gradient, Hessian) of the quadratic terms at q = 0 (`quadratic_part`)
    start_hessian: torch.Tensor | None = None   # the exact elastic Hessian at q_n, Newton's first matrix (small subspaces
                                                # only, where the damping is one dense matrix: `build`)
    slip: SlipContacts | None = None     # the floor's and colliders' friction contacts at q_n (`slip_contacts`)

    @classmethod
    def build(cls, scene: LatentScene, frame: int, q_n, qd_n, h: float, fast=False, damping_at=None):
        """The step's inputs. The Rayleigh damping is evaluated at this step's own start q_n, as
        the reference does: a K from half a frame before has its null space turned away from the
        body's present pose and damps turning and folding (a flag in wind: rel_l2 0.219 with K
        once per 24 fps frame, 0.142 per step). In a small subspace that elastic Hessian at q_n
        (exact) also serves as Newton's first matrix, so a step assembles one Hessian before
        iterating. A larger one keeps K's projected samples apart (`Damping`), assembled with
        each Newton matrix instead of on their own; Newton's first matrix is the exact one at its
        guess (starting from the projected K at q_n missed the tolerance on undamped cloth:
        implicit midpoint, a flag, 9 of 20 steps).
        `fast`: Hessians assembled in float32 (they only steer Newton and set the damping).
        `damping_at`: where K is taken instead of q_n (a longer step's midpoint, `theta_step`)."""
        at = q_n if damping_at is None else damping_at
        K_n = None if damping_per_sample(scene) else scene.elastic(at, True, False, fast)[2]
        damping = rayleigh(scene, at, fast, hessian=K_n)
        prev = scene.contact_rest + torch.einsum("kid,d->ki", scene.contact_V, q_n)
        force = scene.forcing(frame) + latent_world_forces.field_force(scene, frame, q_n, qd_n)  # fields on the deformed surface
        heights = scene.node_heights(q_n.detach()) if scene.has_floor else None
        return cls(scene, h, q_n, qd_n, force, scene.pin_b(frame + 1), damping, prev, frame=frame,
                   node_heights=heights, fast_hessian=fast, start_hessian=None if K_n is None else K_n.detach(),
                   slip=slip_contacts(scene, frame, q_n, prev, heights, h))


# --------------------------------------------------------------------------- Newton on the incremental potential

class Solved(NamedTuple):
    """Newton's answer: the solution, whether it converged, and the context it was found in (the
    step's, with `exact_hessian` off if Newton fell back to projected samples, `factorize`, and
    `slip` the friction contacts it last took, `minimize_with_friction`)."""
    q: torch.Tensor
    converged: bool
    ctx: StepContext


def minimize_with_friction(ctx: StepContext, q, iterations=NEWTON_ITERATIONS, tolerance=TOLERANCE) -> Solved:
    """`minimize`, then again from its solution with friction's normal forces taken there while
    they change (a contact that starts or ends in the step; IPC's lagged updates): a body set on
    the floor or a ramp feels its friction from the first step."""
    q, ok, ctx = minimize(ctx, q, iterations, tolerance)
    for _ in range(FRICTION_UPDATES):
        fresh = slip_at(ctx, q)
        if not changed(ctx.slip, fresh):
            break
        q, ok, ctx = minimize(replace(ctx, slip=fresh), q, iterations, tolerance)
    return Solved(q, ok, ctx)


def minimize(ctx: StepContext, q, iterations=NEWTON_ITERATIONS, tolerance=TOLERANCE) -> Solved:
    """Newton with backtracking on the incremental potential, from the guess q (or from q_n when
    the guess would invert a sample: the line search then never leaves the valid states).

    Chord iterations: the Cholesky factor of one iteration's matrix serves the next ones
    (gradients are cheap, Hessians are not); it is refreshed after a shortened step, when the
    steps stop shrinking fast (the full step's evaluation then brings its Hessian along), and
    before giving up. Converged is False when the step is not
    finite, stalls, or the iteration cap is reached. Where the exact elastic Hessian leaves
    Newton's matrix indefinite, `factorize` hands back the context with it off, and the
    iterations go on in that one."""
    q, t = _start(ctx, q)
    energy = _finite(t.energy)
    if not math.isfinite(energy):
        return Solved(q, False, ctx)
    L, ctx = factorize(ctx, q, t.hess)
    fresh = ctx.start_hessian is None or q is ctx.q_n
    previous = math.inf
    for _ in range(iterations):
        step = -torch.cholesky_solve(t.grad[:, None], L)[:, 0]
        decrement = float(-torch.dot(t.grad, step))
        size = float(torch.linalg.norm(step))
        if not (math.isfinite(decrement) and math.isfinite(size)):
            return Solved(q, False, ctx)
        if size < tolerance:
            return Solved(q, True, ctx)
        trial, alpha = q + step, 1.0
        slowing = size > 0.5 * previous                       # the chord steps stopped converging fast:
        t_trial = total(trial, ctx, need_hess=slowing)        # the full step (usually taken) refreshes the factor
        e_trial = _finite(t_trial.energy)
        while e_trial > energy - 1e-4 * alpha * decrement and alpha > 1e-6:
            alpha *= 0.5
            trial, t_trial = q + alpha * step, None
            e_trial = _finite(total_energy(trial, ctx))
        if e_trial > energy - 1e-4 * alpha * decrement:       # no decrease along this step
            if not fresh:                                     # a stale factor: refresh it before giving up
                t = total(q, ctx)
                (L, ctx), fresh = factorize(ctx, q, t.hess), True
                continue
            return Solved(q, size < 1e3 * tolerance, ctx)
        q, energy = trial, e_trial
        if alpha * size < tolerance:
            return Solved(q, True, ctx)
        refresh = alpha < 1.0 or slowing
        previous = alpha * size
        t = t_trial if t_trial is not None else total(q, ctx, need_hess=refresh)
        if refresh:
            (L, ctx), fresh = factorize(ctx, q, t.hess), True
        else:
            fresh = False
    return Solved(q, False, ctx)


def _start(ctx: StepContext, q):
    """(q, terms with the Hessian) at the guess, or at q_n when the guess would invert a sample.
    The elastic part of the first matrix is the one at q_n (`StepContext.start_hessian`, made
    for the damping): a chord step, refreshed if it stops converging fast."""
    t = total(q, ctx, elastic_hessian=ctx.start_hessian)
    if math.isfinite(float(t.energy)):
        return q, t
    return ctx.q_n, total(ctx.q_n, ctx, elastic_hessian=ctx.start_hessian)


def _finite(x) -> float:
    x = float(x)
    return x if math.isfinite(x) else math.inf


def total(q, ctx: StepContext, need_hess=True, elastic_hessian=None) -> Terms:
    """The incremental potential at q; `elastic_hessian`: this matrix stands for the elastic
    term's Hessian (Newton's first matrix: the one at q_n, `StepContext.start_hessian`)."""
    e0, g0, A = quadratic_part(ctx)
    Aq = A @ q
    out = Terms(e0 + torch.dot(q, g0 + 0.5 * Aq), g0 + Aq, A if need_hess else None)
    for term in NONLINEAR_TERMS:
        if term is elastic_term and elastic_hessian is not None and need_hess:
            t = term(q, ctx, need_hess=False)
            t = Terms(t.energy, t.grad, elastic_hessian)
        else:
            t = term(q, ctx, need_hess)
        if t is not None:
            out = out + t
    return out


def total_energy(q, ctx: StepContext):
    """The incremental potential alone (line search), +inf where a sample would invert."""
    e0, g0, A = quadratic_part(ctx)
    e = e0 + torch.dot(q, g0 + 0.5 * (A @ q)) + elastic_energy(q, ctx.scene)
    sample = sample_damping(q, ctx)
    if sample is not None:
        e = e + sample[0]
    for term in NONLINEAR_TERMS:
        if term is elastic_term:      # its energy has a cheaper path of its own (above)
            continue
        t = term(q, ctx, need_hess=False)
        if t is not None:
            e = e + t.energy
    return e


def quadratic_part(ctx: StepContext):
    """(e0, g0, A) with sum of the quadratic terms = e0 + g0.q + 1/2 q^T A q, built once per step."""
    if ctx.quadratic is None:
        zero = torch.zeros_like(ctx.q_n)
        out = QUADRATIC_TERMS[0](zero, ctx)
        for term in QUADRATIC_TERMS[1:]:
            out = out + term(zero, ctx)
        ctx.quadratic = (out.energy, out.grad, out.hess)
    return ctx.quadratic


def factorize(ctx: StepContext, q, H):
    """(Cholesky factor of Newton's matrix H at q, the context Newton goes on with). Where the
    exact elastic Hessian makes H indefinite, each sample's Hessian is projected instead: the
    context handed back has `exact_hessian` off, and Newton keeps it for the rest of the step.
    A matrix that is still singular gets a small ridge."""
    L, info = torch.linalg.cholesky_ex(H)
    if int(info) != 0 and ctx.exact_hessian:
        ctx = replace(ctx, exact_hessian=False)
        H = total(q, ctx).hess
        L, info = torch.linalg.cholesky_ex(H)
    if int(info) != 0:
        eye = torch.eye(len(q), dtype=H.dtype, device=H.device)
        L, _ = torch.linalg.cholesky_ex(H + 1e-8 * torch.diagonal(H).abs().mean() * eye)
    return L, ctx


def solve(H, g):
    """H^-1 g for a symmetric positive (semi-)definite H, with a small ridge if it is singular."""
    try:
        return torch.linalg.solve(H, g)
    except RuntimeError:
        eye = torch.eye(len(g), dtype=g.dtype, device=g.device)
        return torch.linalg.solve(H + 1e-8 * torch.diagonal(H).abs().mean() * eye, g)
