"""The complementary full-space layer of a sheet: what the latent space cannot hold.

A smooth linear subspace locks a sheet: it cannot hinge at its pinned edge, crease, or hang over
a table's edge without stretching (docs/DESIGN_NOTES.md, "Sheets"). So a sheet takes two moves
per substep:

1. the latent step (the learned Lagrangian dynamics in q, running its own course) predicts how
   what the subspace holds moves; inertia predicts the rest (`runtime.NeurokRun._layer_substep`).
   While the sheet touches the floor or a collider the iterations start from inertia alone: the
   latent step feels contact at a few hundred samples of a smooth subspace, and its prediction
   pulled a cloth on a table towards a tent (0.205x hold-still against 0.133x);
2. a few quasi-Newton iterations on the mesh itself, started at that prediction, minimise the
   sheet's incremental potential in full space,

       E(x) = 1/(2h^2) |x - x_n - h v_n|_M^2 + sum_e k_e/2 (|x_j - x_i| - L_e)^2
              + 1/2 (x - X)^T Q (x - X) + pins - f . x + damping + contact,

   the membrane (edge springs) and quadratic bending (Bergou et al. 2006) that the reference
   simulator prices, with its Rayleigh damping (the springs' stiffness at x_n) and air drag.
   The iterations are L-BFGS whose first guess of the inverse Hessian is one prefactored sparse
   solve with the rest state's system, the same for the three coordinates (Liu et al. 2017,
   "Quasi-Newton methods for real-time simulation of hyperelastic materials"); the curvature
   pairs are kept from substep to substep. Floor and colliders push with the reference's
   penalty spring against each vertex's tangent plane, found once per substep; friction is
   Coulomb's, applied to the velocity the substep ends with.

Measured (experiments/sheet_layer_designs.py): the flag's far edge falls 46 mm in the first
four frames of its gust where the reference's falls 53 and the latent step alone 26; projective
dynamics (local-global) with the same prediction reached 28 mm at 150 iterations, which is why
the iterations are quasi-Newton.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..core.colliders import signed_distance
from ..core.fields import total_accel, vertex_normals
from ..core.geometry import lumped_vertex_areas, triangle_areas
from ..core.physics import FLOOR_OMEGA2, pin_stiffness
from .subspace import bending_matrix

LAYER_ITERATIONS = 20          # L-BFGS iterations per substep (10: the flag's far edge fell 31 of 53 mm)
LAYER_MEMORY = 10              # curvature pairs kept
# Above this many vertices "auto" at medium detail leaves the layer off: it costs about 85 ms a
# frame per 1,000 vertices of one busy core (45 ms of its CPU time), where the latent step alone
# takes about 15 ms at 10,000.
SHEET_LAYER_MAX_VERTICES = 4000
LAYER_CHOICES = ("auto", "on", "off")


def layer_wanted(choice: str, setup) -> bool:
    """Whether a sheet run takes the full-space layer: "on", "off", or "auto", which follows the
    setup's level of detail: never at low, up to SHEET_LAYER_MAX_VERTICES at medium, always at high."""
    if choice not in LAYER_CHOICES:
        raise ValueError(f"unknown sheet layer choice '{choice}' ({', '.join(LAYER_CHOICES)})")
    if choice != "auto":
        return choice == "on"
    return setup.detail == "high" or (setup.detail == "medium" and setup.num_vertices <= SHEET_LAYER_MAX_VERTICES)


def unique_edges(faces):
    """(edges [E,2], the edge of each face corner [3F]) of a triangle mesh."""
    e = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    edges, inverse = np.unique(e, axis=0, return_inverse=True)
    return edges, inverse.ravel()


def vertex_masses(setup) -> np.ndarray:
    """kg per vertex: the setup's, else areal density times the vertex's share of the area."""
    if setup.vertex_mass is not None:
        return np.asarray(setup.vertex_mass, dtype=np.float64)
    area = lumped_vertex_areas(np.asarray(setup.rest, np.float64), np.asarray(setup.faces))
    area = np.where(area > 0, area, max(area.mean(), 1e-12) if area.any() else 1e-6)
    return setup.material.density * area


class SheetLayer:
    """The full-space layer of one sheet, in metres."""

    def __init__(self, setup, iterations: int = LAYER_ITERATIONS):
        self.setup, self.iterations = setup, iterations
        rest = np.asarray(setup.rest, dtype=np.float64)
        faces = np.asarray(setup.faces)
        material = setup.material
        self.rest = rest
        self.mass = vertex_masses(setup)
        self.edges, inverse = unique_edges(faces)
        self.rest_length = np.linalg.norm(rest[self.edges[:, 1]] - rest[self.edges[:, 0]], axis=1)
        edge_area = np.bincount(inverse, weights=np.tile(triangle_areas(rest, faces) / 3.0, 3),
                                minlength=len(self.edges))
        # a membrane of modulus `stiffness` (N/m) stores stiffness * area * strain^2 / 2 per edge
        self.k = material.stiffness * edge_area / np.maximum(self.rest_length, 1e-12) ** 2
        count = len(self.edges)
        self.D = sp.csr_matrix((np.r_[-np.ones(count), np.ones(count)],
                                (np.r_[np.arange(count), np.arange(count)], self.edges.T.ravel())),
                               shape=(count, len(rest)))          # edge vectors: D x
        self.Q = bending_matrix(rest, faces) * material.bending
        diagonal = float(np.linalg.norm(np.ptp(rest, axis=0))) or 1.0
        # the pins hold the whole sheet: their springs share its mass, not only their vertices' own
        # (with their own, a wind-blown sheet of 400 vertices pulled its pinned edge 1.5 mm)
        weight = np.asarray(setup.pin_weight, np.float64)
        held_share = float(self.mass[weight > 0].sum() / self.mass.sum()) if (weight > 0).any() else 1.0
        self.pin_k = pin_stiffness(weight, self.mass / min(1.0, held_share), material, diagonal)
        self.air = material.air_damping
        self.beta = material.damping
        self.colliders = list(setup.colliders or [])
        self.floor_friction = setup.floor_friction
        self._factors, self._history = {}, {}      # per substep length
        self._planes = []

    def _factor(self, h):
        """The prefactored rest-state system of a substep h (L-BFGS's first inverse Hessian)."""
        if h not in self._factors:
            inertia = self.mass / h ** 2 + self.air * self.mass / h
            A = sp.diags(inertia + self.pin_k) + self.D.T @ sp.diags(self.k) @ self.D + self.Q
            self._factors[h] = spla.splu(A.tocsc(), permc_spec="MMD_AT_PLUS_A")
            self._history[h] = []
        return self._factors[h]

    def forces(self, frame: int, x, v) -> np.ndarray:
        """Gravity, painted accelerations and force fields at the state (x, v), in newtons [N,3]."""
        s = self.setup
        a = np.asarray(s.external_accel(frame), dtype=np.float64) + np.asarray(s.gravity)[None, :]
        if s.effectors:
            a = a + total_accel(s.effectors, frame, x, v, vertex_normals(x, s.faces), surface=True)
        return self.mass[:, None] * a

    def step(self, frame: int, end: float, x_n, v_n, guess, h: float):
        """(x, v) after a substep h from (x_n, v_n), iterating from `guess`; `end` is the fractional
        frame the substep ends at (where colliders are taken)."""
        guess = np.array(guess, dtype=np.float64)
        reach = 2.0 * max(float(np.abs(guess - x_n).max()), h * float(np.abs(v_n).max())) + 1e-3
        self._planes = self.contact_planes(guess, reach, end)
        factor = self._factor(h)
        energy = self.incremental_potential(frame, x_n, v_n, h)
        inertial = x_n + h * v_n
        start = inertial if self.contacts(inertial) else guess
        x = lbfgs(energy, start, factor.solve, self.iterations, self._history[h])
        v = self.friction((x - x_n) / h, x, h)
        return x_n + h * v, v

    def incremental_potential(self, frame, x_n, v_n, h):
        """E(x) -> (energy, gradient [N,3]) of the substep from (x_n, v_n) (module docstring), with
        the Rayleigh damping's stiffness part taken at x_n (as the reference takes it)."""
        target = np.asarray(self.setup.pin_target(frame + 1), dtype=np.float64)
        inertial = x_n + h * v_n
        force = self.forces(frame, x_n, v_n)
        inertia_mass = self.mass[:, None] / h ** 2
        air_mass = self.air / h * self.mass[:, None]
        damp_edges = self.edge_hessians(x_n) * (self.beta / h)
        beta_h = self.beta / h
        pinned = np.nonzero(self.pin_k > 0)[0]
        pin_k = self.pin_k[pinned][:, None]
        e0, e1 = self.edges[:, 0], self.edges[:, 1]

        def potential(x):
            d = x[e1] - x[e0]
            length = np.maximum(np.linalg.norm(d, axis=1), 1e-12)
            stretch = length - self.rest_length
            u, dv = x - self.rest, x - x_n
            Qu, Qdv = self.Q @ u, self.Q @ dv
            ddv = dv[e1] - dv[e0]
            damped = np.einsum("eij,ej->ei", damp_edges, ddv)
            pull, dx = x[pinned] - target[pinned], x - inertial
            energy = (0.5 * np.sum(inertia_mass * dx ** 2) + 0.5 * np.dot(self.k, stretch ** 2) + 0.5 * np.sum(u * Qu)
                      + 0.5 * np.sum(pin_k * pull ** 2) - np.sum(force * x) + 0.5 * np.sum(air_mass * dv ** 2)
                      + 0.5 * np.sum(damped * ddv) + 0.5 * beta_h * np.sum(dv * Qdv))
            edge_force = (self.k * stretch / length)[:, None] * d + damped
            grad = inertia_mass * dx + Qu + beta_h * Qdv - force + air_mass * dv + self.D.T @ edge_force
            grad[pinned] += pin_k * pull
            e_contact, g_contact = self.contact(x)
            return energy + e_contact, grad + g_contact
        return potential

    def edge_hessians(self, x):
        """[E,3,3] each spring's Hessian at x, its transverse part clamped at compression (PSD)."""
        d = x[self.edges[:, 1]] - x[self.edges[:, 0]]
        length = np.maximum(np.linalg.norm(d, axis=1), 1e-12)
        nn = d[:, :, None] * d[:, None, :] / (length ** 2)[:, None, None]
        ratio = np.clip(1.0 - self.rest_length / length, 0.0, None)
        return self.k[:, None, None] * (nn + ratio[:, None, None] * (np.eye(3) - nn))

    def contact_planes(self, x, reach, end):
        """[(vertex indices, a point on the plane [A,3], outward normal [A,3], Coulomb coefficient)]:
        each vertex within `reach` (metres) of a collider's shell meets that collider's tangent
        plane at its closest point over this substep (found once, at the substep's guess x)."""
        planes = []
        floor = self.setup.floor_z
        if floor is not None:
            near = np.nonzero(x[:, 2] < floor + reach)[0]
            if len(near):
                normal = np.zeros((len(near), 3))
                normal[:, 2] = 1.0
                planes.append((near, np.full((len(near), 3), [0.0, 0.0, floor]), normal, self.floor_friction))
        for c in self.colliders:
            verts = c.at(end)
            grow = c.thickness_outer + reach
            inside_box = np.nonzero(np.all((x >= verts.min(axis=0) - grow) & (x <= verts.max(axis=0) + grow), axis=1))[0]
            if not len(inside_box):
                continue
            sd, normal, closest = signed_distance(x[inside_box], verts, c.faces, c.closed)
            keep = sd < grow
            if keep.any():
                shell = closest[keep] + c.thickness_outer * normal[keep]
                planes.append((inside_box[keep], shell, normal[keep], c.friction))
        return planes

    def contacts(self, x):
        """[(vertex indices, depth behind the contact plane, normal, mu)] of the substep's planes."""
        found = []
        for idx, point, normal, mu in self._planes:
            depth = np.einsum("pi,pi->p", point - x[idx], normal)
            inside = depth > 0
            if inside.any():
                found.append((idx[inside], depth[inside], normal[inside], mu))
        return found

    def contact(self, x):
        """Penalty energy and gradient keeping vertices out of the floor and the colliders: the
        reference's stiff spring, k = mass * FLOOR_OMEGA2."""
        energy, grad = 0.0, np.zeros_like(x)
        for idx, depth, normal, _ in self.contacts(x):
            k = self.mass[idx] * FLOOR_OMEGA2
            energy += 0.5 * float(np.sum(k * depth ** 2))
            np.add.at(grad, idx, -(k * depth)[:, None] * normal)
        return energy, grad

    def friction(self, v, x, h):
        """Velocities after Coulomb friction: each contact's tangential speed is reduced by mu
        times the speed its normal force gives over the substep (never reversed)."""
        for idx, depth, normal, mu in self.contacts(x):
            if mu <= 0:
                continue
            vi = v[idx]
            tangential = vi - np.einsum("pi,pi->p", vi, normal)[:, None] * normal
            speed = np.linalg.norm(tangential, axis=1)
            loss = mu * FLOOR_OMEGA2 * depth * h
            keep = np.where(speed > loss, 1.0 - loss / np.maximum(speed, 1e-300), 0.0)
            v[idx] = vi - (1.0 - keep)[:, None] * tangential
        return v


def lbfgs(potential, x, precondition, iterations, history, memory=LAYER_MEMORY):
    """Minimise `potential` (x -> energy, gradient) from x by L-BFGS whose initial inverse Hessian
    is `precondition` (a prefactored solve with the rest-state system: Liu et al. 2017), with a
    backtracking line search. `history` holds the curvature pairs (kept between calls).
    A fixed count: a tolerance of 1e-5 of the diagonal per step stopped none of the flag's
    substeps before 40 iterations."""
    energy, grad = potential(x)
    for _ in range(iterations):
        step = -_two_loop(grad, history, precondition)
        slope = float(np.vdot(grad, step))
        if slope >= 0:                      # not a descent direction: the preconditioned gradient is
            step = -precondition(grad)
            slope = float(np.vdot(grad, step))
        t = 1.0
        while True:
            trial = x + t * step
            e_trial, g_trial = potential(trial)
            if e_trial <= energy + 1e-4 * t * slope or t < 1e-4:
                break
            t *= 0.5
        s, y = trial - x, g_trial - grad
        sy = float(np.vdot(s, y))
        if sy > 1e-300:
            history.append((s, y, 1.0 / sy))
            del history[:-memory]
        x, energy, grad = trial, e_trial, g_trial
    return x


def _two_loop(grad, history, precondition):
    """L-BFGS's product of its inverse-Hessian estimate with the gradient."""
    q = grad.copy()
    alphas = []
    for s, y, rho in reversed(history):
        alpha = rho * np.vdot(s, q)
        q -= alpha * y
        alphas.append(alpha)
    r = precondition(q)
    for (s, y, rho), alpha in zip(history, reversed(alphas)):
        r += (alpha - rho * np.vdot(y, r)) * s
    return r
