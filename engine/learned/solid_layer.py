"""The fine level of a solid: its embedding lattice, iterated in full space where the smooth
state space cannot follow (issue 55).

A solid's state space is a few dozen smooth handles over its embedding lattice. Where the body is
touched that is the limit: a ball rolling on the floor cannot flatten its contact patch, a poke
spreads over a whole side, a pinned body cannot hinge at its pins (docs/DESIGN_NOTES.md, "Contact
and the floor"). So, as a sheet's layer does (`sheet_layer.py`), a solid can take two moves per
substep:

1. the latent step predicts how what the subspace holds moves, inertia the rest
   (`runtime.NeurokRun._layer_substep`);
2. quasi-Newton iterations on the lattice's nodes themselves, started at that prediction,
   minimise the substep's incremental potential in full space,

       E(x) = 1/(2h^2) |x - x_n - h v_n|_M^2 + Y sum_g w_g psi(F_g(x)) + Rayleigh damping
              - f . x + pins + floor and colliders (penalty) + Coulomb friction,

   with the model's own strain energy density psi (`strain_energy.StrainEnergy.solid`, the one
   the latent step integrates: neo-Hookean and its learned correction) by selective reduced
   integration over each trilinear cell: its shear part at 8 Gauss points (one point would leave
   the cells' hourglass modes free), its volume part (lambda) at the centre (at 8 points a nearly
   incompressible jelly's cells lock); the Rayleigh damping air M + beta K with K taken at x_n (as
   the reference takes it); and the contact and friction laws of `core.mesh_physics` and
   `core.friction` felt by the surface vertices W x (the body meets the floor, not its lattice).
   The first inverse Hessian of the L-BFGS iterations is a prefactored solve per coordinate with
   inertia, pins, an isotropic rest stiffness (the Dirichlet energy of the cells times
   (2 mu + lambda) Y: it commutes with a turn of the whole body, so a body that has rolled over is
   preconditioned as well as at rest) and the substep's contact springs.

The surface follows the nodes by the lattice's trilinear weights, as the latent step decodes it.

Experimental and off by default (`solid_layer="on"`): it takes the poked torus from 0.83x to 0.48x
hold-still against a reference with the body alone on the floor, at 4-7x the frame time, but on the
subspace's own lattice a thrown jelly ball still rolls on (docs/DESIGN_NOTES.md §5,
`experiments/solid_fine_level.py`).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..core.friction import coordinate_stiffness, coulomb_terms, friction_contacts
from ..core.mesh_physics import penalty_contact
from ..core.fields import total_accel, vertex_normals
from ..core.geometry import bbox_diagonal
from ..core.physics import FLOOR_OMEGA2, carried_vertex_masses, pin_stiffness
from ..core.colliders import contact_planes
from .quasi_newton import LAYER_MEMORY, PrefactoredSolve, as_columns, coordinate_solves, quasi_newton
from .subspace import build_lattice, held_nodes, held_points, trilinear_gradients

# L-BFGS iterations per substep: at 20 a thrown jelly ball stopped short, held back by friction in
# iterations left unfinished (experiments/solid_fine_level.py)
SOLID_LAYER_ITERATIONS = 40
GAUSS = 0.5 + 0.5 / np.sqrt(3.0) * np.array([-1.0, 1.0])
GAUSS_POINTS = np.array([[a, b, c] for a in GAUSS for b in GAUSS for c in GAUSS])   # [8,3], 0..1 in a cell


def strain_matrix(cell_nodes, n, gradients) -> sp.csr_matrix:
    """B [9 G, 3 n] with vec F_g = B x for column-major x (each coordinate's column in turn), G =
    cells x Gauss points: F_ij = sum_a x_a,i dN_a/dX_j (`subspace.solid_local_map`'s order)."""
    C, P = len(cell_nodes), len(gradients)
    rows, cols, vals = [], [], []
    sample = (np.arange(C)[:, None] * P + np.arange(P)[None, :])           # [C,P]
    for i in range(3):
        for j in range(3):
            row = np.broadcast_to((9 * sample + 3 * i + j)[:, :, None], (C, P, 8))
            col = np.broadcast_to((i * n + cell_nodes)[:, None, :], (C, P, 8))
            val = np.broadcast_to(gradients[None, :, :, j], (C, P, 8))
            rows.append(row.ravel()); cols.append(col.ravel()); vals.append(val.ravel())
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(9 * C * P, 3 * n))


class SolidLayer:
    """The full-space fine level of one solid, on its embedding lattice, in metres."""

    def __init__(self, setup, scene, iterations: int = SOLID_LAYER_ITERATIONS, memory: int = LAYER_MEMORY,
                 cells: int | None = None):
        """`scene`: the run's `LatentScene` (its subspace's lattice and the model's material);
        `cells`: a lattice of its own with this many cells along the longest side (None: the
        subspace's), the latent step's moves carried to its nodes by the subspace lattice's
        trilinear weights (`latent_moves`)."""
        self.setup, self.scene, self.iterations, self.memory = setup, scene, iterations, memory
        sub = scene.sub
        coarse = scene.resolution.lattice_cells
        lattice = build_lattice(sub.rest, sub.faces, cells or coarse)
        if cells in (None, coarse):
            assert len(lattice.nodes) == len(sub.nodes), "the subspace's own lattice"
            self.latent_moves = sp.identity(len(sub.nodes), format="csr")
        else:
            self.latent_moves = build_lattice(sub.rest, sub.faces, coarse).weights_at(lattice.nodes)
        self.rest = sub.norm.inverse(lattice.nodes)                         # [n,3] metres
        self.W = lattice.W.tocsr()                                           # vertices <- nodes
        self.WT = self.W.T.tocsr()
        size = lattice.cell_size * sub.norm.scale
        n = len(self.rest)
        material = setup.material
        volume = lattice.inside_share * size ** 3                          # [C] m^3
        # selective reduced integration: the shear part of the density at 8 Gauss points a cell, its
        # volume part (lambda) at the cell's centre, so a nearly incompressible trilinear cell does not lock
        self.samples = []                                                   # (B, B^T, Y w, mu, lambda)
        for points, mu, lam in ((GAUSS_POINTS, scene.mu, 0.0), (np.full((1, 3), 0.5), 0.0, scene.lam)):
            B = strain_matrix(lattice.cell_nodes, n, trilinear_gradients(size, points))
            weight = material.stiffness * np.repeat(volume / len(points), len(points))   # psi is per unit stiffness
            self.samples.append((B, B.T.tocsr(), weight, mu, lam))
        mass = np.zeros(n)
        np.add.at(mass, lattice.cell_nodes.ravel(), np.repeat(material.density * lattice.inside_share * size ** 3 / 8, 8))
        self.mass = mass
        # kg per surface vertex, the reference's rule (the floor's penalty and painted forces go by it)
        self.vertex_mass = carried_vertex_masses(self.W, mass)
        # the pins hold the lattice under a pinned face whole, as the subspace's handles do
        held = np.asarray(setup.pin_weight, np.float64)
        node_held = held_nodes(*held_points(lattice, sub.rest, sub.faces, held))
        self.pin_k = pin_stiffness(np.zeros(n) if node_held is None else node_held, mass, material,
                                   bbox_diagonal(self.rest))   # [n]
        self._pinned = np.nonzero(held > 0)[0]
        self.beta, self.air = material.damping, material.air_damping      # Rayleigh D = air M + beta K
        # the isotropic rest stiffness: Y (2 mu + lambda) sum_g w_g |F_g - I|^2 / 2 has Hessian L (x) I_3
        B, BT, weight, _, _ = self.samples[0]
        iso = sp.diags(np.repeat(weight * (2.0 * scene.mu + scene.lam), 9))
        self.L_iso = (BT @ iso @ B).tocsr()[:n, :n]                         # one coordinate's block
        self._systems = {}
        self._planes = []
        if setup.floor_z is not None:     # the floor's plane at every vertex (`_contact`)
            self._floor_plane = (np.tile([0.0, 0.0, setup.floor_z], (len(sub.rest), 1)),
                                 np.tile([0.0, 0.0, 1.0], (len(sub.rest), 1)))

    # ----- the preconditioner

    def _system(self, h):
        """The substep's rest system [n,n], the same for the three coordinates: inertia, the
        isotropic stiffness with its damping, and the pins' springs."""
        if h not in self._systems:
            diagonal = self.mass / h ** 2 + self.air * self.mass / h + self.pin_k
            self._systems[h] = (sp.diags(diagonal) + (1.0 + self.beta / h) * self.L_iso).tocsc()
        return self._systems[h]

    def _precondition(self, h, planes, friction, surface_n, surface_guess):
        """The prefactored solves of the rest system with the contacts' springs, one per
        coordinate: the floor's penalty (and a collider's) acts along the contact's normal and
        friction across it, each hundreds of times a node's inertia, and iterations that do not
        see them let a body sink centimetres into the floor. A contact spring k_n n n^T + k_t
        (I - n n^T) enters each coordinate by its diagonal; friction's k_t is its majorizer's
        curvature at the guess's slide (up to 2 mu lambda / eps while static, mu lambda / |slide|
        sliding: `core.friction.coordinate_stiffness`)."""
        k = np.zeros((len(self.vertex_mass), 3))
        penalty = self.vertex_mass * FLOOR_OMEGA2
        if self.setup.floor_z is not None:          # the vertices the floor may meet this substep
            k[:, 2] += np.where(self._near_floor, penalty, 0.0)
        for idx, _, normal, _ in planes:
            np.add.at(k, idx, penalty[idx, None] * normal ** 2)
        if friction is not None:
            np.add.at(k, friction.index, coordinate_stiffness(friction, surface_guess, surface_n, h))
        A = self._system(h)
        return coordinate_solves(k, lambda d: PrefactoredSolve(A + self.WT @ sp.diags(d) @ self.W if d.any() else A))

    # ----- the step

    def forces(self, frame: int, x, v) -> np.ndarray:
        """Gravity on the nodes, and painted accelerations and force fields at the state (x, v) of
        the nodes felt by the vertices and carried to the nodes, in newtons [n,3] (the reference's rule)."""
        s = self.setup
        accel = np.asarray(s.external_accel(frame), dtype=np.float64)
        if s.effectors:
            y = self.W @ x
            accel = accel + total_accel(s.effectors, frame, y, self.W @ v, vertex_normals(y, s.faces), surface=False)
        return self.mass[:, None] * np.asarray(s.gravity, np.float64)[None, :] + self.WT @ (self.vertex_mass[:, None] * accel)

    def step(self, frame: int, end: float, x_n, v_n, h: float, guess=None, history=()):
        """(x, v) of the nodes after a substep h from (x_n, v_n), iterating from `guess` (default:
        inertia); `end` is the fractional frame the substep ends at (where colliders are taken)."""
        x_n = np.asarray(x_n, dtype=np.float64)
        v_n = np.asarray(v_n, dtype=np.float64)
        start = x_n + h * v_n if guess is None else np.array(guess, dtype=np.float64)
        y_start = self.W @ start
        reach = 2.0 * max(float(np.abs(start - x_n).max()), h * float(np.abs(v_n).max())) + 1e-3
        self._planes = contact_planes(self.setup, y_start, reach, end, floor=False)   # colliders' (the floor's: `_contact`)
        surface_n = self.W @ x_n
        if self.setup.floor_z is not None:
            self._near_floor = np.minimum(y_start[:, 2], surface_n[:, 2]) < self.setup.floor_z + reach
        # Coulomb contacts found at the substep's start (lagged normal forces: the reference's law)
        begin = end - h / self.setup.dt
        friction = friction_contacts(self.setup, surface_n, self.vertex_mass, begin, begin, end)
        energy = self.incremental_potential(frame, x_n, v_n, h, friction)
        history = list(history)
        for fallback in (x_n + h * v_n, x_n):       # a guess that inverts a cell: inertia, else the start
            if np.isfinite(energy(start)[0]):
                break
            start = fallback
        x = quasi_newton(energy, as_columns(start), self._precondition(h, self._planes, friction, surface_n,
                                                                       self.W @ start),
                         self.iterations, self.memory, history)
        return x, (x - x_n) / h, tuple(history)

    def pin_targets(self, frame: int) -> np.ndarray:
        """Where the pins hold the nodes at `frame` [n,3]: the rest nodes moved by the affine map
        that best carries the pinned vertices to their targets (exact for pins that stay or move
        as one rigid or affine handle)."""
        if not len(self._pinned):
            return self.rest
        rest = np.asarray(self.setup.rest, np.float64)[self._pinned]
        moved = np.asarray(self.setup.pin_target(frame), np.float64)[self._pinned] - rest
        affine = np.linalg.lstsq(np.c_[rest, np.ones(len(rest))], moved, rcond=None)[0]
        return self.rest + np.c_[self.rest, np.ones(len(self.rest))] @ affine

    def _density(self, y, mu, lam, need_hess=False):
        """The model's density (`StrainEnergy.solid`) at local coordinates y [K,9] with Lame mu, lambda."""
        t = torch.as_tensor(y, dtype=torch.float64)
        psi, grad, hess = self.scene.model.energy.solid(t, self.scene.features, mu, lam, need_hess, True)
        return (psi.numpy(), grad.numpy(), None if hess is None else hess.numpy())

    def incremental_potential(self, frame, x_n, v_n, h, friction=None):
        """E(x) -> (energy, gradient [n,3]) of the substep (module docstring), up to a constant;
        `friction`: the substep's Coulomb contacts (`core.friction.FrictionContacts`)."""
        diagonal = self.mass / h ** 2 + self.air * self.mass / h + self.pin_k   # inertia, the air's drag, pins
        b = as_columns((self.mass / h ** 2)[:, None] * (x_n + h * v_n) + (self.air * self.mass / h)[:, None] * x_n
                       + self.forces(frame, x_n, v_n) + self.pin_k[:, None] * self.pin_targets(frame + 1))
        flat_n = x_n.reshape(-1, order="F")
        at_start = []                  # per sample set: y at x_n and the damping's matrices (Rayleigh K at x_n)
        for B, _, weight, mu, lam in self.samples:
            y_n = (B @ flat_n).reshape(-1, 9)
            stiffness_n = self._density(y_n, mu, lam, need_hess=True)[2]
            at_start.append((y_n, (self.beta / h) * weight[:, None, None] * stiffness_n))
        surface_n = self.W @ x_n

        def potential(x):
            x = as_columns(x)
            flat = x.reshape(-1, order="F")
            energy, force = 0.0, np.zeros(len(flat))
            for (B, BT, weight, mu, lam), (y_n, damping) in zip(self.samples, at_start):
                y = (B @ flat).reshape(-1, 9)
                psi, dpsi, _ = self._density(y, mu, lam)
                if not np.all(np.isfinite(psi)):
                    return np.inf, np.zeros_like(x)
                dy = y - y_n
                ddy = np.einsum("gij,gj->gi", damping, dy)
                energy += float(weight @ psi) + 0.5 * float(np.sum(dy * ddy))
                force += BT @ (weight[:, None] * dpsi + ddy).ravel()
            grad = force.reshape((-1, 3), order="F")
            energy += 0.5 * float(np.sum(diagonal[:, None] * x * x)) - float(np.sum(b * x))
            grad = grad + diagonal[:, None] * x - b
            surface = self.W @ x
            e_c, g_c = self._contact(surface)
            if friction is not None:
                e_f, g_f, _ = coulomb_terms(friction, surface, surface_n, h, need_hess=False)
                e_c += e_f
                np.add.at(g_c, friction.index, g_f)
            return energy + e_c, as_columns(grad + self.WT @ g_c)
        return potential

    def _contact(self, surface):
        """The penalty energy and gradient [N,3] of the floor, felt by every vertex at every
        evaluation (a plane costs nothing to test, and a body rolling into it brings new vertices
        down), and of the colliders' tangent planes found at the substep's guess."""
        energy, grad = 0.0, np.zeros_like(surface)
        if self.setup.floor_z is not None:
            point, normal = self._floor_plane
            energy, grad, _, _ = penalty_contact(surface, point, normal, self.vertex_mass)
        for idx, point, normal, _ in self._planes:
            e, g, _, _ = penalty_contact(surface[idx], point, normal, self.vertex_mass[idx])
            energy += e
            np.add.at(grad, idx, g)
        return energy, grad

    def positions(self, x) -> np.ndarray:
        """The surface vertices [N,3] of node positions x."""
        return self.W @ x
