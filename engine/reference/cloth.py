"""Cloth on the mesh itself: edge springs for stretch and shear (through the triangulation) and
the quadratic isometric bending model of Bergou et al. 2006, both from `core.mesh_physics`
(the learned engine's sheet solve prices the same terms)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..core.mesh_physics import EdgeSprings, bending_matrix


class ClothModel:
    """Edge springs (stretch + shear through the triangulation) and quadratic bending."""

    def __init__(self, rest, faces, stretch, bending):
        self.rest = np.asarray(rest, dtype=np.float64)
        self.springs = EdgeSprings(self.rest, faces, stretch)
        self.edges = self.springs.edges
        self.bending = sp.kron(bending_matrix(self.rest, faces) * bending, sp.identity(3), format="csr")

    def energy_grad_hess(self, y, need_hess=True):
        energy, grad = self.springs.energy_gradient(y)
        grad = grad.ravel()
        u = (y - self.rest).ravel()
        bu = self.bending @ u
        energy += 0.5 * float(u @ bu)
        grad = grad + bu
        if not need_hess:
            return energy, grad, None
        return energy, grad, self.springs.hessian(y) + self.bending
