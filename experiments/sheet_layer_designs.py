"""Sheet dynamics side by side: the latent step alone, the full-space layer (L-BFGS) from the
latent step's prediction as runs take it, the same with fewer iterations, one substep, to
convergence, from inertia, with the coarse latent level taking turns or in the first inverse
Hessian (`coarse_preconditioned`), with the latent state running its own course ("one-way") or
following the layer's positions too, and with two other fine preconditioners (the rest system
turned with each vertex's frame; split along and across the sheet), on the flag in wind, the pinned grid and the cloth dropped on a table, against the
reference simulator (which it runs first: about 2.5 minutes on one core).

    OMP_NUM_THREADS=1 python experiments/sheet_layer_designs.py [--scenes flag_wind grid drape] [--frames 36]
        [--designs "layer (2 x 20)" ...]

Prints per scene and design: distance to the reference over the rollout (and over holding still),
mean edge strain, flipped triangles, the far edge's fall at frame 4 (pinned scenes) and the
overhang's tilt from vertical at the last frame (drape), and ms per frame (the bake alone).
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

DESIGNS = ("latent alone", "layer (2 x 20)", "layer (2 x 12)", "layer (1 x 30)", "layer converged (2 x 200)",
           "layer from inertia (2 x 20)", "layer + coarse latent level (2 x 20)",
           "split preconditioner from inertia (2 x 20)", "projective dynamics (2 x 30)",
           "theta method, 3/4 (1 x 20)", "theta method, 3/4 (1 x 30)", "layer (2 x 15)",
           "layer, one-way (2 x 20)", "layer, one-way (2 x 15)", "layer, position follows too (2 x 20)",
           "coarse preconditioner (2 x 20)", "deflated coarse preconditioner (2 x 20)",
           "latent once a frame (2 x 20)")


def theta_layer(layer, theta):
    """The layer's step as the one-leg theta method (as a solid's latent step takes it,
    `integrators.theta_step`): backward Euler over theta h, then extrapolated to h."""
    backward_euler = layer.step

    def step(frame, end, x_n, v_n, h, guess=None, history=()):
        guess = None if guess is None else x_n + theta * (np.asarray(guess, np.float64) - x_n)
        x_t, v_t, history = backward_euler(frame, end, x_n, v_n, theta * h, guess=guess, history=history)
        return x_n + (x_t - x_n) / theta, v_n + (v_t - v_n) / theta, history
    return step


def projective_dynamics(layer, iterations):
    """Local-global iterations of the layer's membrane, bending and pins (no contact, no damping
    beyond air): each edge projected onto its rest length, then one prefactored solve."""
    springs = layer.springs

    def step(frame, end, x_n, v_n, h, guess=None, history=()):
        factor = layer._factor(h)
        target = np.asarray(layer.setup.pin_target(frame + 1), dtype=np.float64)
        m = layer.mass[:, None]
        constant = (m / h ** 2 * (x_n + h * v_n) + layer.air * m / h * x_n + layer.forces(frame, x_n, v_n)
                    + layer.pin_k[:, None] * target)
        x = np.array(guess, dtype=np.float64)
        for _ in range(iterations):
            d, length = springs.vectors(x)
            x = factor.solve(constant + springs.DT @ ((springs.k * springs.rest_length / length)[:, None] * d))
        return x, (x - x_n) / h, history
    return step


def split_preconditioner(layer, h):
    """Along the sheet the membrane's isotropic rest system; across it (each vertex's current
    normal) inertia and bending alone, prefactored: the membrane resists no motion across a sheet."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla
    from engine.core.fields import vertex_normals
    along = layer._factor(h)
    across = spla.splu((sp.diags(layer._diagonal(h)) + layer.Q * (1 + layer.beta / h)).tocsc())

    def solve_at(x):
        n = vertex_normals(x, layer.setup.faces)
        n = n / np.maximum(np.linalg.norm(n, axis=1), 1e-300)[:, None]

        def solve(g):
            a = np.einsum("ni,ni->n", g, n)
            p = along.solve(g - a[:, None] * n)
            p -= np.einsum("ni,ni->n", p, n)[:, None] * n
            return p + across.solve(a)[:, None] * n
        return solve
    return solve_at


class CoarseLevel:
    """The latent space as a coarse level: U z = Phi z for z [4H,3], Phi [N,4H] the handles'
    weights times (Xc, 1) (the span of the latent decoder), its Hessian U^T H U at the substep's
    start: the springs' part by a sample of edges, the inertia, air, pins and bending once."""

    def __init__(self, layer, sub, h, samples=1500, seed=0):
        import scipy.sparse as sp
        y = np.concatenate([sub.nodes - sub.centre, np.ones((len(sub.nodes), 1))], axis=1)
        self.phi = (sub.weights[:, :, None] * y[:, None, :]).reshape(len(y), -1)
        S = sp.diags(layer._diagonal(h)) + layer.Q * (1.0 + layer.beta / h)
        self.constant = self.phi.T @ (S @ self.phi)
        springs = layer.springs
        edges = len(springs.edges)
        pick = (np.arange(edges) if edges <= samples
                else np.sort(np.random.default_rng(seed).choice(edges, samples, replace=False)))
        self.pick, self.scale = pick, edges / len(pick)
        self.delta = self.phi[springs.edges[pick, 1]] - self.phi[springs.edges[pick, 0]]     # [S,4H]
        self.springs = springs

    def factor(self, x):
        """Lower Cholesky factor of U^T H U at x."""
        r = self.phi.shape[1]
        blocks = self.springs.hessian_blocks(x)[self.pick] * self.scale                  # [S,3,3]
        spring = (self.delta.T @ (self.delta[:, :, None] * blocks.reshape(-1, 1, 9)).reshape(len(self.pick), -1))
        spring = spring.reshape(r, r, 3, 3).transpose(0, 2, 1, 3).reshape(3 * r, 3 * r)
        C = spring + np.kron(self.constant, np.eye(3))
        C += 1e-10 * np.trace(C) / len(C) * np.eye(len(C))
        return np.linalg.cholesky(C)

    def step(self, factor, grad):
        """-U C^-1 U^T grad, [N,3]."""
        from scipy.linalg import cho_solve
        z = cho_solve((factor, True), (self.phi.T @ grad).ravel(), check_finite=False)
        return -(self.phi @ z.reshape(-1, 3))


def two_level(coarse, factor):
    """`sheet_layer.quasi_newton` with one coarse Newton step (`CoarseLevel`) before each L-BFGS
    step; every accepted step's curvature pair joins the history."""
    from engine.learned.quasi_newton import flat, line_search as _line_search, two_loop as _two_loop

    def solve(potential, x, precondition, iterations, memory, history):
        energy, grad = potential(x)

        def take(step, fallback=False):
            nonlocal x, energy, grad
            if fallback and float(np.vdot(grad, step)) >= 0:
                step = -precondition(grad)
            x1, e1, g1, moved = _line_search(potential, x, energy, grad, step)
            if moved:
                s, y = flat(x1 - x), flat(g1 - grad)
                sy = float(np.vdot(s, y))
                if sy > 1e-300:
                    history.append((s, y, 1.0 / sy))
                    del history[:-memory]
                x, energy, grad = x1, e1, g1

        for _ in range(iterations):
            take(coarse.step(factor, grad))
            take(-_two_loop(grad, history, precondition), fallback=True)
        return x
    return solve


def latent_basis(run) -> np.ndarray:
    """U [3N, d] (metres per latent unit, the layer's column-major order): the layer's move of each
    latent coordinate (the decode is affine)."""
    import torch
    eye = torch.eye(len(run.scene.q0), dtype=run.scene.q0.dtype)
    return np.stack([np.asarray(run._layer_move(e), np.float64).ravel(order="F") for e in eye], axis=1)


def coarse_preconditioned(run, layer, deflated=False):
    """The latent space as the coarse level of the layer's first inverse Hessian: the rest system's
    solve plus U C^-1 U^T, C the latent step's Hessian at its solution (projected, scaled from the
    latent step's units by U^T M U, which is a multiple of the identity). `deflated`: the rest
    system's own coarse part taken out, A^-1 - U (U^T A U)^-1 U^T + U C^-1 U^T, so that on the
    coarse space the latent Hessian stands alone (both are positive definite)."""
    import scipy.sparse as sp
    from scipy.linalg import cho_factor, cho_solve
    from engine.learned.integrators import StepContext, total
    from engine.learned.quasi_newton import as_columns
    from engine.learned.runtime import RunState
    U = latent_basis(run)
    scale = float(np.mean(np.diag(U.T @ (np.tile(layer.mass, 3)[:, None] * U))))
    rest_precondition, coarse, rest_coarse = layer._precondition, {}, {}

    def precondition(h, friction, x_n, start):
        base = rest_precondition(h, friction, x_n, start)
        if deflated and h not in rest_coarse:
            A = layer._factor_matrix(h)
            rest_coarse[h] = cho_factor(U.T @ (sp.block_diag([A, A, A]).tocsr() @ U))

        def solve(g):
            Ug = U.T @ g.ravel(order="F")
            c = cho_solve(coarse["factor"], Ug) - (cho_solve(rest_coarse[h], Ug) if deflated else 0.0)
            return base(g) + as_columns((U @ c).reshape(g.shape, order="F"))
        return solve

    def substep(frame, end, state, h):
        q, qd, x, v = state.q, state.qd, state.x, state.v
        q1, _ = run._advance(frame, q, qd, h)
        ctx = replace(StepContext.build(run.scene, frame, q, qd, h), exact_hessian=False)
        coarse["factor"] = cho_factor(scale * total(q1, ctx).hess.double().numpy())
        guess = x + h * v + run._layer_move(q1 - q - h * qd)
        x1, v1, history = layer.step(frame, end, x, v, h, guess=guess, history=state.history)
        return RunState(q1, run._held_velocity(v1), x1, v1, history)
    layer._precondition, run._layer_substep = precondition, substep


def position_follows(run):
    """After each substep the latent position follows the layer's too (its positions projected on
    the subspace), not only its velocity."""
    from engine.learned.runtime import RunState
    scene, ship = run.scene, run._layer_substep

    def substep(frame, end, state, h):
        s = ship(frame, end, state, h)
        return RunState(scene.encode(scene.sub.norm.forward(s.x)), s.qd, s.x, s.v, s.history)
    run._layer_substep = substep


def latent_once_a_frame(run):
    """One latent step a frame (over the whole frame, not each substep): each of the layer's n
    substeps starts from inertia plus 1/n^2 of the frame step's move beyond inertia (backward
    Euler's h^2 a); the latent position takes the frame step's at the frame's end, its velocity
    follows the layer's after every substep in the air, as shipped."""
    from engine.learned.runtime import RunState
    layer, dt, taken = run.layer, run.setup.dt, {}

    def substep(frame, end, state, h):
        q, qd, x, v = state.q, state.qd, state.x, state.v
        n = max(1, round(dt / h))
        k = max(1, round((end - frame) * n))
        if k == 1:
            q1, qd1 = run._advance(frame, q, qd, dt)
            taken.update(q=q1, qd=qd1, beyond=(q1 - q - dt * qd) / n ** 2)
        guess = x + h * v + run._layer_move(taken["beyond"])
        x1, v1, history = layer.step(frame, end, x, v, h, guess=guess, history=state.history)
        last = k == n
        qd_next = run._held_velocity(v1) if not layer.touching else (taken["qd"] if last else qd)
        return RunState(taken["q"] if last else q, qd_next, x1, v1, history)
    run._layer_substep = substep


def with_solver(layer, make_solver, guess_too=True):
    """The layer's step with `sheet_layer.quasi_newton` replaced by make_solver(x_n, h)'s."""
    from engine.learned import sheet_layer
    original, layer_step = sheet_layer.quasi_newton, layer.step

    def step(frame, end, x_n, v_n, h, guess=None, history=()):
        sheet_layer.quasi_newton = make_solver(np.asarray(x_n, np.float64), h, original)
        try:
            return layer_step(frame, end, x_n, v_n, h, guess if guess_too else None, history)
        finally:
            sheet_layer.quasi_newton = original
    return step


def prepared(model, setup, design):
    """The run of one design, prepared (its mesh encoded)."""
    from engine.learned.runtime import NeurokRun, RunState
    if design == "latent alone":
        return NeurokRun(model.model, setup, "cpu", "matched", model.meta, sheet_layer="off")
    run = NeurokRun(model.model, setup, "cpu", "matched", model.meta, sheet_layer="on")
    layer = run.layer
    substeps, iterations = (int(n) for n in design.rsplit("(", 1)[1].rstrip(")").split(" x "))
    run.config, layer.iterations = replace(run.config, substeps=substeps), iterations
    if design.startswith("projective"):
        layer.step = projective_dynamics(layer, iterations)
    if design.startswith("theta"):
        from engine.learned.integrators import matched_theta
        from engine.learned.runtime import DATA_STEP
        run.config = replace(run.config, scheme="theta")   # the latent step too (`runtime.NeurokRun._advance`)
        layer.step = theta_layer(layer, matched_theta(setup.dt, DATA_STEP))
    if "coarse" in design:
        coarse = CoarseLevel(layer, run.scene.sub, setup.dt / substeps)
        layer.step = with_solver(layer, lambda x_n, h, _: two_level(coarse, coarse.factor(x_n)))
    if design.startswith("split"):
        solve_at = split_preconditioner(layer, setup.dt / substeps)
        layer.step = with_solver(layer, lambda x_n, h, original: (
            lambda potential, x, precondition, *rest: original(potential, x, solve_at(x), *rest)), guess_too=False)
    if "one-way" in design:         # the latent state runs its own course, velocity too (before)
        run.config = replace(run.config, latent_follows=False)
    if "position follows" in design:
        position_follows(run)
    if "coarse preconditioner" in design:
        coarse_preconditioned(run, layer, deflated=design.startswith("deflated"))
    if design.startswith("latent once"):
        latent_once_a_frame(run)
    if "from inertia" in design:
        run._layer_substep = lambda frame, end, state, h: RunState(state.q, state.qd, *layer.step(
            frame, end, state.x, state.v, h, None, state.history))
    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", nargs="*", default=["flag_wind", "grid", "drape"])
    p.add_argument("--frames", type=int, default=36, help="frames of the flag and grid (the drape: 48)")
    p.add_argument("--designs", nargs="*", default=list(DESIGNS), choices=DESIGNS)
    args = p.parse_args(argv)
    import torch
    from engine.api import open_engine
    from engine.core.errors import NeurokError
    from engine.evaluation.scene_eval import reference_rollout, sheet_setups, sheet_summary as measures
    torch.set_num_threads(1)
    model = open_engine("neurok", device="cpu")
    for name, setup in sheet_setups(args.scenes, args.frames):
        ref = reference_rollout(setup)
        for design in args.designs:
            run = prepared(model, setup, design)
            start = time.perf_counter()
            try:
                xs = np.asarray(run.bake())
            except NeurokError as stopped:            # the guard stopped it: say where
                print(f"{name} | {design}: stopped ({stopped})", flush=True)
                continue
            ms = 1000 * (time.perf_counter() - start) / (len(xs) - 1)
            print(f"{name} | {design}: {measures(xs, ref, setup, name)} | {ms:.0f} ms/frame", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
