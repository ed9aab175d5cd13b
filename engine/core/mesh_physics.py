"""A triangle mesh's own physics, written once: its edges, the membrane's edge springs, quadratic
bending and penalty contact, each as a term that returns its energy, gradient and Hessian (Coulomb
friction, the same for meshes and lattices: `core/friction.py`).
The reference simulator's cloth (`reference/cloth.py`), the learned engine's full-space sheet
solve (`learned/sheet_layer.py`), its subspace (`learned/subspace.py`) and the evaluation call
these; a test holds the reference's and the sheet solve's sums of them equal.

Positions are [N,3] arrays in any consistent unit; a term's Hessian is given as per-element
3x3 blocks (springs: one per edge, between its two ends), which each caller assembles its way.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .assembly import SparseAssembler, dofs3
from .geometry import face_edges, triangle_areas
from .physics import FLOOR_OMEGA2


def difference_matrix(edges, n) -> sp.csr_matrix:
    """[E,N] sparse: row e gives x[j] - x[i] for edge (i, j)."""
    count = len(edges)
    rows = np.r_[np.arange(count), np.arange(count)]
    return sp.csr_matrix((np.r_[-np.ones(count), np.ones(count)], (rows, np.asarray(edges).T.ravel())),
                         shape=(count, n))


class EdgeSprings:
    """A membrane (stretch and shear through the triangulation) as springs on the mesh's edges:
    E = sum_e k_e / 2 (|x_j - x_i| - L_e)^2, with k_e = stretch * A_e / L_e^2 so that a membrane of
    modulus `stretch` (N/m) stores stretch * area * strain^2 / 2 (A_e: a third of the area of
    each triangle on the edge)."""

    def __init__(self, rest, faces, stretch: float):
        rest = np.asarray(rest, dtype=np.float64)
        faces = np.asarray(faces)
        self.edges, corner = face_edges(faces)
        self.rest_length = np.linalg.norm(rest[self.edges[:, 1]] - rest[self.edges[:, 0]], axis=1)
        edge_area = np.bincount(corner, weights=np.tile(triangle_areas(rest, faces) / 3.0, 3),
                                minlength=len(self.edges))
        self.k = stretch * edge_area / np.maximum(self.rest_length, 1e-12) ** 2
        self.D = difference_matrix(self.edges, len(rest))
        self.DT = self.D.T.tocsr()
        self._assembler = None

    def vectors(self, x):
        """(edge vectors d [E,3], their lengths [E])."""
        d = x[self.edges[:, 1]] - x[self.edges[:, 0]]
        return d, np.maximum(np.sqrt(np.einsum("ei,ei->e", d, d)), 1e-12)

    def energy_forces(self, x):
        """(energy, dE/d(x_j) per edge [E,3]: the gradient is D^T of it, `gradient`)."""
        d, length = self.vectors(x)
        stretch = length - self.rest_length
        return 0.5 * float(np.dot(self.k, stretch ** 2)), (self.k * stretch / length)[:, None] * d

    def gradient(self, edge_force):
        """[N,3] gradient of per-edge forces [E,3] (dE/d(x_j); dE/d(x_i) is its negative)."""
        return self.DT @ edge_force

    def energy_gradient(self, x):
        energy, edge_force = self.energy_forces(x)
        return energy, self.gradient(edge_force)

    def hessian_blocks(self, x):
        """[E,3,3] each spring's Hessian d2E/dx_j^2 at x, its transverse part clamped to zero under
        compression so that it stays positive semi-definite (the edge's 6x6 block is [[H,-H],[-H,H]])."""
        d, length = self.vectors(x)
        nn = d[:, :, None] * d[:, None, :] / (length ** 2)[:, None, None]
        ratio = np.clip(1.0 - self.rest_length / length, 0.0, None)
        return self.k[:, None, None] * (nn + ratio[:, None, None] * (np.eye(3) - nn))

    def hessian(self, x) -> sp.csr_matrix:
        """[3N,3N] the springs' Hessian (coordinates interleaved x,y,z per vertex); its sparsity
        pattern is worked out once."""
        if self._assembler is None:
            self._assembler = SparseAssembler(dofs3(self.edges), 3 * self.D.shape[1])
        H = self.hessian_blocks(x)
        return self._assembler.assemble(np.block([[H, -H], [-H, H]]))


def bending_matrix(rest, faces) -> sp.csr_matrix:
    """Quadratic isometric bending (Bergou et al. 2006) as an [N,N] matrix Q: the energy is
    1/2 u^T Q u per coordinate, u = x - rest, scaled by the bending stiffness by the caller.
    One hinge per edge shared by exactly two triangles (border and non-manifold edges bend
    nothing). Rigid motions cost nothing (Q annihilates them), so it reduces exactly."""
    rest = np.asarray(rest, dtype=np.float64)
    faces = np.asarray(faces)
    n = len(rest)
    if not len(faces):
        return sp.csr_matrix((n, n))
    edges, corner = face_edges(faces)
    opposite = np.concatenate([faces[:, 2], faces[:, 0], faces[:, 1]])
    counts = np.bincount(corner, minlength=len(edges))
    order = np.argsort(corner, kind="stable")
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    hinge = np.nonzero(counts == 2)[0]
    o0, o1 = opposite[order[start[hinge]]], opposite[order[start[hinge] + 1]]
    i0, i1 = edges[hinge, 0], edges[hinge, 1]

    def cot(a, b):
        return np.einsum("ij,ij->i", a, b) / np.maximum(np.linalg.norm(np.cross(a, b), axis=1), 1e-12)

    x0, x1, x2, x3 = rest[i0], rest[i1], rest[o0], rest[o1]
    e0, e1, e2, e3, e4 = x1 - x0, x2 - x0, x3 - x0, x2 - x1, x3 - x1
    c01, c02, c03, c04 = cot(e0, e1), cot(e0, e2), cot(-e0, e3), cot(-e0, e4)
    K = np.stack([c03 + c04, c01 + c02, -c01 - c03, -c02 - c04], axis=1)
    area = 0.5 * (np.linalg.norm(np.cross(e0, e1), axis=1) + np.linalg.norm(np.cross(e0, e2), axis=1))
    Q = 3.0 / np.maximum(area, 1e-12)[:, None, None] * K[:, :, None] * K[:, None, :]
    idx = np.stack([i0, i1, o0, o1], axis=1)
    rows = np.repeat(idx, 4, axis=1).ravel()
    cols = np.tile(idx, (1, 4)).ravel()
    return sp.csr_matrix((Q.ravel(), (rows, cols)), shape=(n, n))


def penalty_contact(x, point, normal, mass):
    """The floor's and colliders' penalty spring on the vertices behind their contact planes:
    E = sum k_i / 2 depth_i^2 with k_i = mass_i * FLOOR_OMEGA2 (a 160 Hz spring) and depth the
    distance behind the plane through `point` with outward `normal`. Returns (energy, gradient
    [P,3], Hessian blocks [P,3,3] = k n n^T, depth [P]); vertices in front of their plane give zeros."""
    depth = np.maximum(np.einsum("pi,pi->p", point - x, normal), 0.0)
    k = mass * FLOOR_OMEGA2
    grad = -(k * depth)[:, None] * normal
    hess = (k * (depth > 0))[:, None, None] * normal[:, :, None] * normal[:, None, :]
    return 0.5 * float(np.sum(k * depth ** 2)), grad, hess, depth
