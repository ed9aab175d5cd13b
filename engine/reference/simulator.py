"""Reference simulator: full-space physics used for training data, ground truth and speed baseline.

Solids are continuum FEM: the mesh is embedded in a lattice of box cells split into quadratic
tetrahedra (lattice.py), with stable neo-Hookean elasticity (solid.py: Young's modulus, Poisson
ratio, density). Mesh vertices follow the lattice nodes by interpolation, so any closed or open
mesh works. Thin sheets are cloth on the mesh itself (cloth.py).

Time stepping is backward Euler written as minimisation of the incremental potential
    E(y) = 1/(2h^2) |y - y_n - h v_n|_M^2 + V(y) + 1/(2h) |y - y_n|_D^2,
solved by Newton with a backtracking line search; D = alpha M + beta K is Rayleigh damping.
V holds elasticity, gravity, painted accelerations, pins (pins.py), self-contact of a solid's lattice
(self_contact.py) or, when the scene asks, of a cloth (core/self_contact.py), a floor and collision objects
(penalty with tangential friction; world_forces.py), acting on mesh vertices and pulled back to the
degrees of freedom through the interpolation matrix W (identity for cloth). Force fields
(`setup.effectors`) are evaluated on the deformed surface at the start of every substep
(world_forces.py).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..core.colliders import is_closed_surface, signed_distance
from ..core.errors import Cancelled, SimulationFault
from ..core.geometry import bbox_diagonal, lumped_vertex_areas
from ..core.friction import changed, friction_contacts
from ..core.physics import FLOOR_OMEGA2, carried_vertex_masses, substeps_per_frame
from ..core.self_contact import LayerFriction, SheetSelfContact
from ..core.setup import Setup
from .budget import (BUDGET_RETRY_FACTOR, DEFAULT_BUDGET, RETRY_NEWTON_ITERATIONS, OutOfWork, SubstepWork, Work,
                     WorkBudgetExceeded, halvings, setup_load)
from .cloth import ClothModel
from .world_forces import collider_terms, external_accel, friction_terms
from .lattice import DEFAULT_LATTICE_CELLS, Lattice
from .pins import Pins, pinned_box
from .lattice_contact import LatticeSelfContact
from .solid import StableNeoHookean

DEFAULT_SUBSTEP = 1.0 / 96.0    # longest substep, seconds
DEFAULT_ORDER = 2               # quadratic tetrahedra: no bending locking
# How a solid's lattice nodes meet the floor. "body" (the default, PHYSICS_VERSIONS solid 4): a node may
# sink below the floor as far as it lies outside the body at rest, so only the body itself stands on the
# floor (nodes inside it still keep the cells from folding). "nodes" (solid 3 and before): each node at the
# floor's height, as the vertices; the lattice's cells reach past the body, so its bottom nodes make a flat
# sole: a rubber box on its edge stands on it, and a body squeezed between two pushes stays upright on 4
# cells where it tips over on 8 and 12 (docs/PHYSICS.md, "The floor under the lattice").
LATTICE_FLOORS = ("nodes", "body")
# friction's normal forces are taken at the substep's start, then again at its solution while they
# change (a contact that starts or ends in the substep): IPC's lagged updates
FRICTION_UPDATES = 2
FIT_SMOOTHING = 1e-2   # a start's non-affine remainder: smoothness against fit (a smooth bend kept to ~1 %)


def node_depth_outside(nodes, rest, faces) -> np.ndarray:
    """[D] how far each lattice node lies outside the body's closed surface at rest (0 inside); zeros
    for an open surface, whose inside is not defined."""
    if not is_closed_surface(faces):
        return np.zeros(len(nodes))
    return np.maximum(signed_distance(nodes, rest, faces, closed=True)[0], 0.0)


def line_search(total, x, energy, slope, step, alpha=1.0):
    """Backtracking (Armijo) step length along `step` from `x` for an energy `total(x, need_hess)`,
    starting at `alpha` (the share of the step that self-contact allows); past 1e-4 it keeps
    halving only to stay where the energy is finite (no element inverted), so a step never
    crosses the inversion barrier."""
    while alpha > 1e-4:
        e_new, _, _ = total(x + alpha * step, need_hess=False)
        if e_new <= energy + 1e-4 * alpha * slope:
            return alpha
        alpha *= 0.5
    while alpha > 1e-12 and not np.isfinite(total(x + alpha * step, need_hess=False)[0]):
        alpha *= 0.5
    return alpha if alpha > 1e-12 else 0.0


def _plus(a, b):
    """The sum of two (energy, gradient, Hessian or None) triples."""
    H = a[2] if b[2] is None else (b[2] if a[2] is None else a[2] + b[2])
    return a[0] + b[0], a[1] + b[1], H


class ReferenceSimulator:
    """Steps a `Setup` frame by frame. `iter_frames()` yields vertex positions [N,3].

    `budget` is the work one substep may do (budget.py; None: no limit); `cancel` (a
    `threading.Event`) is checked at every energy evaluation and `on_substep(frame, fraction)` is
    called after every substep, so a slow frame shows progress and stops within a second."""

    def __init__(self, setup: Setup, lattice_cells: int = DEFAULT_LATTICE_CELLS, substep: float = DEFAULT_SUBSTEP,
                 newton_iterations: int = 20, tolerance: float = 1e-5, order: int = DEFAULT_ORDER,
                 self_contact: bool = True, budget: Work | None = DEFAULT_BUDGET, lattice_floor: str = "body"):
        if lattice_floor not in LATTICE_FLOORS:
            raise ValueError(f"lattice_floor must be one of {LATTICE_FLOORS}, got {lattice_floor!r}")
        self.setup = setup
        self.budget = budget
        self.work_peak = Work()         # the most work any substep has done so far
        self.work_log = None            # a list to get every substep's `Work` (experiments/work_budget_scan.py)
        self.cancel = None
        self.on_substep = None
        mat = setup.material
        rest = np.asarray(setup.rest, dtype=np.float64)
        n = len(rest)
        self.diagonal = bbox_diagonal(rest)
        self.cloth = mat.kind == "cloth"
        self.direct_solve = self.cloth  # stiff springs: CG converges slowly
        self.colliders = list(setup.colliders)
        self.lattice = None
        if self.cloth:
            self.W = sp.identity(n, format="csr")
            self.rest_dofs = rest
            area = lumped_vertex_areas(rest, setup.faces)
            area = np.where(area > 0, area, max(area.mean(), 1e-12) if area.any() else 1e-6)
            self.dof_mass = mat.density * area
            self.elastic = ClothModel(rest, np.asarray(setup.faces), mat.stiffness, mat.bending)
        else:
            lat = Lattice(rest, np.asarray(setup.faces), lattice_cells, order=order, snap_box=pinned_box(setup))
            self.lattice = lat
            self.W = lat.W
            self.rest_dofs = lat.nodes
            self.elastic = StableNeoHookean(lat.nodes, lat.tets, mat.stiffness, mat.poisson, order=order,
                                            i2_share=mat.i2_share)
            self.dof_mass = mat.density * lat.node_volume
        # how far below the floor each degree of freedom may go: nothing for a cloth's vertices (or, with
        # lattice_floor "nodes", a solid's lattice nodes); by default, as far as the node lies outside
        # the body at rest
        self.node_floor_depth = np.zeros(len(self.rest_dofs))
        if self.lattice is not None and lattice_floor == "body":
            self.node_floor_depth = node_depth_outside(self.rest_dofs, rest, np.asarray(setup.faces))
        self.self_contact = (LatticeSelfContact(self.lattice, mat.stiffness)
                             if self.lattice is not None and self_contact else None)
        self._work = None               # the running substep's count
        if self.self_contact is not None:
            self.self_contact.between_chunks = self._between_chunks
        self.vertex_mass = self._vertex_masses(setup)
        # a cloth's thickness layer (scene key "self_collision"; the add-on's cloth has it by default)
        self.sheet_contact = (SheetSelfContact(rest, setup.faces, setup.self_collision, self.vertex_mass)
                              if self.cloth and setup.self_collision else None)
        self.W3 = sp.kron(self.W, sp.identity(3), format="csr")
        self.M3 = np.repeat(self.dof_mass, 3)
        self.substeps = substeps_per_frame(setup.dt, substep)
        self.h = setup.dt / self.substeps
        self.newton_iterations = newton_iterations
        self.tolerance = tolerance
        self.pins = Pins(setup, self.W, self.vertex_mass, self.dof_mass, self.rest_dofs, self.diagonal, self.lattice)
        # initial state: fit the DOFs to frame 0 (least squares through W) and to velocity0
        self.y = self._fit_dofs(setup.x0)
        self.v = self._fit_dofs(setup.x0 + setup.v0) - self.y
        self.frame = 0

    def _vertex_masses(self, setup):
        if setup.vertex_mass is not None:
            return np.asarray(setup.vertex_mass, dtype=np.float64)
        return carried_vertex_masses(self.W, self.dof_mass)

    def _fit_dofs(self, x):
        if self.W.shape[0] == self.W.shape[1] and (self.W != sp.identity(self.W.shape[0])).nnz == 0:
            return np.asarray(x, dtype=np.float64).copy()
        # The affine part of the vertex displacement moves every lattice node (trilinear
        # interpolation reproduces affine fields exactly, so a translation or rotation of the
        # vertices is matched everywhere, including interior nodes no vertex touches); the
        # remainder is matched by the smoothest change of the nodes (the sub-grid's Laplacian, weighed
        # by FIT_SMOOTHING): a node that no vertex holds follows its neighbours, so a start stored with
        # rounding (a sequence's first frame) does not fling barely held nodes and invert their cells.
        rest = np.asarray(self.setup.rest, dtype=np.float64)
        u = np.asarray(x, dtype=np.float64) - rest
        c = rest.mean(axis=0)
        P = np.hstack([rest - c, np.ones((len(rest), 1))])
        affine, *_ = np.linalg.lstsq(P, u, rcond=None)
        node_u = np.hstack([self.rest_dofs - c, np.ones((len(self.rest_dofs), 1))]) @ affine
        residual = u - np.asarray(self.W @ node_u)
        WtW = (self.W.T @ self.W).tocsr()
        L = self.lattice.grid_laplacian()
        A = (WtW + FIT_SMOOTHING * WtW.diagonal().mean() / L.diagonal().mean() * L
             + 1e-12 * sp.identity(self.W.shape[1])).tocsc()
        b = self.W.T @ residual
        return self.rest_dofs + node_u + spla.spsolve(A, b).reshape(-1, 3)

    # ----- energies on DOFs y [n,3]; each returns (energy, gradient [3n], Hessian or None)

    def _external_forces(self, frame):
        """Generalised force of gravity, painted accelerations and force fields (the fields at the
        current state: positions, velocities and normals of the vertices)."""
        s = self.setup
        accel = external_accel(s, frame, self.vertices(), np.asarray(self.W @ self.v), self.cloth)
        f_vertices = self.vertex_mass[:, None] * accel
        f = self.W.T @ f_vertices + self.dof_mass[:, None] * np.asarray(s.gravity)[None, :]
        return np.asarray(f).ravel()

    def _floor_terms(self, x, need_hess, mass=None, below=0.0):
        """Floor penalty on points x (vertices, or a solid's lattice nodes with their masses `mass`),
        each allowed `below` metres under the floor ([P] or a number)."""
        mass = self.vertex_mass if mass is None else mass
        z = self.setup.floor_z
        n = len(x)
        if z is None:
            return 0.0, np.zeros(3 * n), None
        pen = np.minimum(x[:, 2] - (z - below), 0.0)
        contact = pen < 0
        k = mass * FLOOR_OMEGA2
        energy = 0.5 * float(np.sum(k * pen ** 2))
        g = np.zeros((n, 3))
        g[:, 2] = k * pen
        H = None
        if need_hess:
            diag = np.stack([np.zeros(n), np.zeros(n), k * contact], axis=1).ravel()
            H = sp.diags(diag)
        return energy, g.ravel(), H

    def _step(self, frame, end=1.0, must_converge=False):
        """One substep from state (y, v); it ends at fractional frame `frame + end` (where a moving
        collider is felt). Newton stops after `newton_iterations` even if it has not converged (a
        few substeps of ordinary scenes do), unless `must_converge` (then that runs out of work)."""
        h, y_n = self.h, self.y
        total, slip, (t_start, t_end), sheet_pairs = self.incremental_potential(frame, end)
        yf = self._newton(total, y_n.ravel(), h, self.v.ravel(), must_converge)
        for _ in range(FRICTION_UPDATES):
            fresh = self._slip(yf.reshape(-1, 3), t_end, t_start, t_end, sheet_pairs)
            if not any(changed(a, b) for a, b in zip(slip, fresh)):
                break
            slip[:] = fresh
            yf = self._newton(total, yf, h, np.zeros_like(yf), must_converge)
        y_new = yf.reshape(-1, 3)
        self.v = (y_new - y_n) / h
        self.y = y_new

    def incremental_potential(self, frame, end=1.0):
        """The substep from the state (y, v) that ends at fractional frame `frame + end`, as Newton
        minimises it: (total, slip, (start, end) in frames, sheet pairs), where total(yf, need_hess)
        gives (energy, gradient, Hessian) of the flattened DOFs and reads the friction contacts
        `slip` (a list, renewed in place between Newton solves)."""
        h = self.h
        y_n, v_n = self.y, self.v
        x_prev = np.asarray(self.W @ y_n)
        f_ext = self._external_forces(frame)
        pin_b, pin_c = self.pins.linear_terms(frame + 1)
        mat = self.setup.material
        _, _, K_n = self.elastic.energy_grad_hess(y_n)
        D = mat.air_damping * sp.diags(self.M3) + mat.damping * K_n
        y_pred = (y_n + h * v_n).ravel()
        Mh = self.M3 / h ** 2
        t_end = frame + end
        t_start = t_end - 1.0 / self.substeps
        # a cloth's self-contact pairs: searched once a substep, over the motion to the inertial guess
        sheet_pairs = self.sheet_contact.pairs(y_n, y_pred.reshape(-1, 3)) if self.sheet_contact is not None else None
        slip = self._slip(y_n, t_start, t_start, t_end, sheet_pairs)

        def total(yf, need_hess=True):
            self._check_cancel()
            y = yf.reshape(-1, 3)
            x = np.asarray(self.W @ y)
            e_el, g_el, H_el = self.elastic.energy_grad_hess(y, need_hess)
            if not np.isfinite(e_el):           # an inverted element: outside the barrier
                return np.inf, None, None
            dy = yf - y_pred
            dv = yf - y_n.ravel()
            Ddv = D @ dv
            e_pin, g_pin = self.pins.energy_grad(yf, pin_b, pin_c)
            e_floor, g_floor, H_floor = self._floor_terms(x, need_hess)
            # the lattice body may not pass the floor either: a node pushed through it under a
            # vertex held by it folds the cell between them (inverted elements)
            e_nodes, g_nodes, H_nodes = (self._floor_terms(y, need_hess, self.dof_mass, self.node_floor_depth)
                                         if self.lattice is not None else (0.0, 0.0, None))
            e_floor, g_floor, H_floor = _plus((e_floor, g_floor, H_floor), friction_terms(slip[0], x, x_prev, h, need_hess))
            if slip[1] is not None:
                e_nodes, g_nodes, H_nodes = _plus((e_nodes, g_nodes, H_nodes),
                                                  friction_terms(slip[1], y, y_n, h, need_hess))
            if self.colliders:
                e_floor, g_floor, H_floor = _plus((e_floor, g_floor, H_floor),
                                                  collider_terms(self.colliders, x, self.vertex_mass, t_end, need_hess))
                if self.lattice is not None:     # the lattice body may not pass a collider either
                    e_nodes, g_nodes, H_nodes = _plus((e_nodes, g_nodes, H_nodes),
                                                      collider_terms(self.colliders, y, self.dof_mass, t_end, need_hess))
            if sheet_pairs is not None:
                e_floor, g_floor, H_floor = _plus((e_floor, g_floor, H_floor),
                                                  self.sheet_contact.terms(x, sheet_pairs, need_hess))
            if slip[2] is not None:             # friction between the cloth's layers
                e_layers, g_layers, H_layers = slip[2].terms(x, x_prev, h, need_hess)
                e_floor, g_floor, H_floor = _plus((e_floor, g_floor, H_floor), (e_layers, g_layers.ravel(), H_layers))
            if self._contact_on():
                e_nodes, g_nodes, H_nodes = _plus((e_nodes, g_nodes, H_nodes), self.self_contact.terms(y, need_hess))
            energy = 0.5 * float(np.dot(Mh * dy, dy)) + e_el - float(np.dot(f_ext, yf)) + e_pin + e_floor \
                + e_nodes + 0.5 / h * float(np.dot(dv, Ddv))
            grad = Mh * dy + g_el - f_ext + g_pin + self.W3.T @ g_floor + g_nodes + Ddv / h
            if not need_hess:
                return energy, grad, None
            H = sp.diags(Mh) + H_el + self.pins.H + D / h
            if H_floor is not None:
                H = H + self.W3.T @ H_floor @ self.W3
            if H_nodes is not None:
                H = H + H_nodes
            return energy, grad, H.tocsc()
        return total, slip, (t_start, t_end), sheet_pairs

    def _slip(self, y, frame, frame_start, frame_end, sheet_pairs=None):
        """[vertex, node, layer] friction contacts of the state y, found at `frame`: Coulomb
        friction's normal forces, at the vertices and (a solid) at the lattice nodes that feel the
        floor and colliders too, and (a cloth) between its layers where `sheet_pairs` touch."""
        x = np.asarray(self.W @ y)
        nodes = (friction_contacts(self.setup, y, self.dof_mass, frame, frame_start, frame_end, self.node_floor_depth)
                 if self.lattice is not None else None)
        layers = (LayerFriction.of(sheet_pairs, x, self.sheet_contact.distance, self.setup.self_friction)
                  if sheet_pairs is not None else None)
        return [friction_contacts(self.setup, x, self.vertex_mass, frame, frame_start, frame_end), nodes, layers]

    def _newton(self, total, y0, h, v0, must_converge):
        """Minimise the incremental potential `total` by Newton with line search from the inertial
        guess, counting the work against the budget."""
        if self.self_contact is not None:
            self.self_contact.pairs_checked = 0
        work = self._work = SubstepWork(self.budget)
        try:
            return self._newton_iterations(total, y0, h, v0, must_converge, work)
        finally:
            self._work = None
            self.work_peak.raise_to(work)
            if self.work_log is not None:
                self.work_log.append(work)

    def _newton_iterations(self, total, y0, h, v0, must_converge, work):
        yf = y0 + self._allowed(y0, h * v0) * h * v0
        energy, grad, H = total(yf)
        if not np.isfinite(energy):             # the inertial guess inverts an element: start at rest
            yf = y0.copy()
            energy, grad, H = total(yf)
        cap = max(self.newton_iterations, RETRY_NEWTON_ITERATIONS) if must_converge else self.newton_iterations
        for _ in range(cap):
            work.spend("newton_iterations")
            step = -self._solve(H, grad)
            allowed = self._allowed(yf, step, work)
            alpha = line_search(total, yf, energy, float(np.dot(grad, step)), step, allowed)
            work.spend("line_search_halvings", halvings(allowed, alpha))
            self._spend_pair_checks(work)
            yf = yf + alpha * step
            if allowed == 1.0 and np.max(np.abs(alpha * step)) < self.tolerance * self.diagonal:
                return yf
            energy, grad, H = total(yf)
        if must_converge:
            raise OutOfWork("newton_iterations", cap, cap)
        return yf

    def _contact_on(self):
        """Self-contact holds while every element is upright: a state that starts inverted has its
        surface inside out, and must pass through itself to come right (the barrier is off then too)."""
        return self.self_contact is not None and self.elastic.barrier

    def _allowed(self, yf, step, work=None):
        """Share of a step that self-contact allows (1 without it)."""
        if not self._contact_on():
            return 1.0
        allowed = self.self_contact.safe_fraction(yf.reshape(-1, 3), step)
        if work is not None:
            self._spend_pair_checks(work)
            if allowed < 1.0:
                work.spend("contact_limited_steps")
                work.spend("contact_cut_halvings", halvings(1.0, allowed))
        return allowed

    def _spend_pair_checks(self, work):
        if self.self_contact is not None:
            work.spend("contact_pairs", self.self_contact.pairs_checked)
            self.self_contact.pairs_checked = 0

    def _between_chunks(self):
        """A long contact search: stop it when cancelled or out of work."""
        self._check_cancel()
        if self._work is not None:
            self._spend_pair_checks(self._work)

    def _check_cancel(self):
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled(f"cancelled during frame {self.frame + 1}")

    def _solve(self, H, rhs):
        """Jacobi-preconditioned conjugate gradients; H is SPD and dominated by M/h^2, so it
        converges in tens of iterations. A direct solve is the fallback."""
        self._check_cancel()
        if self.direct_solve:
            return spla.spsolve(H.tocsc(), rhs, permc_spec="MMD_AT_PLUS_A")
        H = H.tocsr()
        inv_diag = 1.0 / H.diagonal()
        precond = spla.LinearOperator(H.shape, matvec=lambda r: inv_diag * r)
        # a cancel is seen at every iteration too: one solve of a hard push took about a second
        x, info = spla.cg(H, rhs, rtol=1e-8, maxiter=400, M=precond, callback=lambda xk: self._check_cancel())
        if info != 0:
            self._check_cancel()
            x = spla.spsolve(H.tocsc(), rhs, permc_spec="MMD_AT_PLUS_A")
        return x

    def vertices(self):
        return np.asarray(self.W @ self.y)

    def step_frame(self):
        """The next frame; a frame whose substep runs out of work is computed again with
        BUDGET_RETRY_FACTOR times the substeps, where Newton must also converge in each (within
        RETRY_NEWTON_ITERATIONS); if it runs out again the run stops."""
        before = (self.y.copy(), self.v.copy())
        try:
            self._substeps(self.substeps)
        except OutOfWork as first:
            self.y, self.v = before[0].copy(), before[1].copy()
            try:
                self._substeps(self.substeps * BUDGET_RETRY_FACTOR, must_converge=True)
            except OutOfWork as again:
                self.y, self.v = before
                raise WorkBudgetExceeded(self.frame + 1, first, again, setup_load(self.setup, self.diagonal),
                                         self.setup.material.kind) from None
        self.frame += 1
        x = self.vertices()
        if not np.all(np.isfinite(x)):
            raise SimulationFault(f"the reference simulation produced NaN at frame {self.frame}", self.frame, None)
        return x

    def _substeps(self, count, must_converge=False):
        """Advance the state by one frame in `count` substeps."""
        substeps, h = self.substeps, self.h
        self.substeps, self.h = count, self.setup.dt / count
        try:
            for k in range(count):
                if self.lattice is not None:    # a state that starts inverted is first solved without the barrier
                                                # (and without self-contact)
                    self.elastic.barrier = self.elastic.all_upright(self.y)
                self._step(self.frame, (k + 1) / count, must_converge)
                if self.on_substep is not None:
                    self.on_substep(self.frame + 1, (k + 1) / count)
        finally:
            self.substeps, self.h = substeps, h

    def iter_frames(self):
        yield self.vertices()
        for _ in range(self.setup.frames - 1):
            yield self.step_frame()

    # ----- diagnostics used by tests and evaluation

    def energy(self):
        """Kinetic + elastic + gravitational energy of the current state (J)."""
        kinetic = 0.5 * float(np.dot(self.M3, self.v.ravel() ** 2))
        elastic, _, _ = self.elastic.energy_grad_hess(self.y, need_hess=False)
        grav = -float(np.dot(self.dof_mass, self.y @ np.asarray(self.setup.gravity)))
        return kinetic + elastic + grav

    def solve_static(self, frame=0, iterations=50):
        """Equilibrium under gravity, forces and pins (Newton with line search on the potential
        alone)."""
        f_ext = self._external_forces(frame)
        pin_b, pin_c = self.pins.linear_terms(frame)

        def potential(yf, need_hess=True):
            e_el, g_el, H_el = self.elastic.energy_grad_hess(yf.reshape(-1, 3), need_hess)
            if not np.isfinite(e_el):
                return np.inf, None, None
            e_pin, g_pin = self.pins.energy_grad(yf, pin_b, pin_c)
            H = None if H_el is None else (H_el + self.pins.H).tocsc()
            return e_el + e_pin - float(np.dot(f_ext, yf)), g_el + g_pin - f_ext, H

        yf = self.y.ravel().copy()
        for _ in range(iterations):
            energy, grad, H = potential(yf)
            step = -spla.spsolve(H, grad)
            alpha = line_search(potential, yf, energy, float(np.dot(grad, step)), step)
            yf += alpha * step
            if np.max(np.abs(alpha * step)) < 1e-10 * self.diagonal:
                break
        self.y = yf.reshape(-1, 3)
        self.v = np.zeros_like(self.y)
        return self.vertices()

    def inverted_share(self):
        """Share of the solid's quadrature points with det F <= 0 (0 for cloth)."""
        return self.elastic.inverted_share(self.y) if self.lattice is not None else 0.0
