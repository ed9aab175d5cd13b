"""The complementary full-space layer of a sheet: what the latent space cannot hold.

A smooth linear subspace locks a sheet: it cannot hinge at its pinned edge, crease, or hang over
a table's edge without stretching (docs/DESIGN_NOTES.md, "Sheets"). So a sheet takes two moves
per substep:

1. the latent step (the learned Lagrangian dynamics in q, its velocity the layer's own projected
   on the subspace) predicts how what the subspace holds moves; inertia predicts the rest
   (`runtime.NeurokRun._layer_substep`). While the sheet touches
   the floor or a collider the iterations start from inertia alone (the latent step feels
   contact at a few hundred samples of a smooth subspace and pulled a tablecloth towards a tent);
2. quasi-Newton iterations on the mesh itself, started at that prediction, minimise the sheet's
   incremental potential in full space,

       E(x) = 1/(2h^2) |x - x_n - h v_n|_M^2 + sum_e k_e/2 (|x_j - x_i| - L_e)^2
              + 1/2 (x - X)^T Q (x - X) + pins - f . x + damping + contact,

   the edge springs, quadratic bending and penalty contact of `core.mesh_physics` (the
   terms the reference simulator prices), with its Rayleigh damping taken at x_n and air drag.
   The iterations are L-BFGS whose first guess of the inverse Hessian is one prefactored sparse
   solve with the rest state's isotropic system, the same for the three coordinates (Liu et al.
   2017); bending is left out of that system (1e-4 of the membrane's stiffness, it tripled the
   factor, `experiments/sheet_solve_cost.py`). The curvature pairs carry from substep to substep as part of
   the run's state (`runtime.RunState`), so a frame the guard computes again starts from the
   accepted state's. Floor and colliders push with the reference's penalty spring against each
   vertex's tangent plane, found once per substep; friction is the reference's lagged Coulomb
   potential (`core.friction`: normal forces from the substep's start), a term of E(x) like the
   others, whose curvature joins the prefactored system where it acts (a friction applied to the
   velocity after the solve held the contacts back but not their neighbours, and a cloth on a
   table stretched 3-6x the reference's). With the scene's "self_collision", the sheet's folds keep a thickness
   layer apart: the pairs of `core.self_contact`, found once per substep, and its penalty (the one
   the reference prices).

A coarse level in the latent space (Newton on the Hessian projected on the skinning basis,
taking turns with the L-BFGS steps) brought the flag's first fall closer to the reference but the
rollouts further from it, at more cost (`experiments/sheet_layer_designs.py`, docs/DESIGN_NOTES.md,
"Sheets"), so runs go without it.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import ddot

from ..core.colliders import contact_planes
from ..core.fields import total_accel, vertex_normals
from ..core.geometry import bbox_diagonal, lumped_vertex_areas
from ..core.friction import coordinate_stiffness, coulomb_terms, friction_contacts
from ..core.mesh_physics import EdgeSprings, bending_matrix, penalty_contact
from ..core.physics import pin_stiffness
from ..core.setup import SHEET_LAYER_CHOICES
from ..core.self_contact import LayerFriction, SheetSelfContact, self_contact_penalty
from .quasi_newton import LAYER_MEMORY, PrefactoredSolve, as_columns, coordinate_solves, flat, quasi_newton

LAYER_ITERATIONS = 20          # L-BFGS iterations per substep (fewer lose the flag's first fall: experiments/sheet_layer_designs.py)


def layer_wanted(choice: str, setup) -> bool:
    """Whether a sheet run takes the full-space layer: "on" (or "full"), "off", or "auto", which
    follows the setup's level of detail: at medium and high, at any size; never at low (fast previews)."""
    if choice not in SHEET_LAYER_CHOICES:
        raise ValueError(f"unknown sheet layer choice '{choice}' ({', '.join(SHEET_LAYER_CHOICES)})")
    if choice != "auto":
        return choice != "off"
    return setup.detail != "low"


def vertex_masses(setup) -> np.ndarray:
    """kg per vertex: the setup's, else areal density times the vertex's share of the area."""
    if setup.vertex_mass is not None:
        return np.asarray(setup.vertex_mass, dtype=np.float64)
    area = lumped_vertex_areas(np.asarray(setup.rest, np.float64), np.asarray(setup.faces))
    area = np.where(area > 0, area, max(area.mean(), 1e-12) if area.any() else 1e-6)
    return setup.material.density * area


class SheetLayer:
    """The full-space layer of one sheet, in metres."""

    def __init__(self, setup, iterations: int = LAYER_ITERATIONS, memory: int = LAYER_MEMORY):
        self.setup, self.iterations, self.memory = setup, iterations, memory
        rest = np.asarray(setup.rest, dtype=np.float64)
        faces = np.asarray(setup.faces)
        material = setup.material
        self.rest = rest
        self.mass = vertex_masses(setup)
        self.springs = EdgeSprings(rest, faces, material.stiffness)
        self.Q = (bending_matrix(rest, faces) * material.bending).tocsr()
        self.QX = self.Q @ rest
        # the edge differences and bending of all three coordinates at once, on the iterations'
        # column-major vectors flattened (one sparse product each instead of three)
        self._D3 = sp.kron(sp.identity(3), self.springs.D, format="csr")
        self._DT3 = self._D3.T.tocsr()
        self._Q3 = sp.kron(sp.identity(3), self.Q, format="csr")
        # the reference's pins: each holds its own vertex's mass (the flag's pole gives 0.9 mm in the
        # wind, the reference's 0.7)
        self.pin_k = pin_stiffness(np.asarray(setup.pin_weight, np.float64), self.mass, material,
                                   bbox_diagonal(rest))
        self.air = material.air_damping
        self.beta = material.damping
        self.colliders = list(setup.colliders or [])
        self.floor_friction = setup.floor_friction
        # the thickness layer that keeps the sheet's folds apart (scene key "self_collision"; the add-on's default)
        self.self_contact = (SheetSelfContact(rest, faces, setup.self_collision, self.mass)
                             if setup.self_collision else None)
        self._factors = {}     # per substep length
        self._planes = []
        self.touching = False  # whether the last substep touched the floor or a collider (it then started from inertia)

    def _diagonal(self, h):
        return self.mass / h ** 2 + self.air * self.mass / h + self.pin_k

    def _factor_matrix(self, h):
        """The rest-state isotropic system of a substep h: inertia, air, pins and the springs'
        stiffness in every direction. Bending is left out: 1e-4 of the membrane's stiffness, it
        would triple the factor's size (`experiments/sheet_solve_cost.py`)."""
        return sp.diags(self._diagonal(h)) + self.springs.DT @ sp.diags(self.springs.k) @ self.springs.D

    def _factor(self, h):
        """The prefactored `_factor_matrix` (L-BFGS's first inverse Hessian), `PrefactoredSolve`."""
        if h not in self._factors:
            self._factors[h] = PrefactoredSolve(self._factor_matrix(h))
        return self._factors[h]

    def forces(self, frame: int, x, v) -> np.ndarray:
        """Gravity, painted accelerations and force fields at the state (x, v), in newtons [N,3]."""
        s = self.setup
        a = np.asarray(s.external_accel(frame), dtype=np.float64) + np.asarray(s.gravity)[None, :]
        if s.effectors:
            a = a + total_accel(s.effectors, frame, x, v, vertex_normals(x, s.faces), surface=True)
        return self.mass[:, None] * a

    def step(self, frame: int, end: float, x_n, v_n, h: float, guess=None, history=()):
        """(x, v) after a substep h from (x_n, v_n), iterating from `guess` (default: inertia);
        `end` is the fractional frame the substep ends at (where colliders are taken)."""
        x_n = np.asarray(x_n, dtype=np.float64)
        v_n = np.asarray(v_n, dtype=np.float64)
        inertial = x_n + h * v_n
        start = inertial if guess is None else np.array(guess, dtype=np.float64)
        reach = 2.0 * max(float(np.abs(start - x_n).max()), h * float(np.abs(v_n).max())) + 1e-3
        self._planes = self.contact_planes(start, reach, end)
        self.touching = self.contacts(inertial)
        if self.touching:
            start = inertial
        # the folds' pairs: searched once a substep, over the motion to the iterations' start
        folds = self.self_contact.pairs(x_n, start) if self.self_contact is not None else None
        layers = (LayerFriction.of(folds, x_n, self.self_contact.distance, self.setup.self_friction)
                  if folds is not None else None)
        # Coulomb friction at the floor and colliders, its normal forces found at the substep's start
        # (lagged: the reference's law, `core.friction`)
        begin = end - h / self.setup.dt
        friction = friction_contacts(self.setup, x_n, self.mass, begin, begin, end)
        energy = self.incremental_potential(frame, x_n, v_n, h, folds, layers, friction)
        history = list(history)         # the accepted state's pairs stay as they were
        x = quasi_newton(energy, as_columns(start), self._precondition(h, friction, x_n, start),
                         self.iterations, self.memory, history)
        return x, (x - x_n) / h, tuple(history)

    def _precondition(self, h, friction, x_n, start):
        """L-BFGS's first inverse Hessian: the prefactored rest system, and where friction holds
        vertices, that system with friction's curvature at the start's slide on its diagonal, one
        factor per coordinate (the floor's x and y share one). Static friction is hundreds of times
        a vertex's inertia: iterations that do not see it leave the held part of a sheet stretched."""
        rest = self._factor(h)
        if friction is None:
            return rest.solve
        k = np.zeros((len(self.mass), 3))
        np.add.at(k, friction.index, coordinate_stiffness(friction, start, x_n, h))
        A = self._factor_matrix(h)
        return coordinate_solves(k, lambda d: PrefactoredSolve(A + sp.diags(d)) if d.any() else rest)

    def incremental_potential(self, frame, x_n, v_n, h, folds=None, layers=None, friction=None):
        """E(x) -> (energy, gradient [N,3]) of the substep from (x_n, v_n) (module docstring), with
        the Rayleigh damping's stiffness part taken at x_n (as the reference takes it); the energy
        up to a constant of the substep. `folds`: the substep's self-contact pairs
        (`SheetSelfContact.pairs`), whose thickness-layer penalty joins the contact terms, and
        `layers` the Coulomb friction between the layers where they touch (`LayerFriction`, its
        normal forces taken at x_n: the reference's law), and `friction` the floor's and colliders'
        Coulomb contacts (`core.friction.FrictionContacts`, found at x_n).

        Everything but the springs is quadratic in x, so it is gathered once per substep into
        1/2 x.(a x + c Q x) - b.x: inertia, air drag and pins on the diagonal a, bending with its
        damping c = 1 + beta/h, the forces, targets and rest shape in b. The iterations' vectors
        are column-major (`as_columns`): each coordinate's column is contiguous, so the potential
        works on the three columns as one vector."""
        springs = self.springs
        beta_h = self.beta / h
        inertia, air = self.mass / h ** 2, self.air / h * self.mass
        target = np.asarray(self.setup.pin_target(frame + 1), dtype=np.float64)
        a = np.tile(inertia + air + self.pin_k, 3)
        bend = 1.0 + beta_h
        inertial = x_n + h * v_n
        b = flat(as_columns(inertia[:, None] * inertial + air[:, None] * x_n + self.pin_k[:, None] * target
                            + self.forces(frame, x_n, v_n) + self.QX + beta_h * (self.Q @ x_n)))
        # the damping's springs at x_n: k [(1 - r) n n^T + r I] (`EdgeSprings.hessian_blocks`)
        d_n = self._edge_vectors(as_columns(x_n))
        dn_dn = _row_dot(d_n, d_n)
        length_n = np.maximum(np.sqrt(dn_dn), 1e-12)
        ratio = np.clip(1.0 - springs.rest_length / length_n, 0.0, None)
        damp_along, damp_all = beta_h * springs.k * (1.0 - ratio), beta_h * springs.k * ratio
        k, rest_length, DT3, Q3, n = springs.k, springs.rest_length, self._DT3, self._Q3, len(self.mass)
        # the quadratic part is priced from inertia's prediction r, as u.(A (x + r) / 2 - b) with
        # u = x - r: written as 1/2 x.Ax - b.x, its rounding (metres squared times the inertia's
        # stiffness) outweighed the last iterations' decrease, and the line search took or
        # refused a step on the rounding
        r = flat(as_columns(inertial))
        A_r = bend * (Q3 @ r) + a * r

        def potential(x):
            x = as_columns(x)
            d = self._edge_vectors(x)
            d_d, d_dn = _row_dot(d, d), _row_dot(d, d_n)
            length = np.maximum(np.sqrt(d_d), 1e-12)
            stretch = length - rest_length
            along = d_dn / length_n - length_n              # n_n . (d - d_n)
            moved = d_d - 2.0 * d_dn + dn_dn                 # |d - d_n|^2
            # each edge's force on its end j: (k s / l + damping) d - damping d_n + damp_along along n_n
            on_d = k * stretch / length + damp_all
            on_dn = damp_along * along / length_n - damp_all
            xf = flat(x)
            g = Q3 @ xf
            g *= bend
            g += a * xf                                      # A x
            mean = g + A_r
            mean *= 0.5
            mean -= b
            energy = 0.5 * float(np.dot(k, stretch * stretch) + np.dot(damp_along, along * along)
                                 + np.dot(damp_all, moved)) + ddot(xf - r, mean)
            g -= b
            edge_force = d * on_d[:, None]
            edge_force += d_n * on_dn[:, None]
            g += DT3 @ flat(edge_force)
            grad = g.reshape((n, 3), order="F")
            if self._planes:
                e_contact, g_contact = self.contact(x)
                energy, grad = energy + e_contact, grad + g_contact
            if folds:
                e_folds, g_folds, _, _ = self_contact_penalty(x, folds, self.self_contact.distance, need_hess=False)
                energy, grad = energy + e_folds, grad + g_folds
            if layers is not None:
                e_layers, g_layers, _ = layers.terms(x, x_n, h, need_hess=False)
                energy, grad = energy + e_layers, grad + g_layers
            if friction is not None:
                e_friction, g_friction, _ = coulomb_terms(friction, x, x_n, h, need_hess=False)
                np.add.at(grad, friction.index, g_friction)
                energy += e_friction
            return energy, grad
        return potential

    def _edge_vectors(self, x):
        """[E,3] column-major: x_j - x_i per edge (i, j), of x [N,3] column-major."""
        return (self._D3 @ flat(x)).reshape((len(self.springs.k), 3), order="F")

    def elastic(self, x):
        """(energy, gradient [N,3]) of the membrane and bending alone at x (the reference's
        `ClothModel.energy_grad_hess` prices the same)."""
        energy, grad = self.springs.energy_gradient(x)
        Qu = self.Q @ (x - self.rest)
        return energy + 0.5 * float(np.sum((x - self.rest) * Qu)), grad + Qu

    def contact_planes(self, x, reach, end):
        """`contact_planes` of this sheet's setup."""
        return contact_planes(self.setup, x, reach, end)

    def contacts(self, x) -> bool:
        """Whether any vertex at x lies behind its contact plane."""
        return any(bool(np.any(penalty_contact(x[idx], point, normal, self.mass[idx])[3] > 0))
                   for idx, point, normal, _ in self._planes)

    def contact(self, x):
        """Penalty energy and gradient keeping vertices out of the floor and the colliders."""
        energy, grad = 0.0, np.zeros_like(x)
        for idx, point, normal, _ in self._planes:
            e, g, _, _ = penalty_contact(x[idx], point, normal, self.mass[idx])
            energy += e
            np.add.at(grad, idx, g)
        return energy, grad


def _row_dot(p, q) -> np.ndarray:
    """[E] the dot product of each row of p and q [E,3], a column at a time."""
    out = p[:, 0] * q[:, 0]
    out += p[:, 1] * q[:, 1]
    out += p[:, 2] * q[:, 2]
    return out
