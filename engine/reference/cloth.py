"""Cloth on the mesh itself: edge springs for stretch and shear (through the triangulation) and
the quadratic isometric bending model of Bergou et al. 2006."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..core.geometry import triangle_areas
from .assembly import SparseAssembler, dofs3


class ClothModel:
    """Edge springs (stretch + shear through the triangulation) and quadratic bending."""

    def __init__(self, rest, faces, stretch, bending):
        edges = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
        self.edges, inv = np.unique(edges, axis=0, return_inverse=True)
        inv = inv.ravel()
        self.rest_len = np.linalg.norm(rest[self.edges[:, 1]] - rest[self.edges[:, 0]], axis=1)
        area = triangle_areas(rest, faces)
        edge_area = np.bincount(inv, weights=np.tile(area / 3.0, 3), minlength=len(self.edges))
        # a membrane of modulus `stretch` (N/m) stores ~ stretch * area * strain^2 / 2 per edge
        self.k = stretch * edge_area / np.maximum(self.rest_len, 1e-12) ** 2
        self.assembler = SparseAssembler(dofs3(self.edges), rest.size)
        self.bending = self._bending_matrix(rest, faces, self.edges, inv) * bending
        self.rest = rest

    @staticmethod
    def _bending_matrix(x, faces, edges, inv):
        n = len(x)
        f_of_edge = [[] for _ in range(len(edges))]
        for fi, e in enumerate(inv.reshape(3, -1).T):
            for ei in e:
                f_of_edge[ei].append(fi)
        rows, cols, vals = [], [], []

        def cot(a, b):
            return np.dot(a, b) / max(np.linalg.norm(np.cross(a, b)), 1e-12)

        for ei, fs in enumerate(f_of_edge):
            if len(fs) != 2:
                continue
            i0, i1 = edges[ei]
            o = [int(np.setdiff1d(faces[f], [i0, i1])[0]) for f in fs]
            x0, x1, x2, x3 = x[i0], x[i1], x[o[0]], x[o[1]]
            e0, e1, e2, e3, e4 = x1 - x0, x2 - x0, x3 - x0, x2 - x1, x3 - x1
            c01, c02 = cot(e0, e1), cot(e0, e2)
            c03, c04 = cot(-e0, e3), cot(-e0, e4)
            K = np.array([c03 + c04, c01 + c02, -c01 - c03, -c02 - c04])
            a = 0.5 * (np.linalg.norm(np.cross(e0, e1)) + np.linalg.norm(np.cross(e0, e2)))
            Q = 3.0 / max(a, 1e-12) * np.outer(K, K)
            idx = [i0, i1, o[0], o[1]]
            for p in range(4):
                for q in range(4):
                    rows.append(idx[p]); cols.append(idx[q]); vals.append(Q[p, q])
        Q = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
        return sp.kron(Q, sp.identity(3), format="csr")

    def energy_grad_hess(self, y, need_hess=True):
        d = y[self.edges[:, 1]] - y[self.edges[:, 0]]
        length = np.maximum(np.linalg.norm(d, axis=1), 1e-12)
        stretch = length - self.rest_len
        energy = 0.5 * float(np.dot(self.k, stretch ** 2))
        f = (self.k * stretch / length)[:, None] * d                      # dE/d(x1)
        grad = np.zeros(y.size)
        g_e = np.concatenate([-f, f], axis=1)
        np.add.at(grad, dofs3(self.edges).ravel(), g_e.ravel())
        u = (y - self.rest).ravel()
        bu = self.bending @ u
        energy += 0.5 * float(u @ bu)
        grad += bu
        if not need_hess:
            return energy, grad, None
        nn = d[:, :, None] * d[:, None, :] / (length ** 2)[:, None, None]
        ratio = np.clip(1.0 - self.rest_len / length, 0.0, None)       # clamp: compression -> PSD
        H = self.k[:, None, None] * (nn + ratio[:, None, None] * (np.eye(3) - nn))
        blocks = np.block([[H, -H], [-H, H]])
        return energy, grad, self.assembler.assemble(blocks) + self.bending
