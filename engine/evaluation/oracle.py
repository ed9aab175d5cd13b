"""The physics-exact reduced oracle (DESIGN.md section 5): the reference simulator's own energy,
stepped by backward-Euler Newton in a small linear subspace, with nothing learned.

Subspace: skinning eigenmodes. H handles, each a full affine map (12 generalized coordinates),
blended by weights w_h = the H lowest eigenvectors of the graph Laplacian of the reference's
degrees of freedom (lattice nodes for solids, mesh vertices for cloth; the graph is the sparsity
pattern of the elastic Hessian, so any discretisation works). The first eigenvector is constant,
so rigid and affine motion of the whole body are exact. Where pins hold the body and move
together (or not at all), the weights after the first are those of the body held there and
leave the pins alone, as the learned model's are (`learned.subspace.held_pins`). The displacement of DOF j is

    u_j(q) = sum_h w_h(X_j) (A_h X~_j + b_h),      X~ = (X - centre) / size,

linear in q (dimension 12 H), so mass, gravity, painted forces, pins and the floor reduce exactly.
Each substep minimises the reference's incremental potential restricted to the subspace,

    E(q) = 1/(2h^2) |q - q_n - h qd_n|^2_{M_r} + V_el(y(q)) - f_ext . y(q) + pins + floor
           + 1/(2h) |q - q_n|^2_{D_r},          D = air_damping M + damping K(y_n)   (Rayleigh),

by Newton with a backtracking line search; V_el and its gradient and Hessian come from the
reference's `elastic.energy_grad_hess(y)` in full space and are pulled back through the basis;
the pins are the reference's own pin energy (`sim.pins`) when it has one; the floor holds the
mesh vertices (the reference's extra floor on lattice nodes locks a small subspace to the ground,
see `node_floor`).

So the oracle's error against the reference is the subspace's error alone; a learned model with
a latent of the same size that does worse than the oracle loses the difference in its dynamics.
"""
from __future__ import annotations


import time

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..core.errors import SimulationFault
from ..core.friction import coulomb_terms, floor_contacts
from ..core.physics import FLOOR_OMEGA2, pin_stiffness
from ..core.run import Engine, Run
from ..core.setup import Setup
from ..learned.subspace import held_nodes, held_pins, smooth_functions
from ..reference.simulator import ReferenceSimulator, line_search

DEFAULT_HANDLES = 6           # 72 DOFs: the default when the model's latent size is unknown
DOFS_PER_HANDLE = 12


def handles_for_latent(latent: int | None) -> int:
    """Handles whose DOF count is nearest the model's latent size (at least one)."""
    if not latent:
        return DEFAULT_HANDLES
    return max(1, int(round(latent / DOFS_PER_HANDLE)))


def model_latent_size(engine) -> int | None:
    """The learned engine's latent size when it says it: an attribute `latent_size`, or model
    v2's handle count (`model.cfg.handles` x 12 coordinates; a flat sheet's subspace may keep a
    few fewer, `LatentScene.dims` is exact per mesh), or an older model's `cfg.latent`; else None."""
    size = getattr(engine, "latent_size", None)
    if isinstance(size, (int, np.integer)) and size > 0:
        return int(size)
    cfg = getattr(getattr(engine, "model", None), "cfg", None)
    handles = getattr(cfg, "handles", None)
    if isinstance(handles, (int, np.integer)) and handles > 0:
        return DOFS_PER_HANDLE * int(handles)
    latent = getattr(cfg, "latent", None)
    if isinstance(latent, (int, np.integer)) and latent > 0:
        return int(latent)
    return None


def _elastic(sim, y, need_hess=True):
    try:
        return sim.elastic.energy_grad_hess(y, need_hess=need_hess)
    except TypeError:        # an energy without the flag: always computes the Hessian
        return sim.elastic.energy_grad_hess(y)


def laplacian_weights(H_pattern, positions, handles, held=None):
    """The `handles` lowest eigenvectors [n, handles] of the graph Laplacian whose edges are the
    nonzero node blocks of a 3n x 3n matrix (mass-free, uniform edge weights). `held` [n]: the
    pins' weight at each node; the weights after the constant then leave the pins where they
    are, as the learned model's do (`learned.subspace.smooth_functions`)."""
    n = len(positions)
    A = sp.csr_matrix(H_pattern)
    A = A.tocoo()
    i, j = A.row // 3, A.col // 3
    keep = i != j
    adj = sp.csr_matrix((np.ones(int(keep.sum())), (i[keep], j[keep])), shape=(n, n))
    adj.data[:] = 1.0
    adj = ((adj + adj.T) > 0).astype(float)
    L = sp.diags(np.asarray(adj.sum(axis=1)).ravel()) - adj
    if held is not None and n > 2:
        return smooth_functions(L.tocsr(), np.ones(n), min(handles, n - 1), held)[0]
    k = min(handles, n - 1) if n > 1 else 1
    if n <= 1500 or k >= n - 1:
        _, vecs = np.linalg.eigh(L.toarray())
        W = vecs[:, :k]
    else:
        try:
            _, vecs = spla.eigsh(L.tocsc(), k=k, sigma=-1e-3, which="LM")
            W = vecs[:, :k]
        except (RuntimeError, ValueError, spla.ArpackNoConvergence):
            _, vecs = np.linalg.eigh(L.toarray())
            W = vecs[:, :k]
    # the constant vector first and positive (connected components each give one zero mode)
    W = W / np.maximum(np.abs(W).max(axis=0), 1e-30)
    return W


def skinning_basis(weights, positions):
    """B [3n, 12 H]: column (h, i, a) moves coordinate i of DOF j by w_h(j) * X~_a(j)."""
    X = np.asarray(positions, np.float64)
    c = 0.5 * (X.min(axis=0) + X.max(axis=0))
    size = float(np.linalg.norm(np.ptp(X, axis=0))) or 1.0
    feats = np.hstack([(X - c) / size, np.ones((len(X), 1))])          # [n,4]
    n, H = weights.shape
    B = np.zeros((n, 3, H, 3, 4))
    for i in range(3):
        B[:, i, :, i, :] = weights[:, :, None] * feats[:, None, :]
    return B.reshape(3 * n, H * 12)


class ReducedOracle:
    """Backward-Euler Newton in a skinning-eigenmode subspace of a `ReferenceSimulator`."""

    def __init__(self, setup: Setup, handles: int = DEFAULT_HANDLES, newton_iterations: int = 12,
                 tolerance: float = 1e-6, node_floor: bool = False, **sim_kwargs):
        self.setup = setup
        self.sim = sim = ReferenceSimulator(setup, **sim_kwargs)
        self.h = float(sim.h)
        self.substeps = max(1, int(round(setup.dt / self.h)))
        self.newton_iterations, self.tolerance = newton_iterations, tolerance
        mat = setup.material
        self.y_ref = np.asarray(sim.y, np.float64).copy()                  # DOFs at frame 0: q = 0
        n = len(self.y_ref)
        _, _, H0 = _elastic(sim, self.y_ref)
        pins = held_pins(setup)
        W = laplacian_weights(H0, self.y_ref, handles, None if pins is None else held_nodes(sim.W, pins))
        B = skinning_basis(W, self.y_ref)
        M3 = np.repeat(np.asarray(sim.dof_mass, np.float64), 3)
        # mass-orthonormal basis: same subspace, well-conditioned coordinates
        G = B.T @ (M3[:, None] * B)
        evals, evecs = np.linalg.eigh(G)
        keep = evals > 1e-10 * evals.max()
        T = evecs[:, keep] / np.sqrt(evals[keep])
        self.B = B @ T                                                      # [3n, r], B^T M B = I
        self.dofs = self.B.shape[1]
        self.handles = W.shape[1]
        self.W3 = sp.kron(sp.csr_matrix(sim.W), sp.identity(3), format="csr")
        self.Bx = np.asarray(self.W3 @ self.B)                             # vertex basis [3N, r]
        self.x_ref = np.asarray(self.W3 @ self.y_ref.ravel())
        self.M3 = M3
        self.vertex_mass = np.asarray(sim.vertex_mass, np.float64)
        diag = float(np.linalg.norm(np.ptp(np.asarray(setup.rest, np.float64), axis=0))) or 1.0
        self.diagonal = diag
        # pins: the reference's own quadratic pin energy (1/2 y^T H y - b(frame)^T y + c) when it
        # has one, else springs on the pinned vertices by the shared law (core.physics)
        self.pins = getattr(sim, "pins", None)
        if self.pins is not None and hasattr(self.pins, "linear_terms") and hasattr(self.pins, "H"):
            self.pin_H = self.B.T @ (self.pins.H @ self.B)
        else:
            self.pins = None
            pin_k = getattr(sim, "pin_k", None)
            if pin_k is None:
                pin_k = pin_stiffness(np.asarray(setup.pin_weight, np.float64), self.vertex_mass, mat, diag)
            self.kp = np.repeat(np.asarray(pin_k, np.float64), 3)
            self.pin_H = self.Bx.T @ (self.kp[:, None] * self.Bx)
        # The reference also keeps a lattice body's nodes above the floor. In a subspace of tens of
        # DOFs that locks the body against the ground (measured, toy drop at 72 DOFs: rel_l2 0.22
        # with it, 0.02 without), so by default the oracle's floor holds the mesh vertices only.
        self.node_floor = bool(node_floor) and getattr(sim, "lattice", None) is not None
        self.dof_mass = np.asarray(sim.dof_mass, np.float64)
        self.air = mat.air_damping
        self.beta = mat.damping
        # initial velocity: the reference's DOF velocity, projected (mass-orthogonally)
        v = getattr(sim, "v", None)
        if v is not None:
            self.qd = self.B.T @ (M3 * np.asarray(v, np.float64).ravel())
        else:
            vx = np.asarray(setup.v0, np.float64).ravel()
            mv = np.repeat(self.vertex_mass, 3)
            self.qd = np.linalg.lstsq(self.Bx * np.sqrt(mv)[:, None], np.sqrt(mv) * vx, rcond=None)[0]
        self.q = np.zeros(self.dofs)
        self.frame = 0

    def y(self, q):
        return (self.y_ref.ravel() + self.B @ q).reshape(-1, 3)

    def x(self, q):
        return (self.x_ref + self.Bx @ q).reshape(-1, 3)

    def _external(self, frame):
        s = self.setup
        f_v = (self.vertex_mass[:, None] * np.asarray(s.external_accel(frame), np.float64)).ravel()
        f_d = (np.asarray(self.sim.dof_mass, np.float64)[:, None] * np.asarray(s.gravity, np.float64)[None]).ravel()
        return self.Bx.T @ f_v + self.B.T @ f_d

    def _floor(self, x, x_prev, need_hess, basis=None, mass=None):
        """Floor penalty and Coulomb friction (the reference's laws) at points x, pulled back to q."""
        z = self.setup.floor_z
        r = self.dofs
        if z is None:
            return 0.0, np.zeros(r), None
        basis = self.Bx if basis is None else basis
        mass = self.vertex_mass if mass is None else mass
        pen = np.minimum(x[:, 2] - z, 0.0)
        k = mass * FLOOR_OMEGA2
        g = np.zeros_like(x)
        g[:, 2] = k * pen
        blocks = np.zeros((len(x), 3, 3))
        blocks[:, 2, 2] = k * (pen < 0)
        e = 0.5 * float(np.sum(k * pen ** 2))
        slip = floor_contacts(z, self.setup.floor_friction, x_prev, k)
        if slip is not None and len(slip.index):
            e_f, g_f, H_f = coulomb_terms(slip, x, x_prev, self.h)
            e += e_f
            np.add.at(g, slip.index, g_f)
            np.add.at(blocks, slip.index, H_f)
        idx = np.nonzero(np.any(g != 0.0, axis=1) | np.any(blocks != 0.0, axis=(1, 2)))[0]
        if not len(idx):
            return e, np.zeros(r), (np.zeros((r, r)) if need_hess else None)
        rows = (3 * idx[:, None] + np.arange(3)).ravel()
        Bc = basis[rows]
        grad = Bc.T @ g[idx].ravel()
        H = None
        if need_hess:
            Bb = Bc.reshape(len(idx), 3, r)
            H = np.einsum("aid,aij,aje->de", Bb, blocks[idx], Bb)
        return e, grad, H

    def _step(self, frame):
        h, q_n, qd_n = self.h, self.q, self.qd
        x_prev = self.x(q_n)
        f = self._external(frame)
        target = np.asarray(self.setup.pin_target(frame + 1), np.float64).ravel()
        pin_b, pin_c = self.pins.linear_terms(frame + 1) if self.pins is not None else (None, None)
        y_prev = self.y(q_n)
        if hasattr(self.sim.elastic, "all_upright"):     # the reference's inversion barrier, as it does
            self.sim.elastic.barrier = self.sim.elastic.all_upright(y_prev)
        _, _, K_n = _elastic(self.sim, y_prev)
        D = self.air * np.eye(self.dofs) + self.beta * (self.B.T @ (K_n @ self.B))
        q_pred = q_n + h * qd_n

        def total(q, need_hess=True):
            y = self.y(q)
            e_el, g_el, H_el = _elastic(self.sim, y, need_hess)
            if not np.isfinite(e_el):           # an inverted element: outside the barrier
                return np.inf, None, None
            x = self.x(q)
            if self.pins is not None:
                e_pin, g_pin = self.pins.energy_grad(y.ravel(), pin_b, pin_c)
                g_pin = self.B.T @ g_pin
            else:
                res = x.ravel() - target
                e_pin, g_pin = 0.5 * float(np.dot(self.kp * res, res)), self.Bx.T @ (self.kp * res)
            dq, dv = q - q_pred, q - q_n
            e_fl, g_fl, H_fl = self._floor(x, x_prev, need_hess)
            e_nd, g_nd, H_nd = (self._floor(y, y_prev, need_hess, self.B, self.dof_mass) if self.node_floor
                                else (0.0, 0.0, None))
            Ddv = D @ dv
            e = (0.5 / h ** 2 * float(dq @ dq) + e_el - float(f @ q) + e_pin + e_fl + e_nd + 0.5 / h * float(dv @ Ddv))
            if not need_hess:
                return e, None, None
            g = dq / h ** 2 + self.B.T @ g_el - f + g_pin + g_fl + g_nd + Ddv / h
            H = np.eye(self.dofs) / h ** 2 + self.B.T @ (H_el @ self.B) + self.pin_H + D / h
            for extra in (H_fl, H_nd):
                if extra is not None:
                    H = H + extra
            return e, g, H

        q = q_pred.copy() if np.isfinite(total(q_pred, need_hess=False)[0]) else q_n.copy()
        for _ in range(self.newton_iterations):
            e, g, H = total(q)
            try:
                step = -np.linalg.solve(0.5 * (H + H.T), g)
            except np.linalg.LinAlgError:
                step = -g * h ** 2
            slope = float(g @ step)
            if slope > 0:
                step, slope = -g * h ** 2, -float(g @ g) * h ** 2
            alpha = line_search(total, q, e, slope, step)
            q = q + alpha * step
            if np.max(np.abs(self.Bx @ (alpha * step))) < self.tolerance * self.diagonal:
                break
        self.qd = (q - q_n) / h
        self.q = q

    def iter_frames(self):
        yield self.x(self.q)
        for frame in range(self.setup.frames - 1):
            for _ in range(self.substeps):
                self._step(frame)
            x = self.x(self.q)
            if not np.all(np.isfinite(x)):
                raise SimulationFault(f"the reduced oracle produced NaN at frame {frame + 1}", frame + 1, None)
            yield x


class OracleRun(Run):
    """The oracle is a baseline measured raw: the runtime plausibility guard stays off."""

    def __init__(self, setup: Setup, handles: int, **sim_kwargs):
        super().__init__(setup)
        self.check_plausibility = False

        t0 = time.perf_counter()
        self.oracle = ReducedOracle(setup, handles, **sim_kwargs)
        self.encode_seconds = time.perf_counter() - t0

    def _iter_frames(self):
        return self.oracle.iter_frames()


def model_handles(setup: Setup, base_handles: int = 8) -> int:
    """The handles the learned engine gives this setup's mesh (`learned.subspace.resolution`)."""
    from ..learned.subspace import resolution
    return resolution(setup.rest, setup.faces, setup.material.kind, base_handles, detail=setup.detail).handles


class OracleEngine(Engine):
    """The reduced oracle behind the common `Engine`/`Run` interface. `handles` None: as many as
    the learned engine gives each mesh (`model_handles`), so the two compare at the same size."""
    name = "oracle"

    def __init__(self, handles: int | None = DEFAULT_HANDLES, **sim_kwargs):
        self.handles, self.sim_kwargs = handles, sim_kwargs
        self.last_handles = handles

    @property
    def dofs(self) -> int | None:
        return None if self.handles is None else DOFS_PER_HANDLE * self.handles

    def prepare(self, setup: Setup) -> Run:
        self.last_handles = self.handles or model_handles(setup)
        return OracleRun(setup, self.last_handles, **self.sim_kwargs)


def oracle_rollout(setup: Setup, handles: int = DEFAULT_HANDLES, **sim_kwargs):
    """(frames [T,N,3] float32, fault frame or None, error text or None)."""
    run = OracleEngine(handles, **sim_kwargs).prepare(setup)
    try:
        return run.bake(), None, None
    except SimulationFault as fault:
        good = fault.positions if fault.positions is not None and len(fault.positions) else np.asarray(setup.x0)[None]
        pred = np.repeat(good[-1:], setup.frames, axis=0)
        pred[:len(good)] = good
        return pred.astype(np.float32), len(good), str(fault)
    except (np.linalg.LinAlgError, ValueError, FloatingPointError, RuntimeError) as e:
        pred = np.repeat(np.asarray(setup.x0, np.float32)[None], setup.frames, axis=0)
        return pred, 1, f"{type(e).__name__}: {str(e)[:200]}"


__all__ = ["DEFAULT_HANDLES", "DOFS_PER_HANDLE", "OracleEngine", "ReducedOracle", "handles_for_latent",
           "laplacian_weights", "model_latent_size", "oracle_rollout", "skinning_basis"]
