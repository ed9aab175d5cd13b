"""Self-contact of a solid: distant parts of the lattice body may not pass through each other.

The inversion barrier (solid.py) keeps every element upright, but it cannot stop two parts of
a body that are far apart at rest from sliding through each other: a jelly pressed flat folds,
and its folds cross. Contact is kept on the lattice, not the mesh, because the lattice is the
body (the mesh only follows it) and its half-cells are few:

- every half-cell of the lattice (a cell's eighth for quadratic elements) is a sample point at
  the mean of its 8 corner nodes, so the samples move linearly with the nodes (matrix S);
- two samples further apart at rest than EXCLUDE half-cell sizes are kept at least a half-cell
  size `d_hat` apart by IPC's barrier -kappa (d - d_hat)^2 log(d / d_hat) (zero with its first
  two derivatives at d_hat, infinite at 0), kappa = E d_hat, so that at half the distance the
  pair pushes with about E over a half-cell face. Nearer pairs belong to the same few cells,
  where the elasticity and its inversion barrier already rule. A layer of samples d_hat apart
  cannot be crossed without some sample of it coming within d_hat / sqrt(2) < d_hat;
- a step limit (`safe_fraction`) lets no Newton step change the distance of a pair that could
  reach the contact band by more than half its gap (or half of d_hat), so nothing tunnels
  through the band within one step, however fast.

Contact is frictionless. A fold tighter than EXCLUDE half-cells is left to the elements, and the
mesh can still fold inside a half-cell: it follows the nodes trilinearly there, and a half-cell's
trilinear map can turn inside out near a corner while every quadrature point of the quadratic
tetrahedra stays upright (the jelly squeezed at 10x the training top: corner Jacobians down to
-3.3 with the least quadrature J at 0.125; docs/PHYSICS.md (o)).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.spatial import cKDTree

EXCLUDE = 2.5           # pairs nearer than this many half-cell sizes at rest are never checked
KEEP = 0.5              # a step closes at most this share of a pair's gap (or of d_hat)


def subcell_samples(lattice):
    """S [P, n]: each half-cell's centre as the mean of its 8 corner nodes."""
    p = lattice.order
    rows, cols = [], []
    offsets = [(i, j, k) for i in range(p) for j in range(p) for k in range(p)]
    P = len(lattice.cell_ids) * len(offsets)
    sample = np.arange(P).reshape(len(lattice.cell_ids), len(offsets))
    for s, d in enumerate(offsets):
        lo = p * lattice.cell_ids + np.array(d)
        for corner in ((i, j, k) for i in (0, 1) for j in (0, 1) for k in (0, 1)):
            idx = lo + np.array(corner)
            rows.append(sample[:, s])
            cols.append(lattice.node_index[idx[:, 0], idx[:, 1], idx[:, 2]])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return sp.csr_matrix((np.full(len(rows), 1.0 / 8.0), (rows, cols)), shape=(P, len(lattice.nodes)))


def barrier(d, d_hat, kappa):
    """-kappa (d - d_hat)^2 log(d / d_hat) for d < d_hat, with its first two derivatives;
    continued as a parabola below d_hat / 1000 (where the step limit never lets a pair go)."""
    d0 = 1e-3 * d_hat
    t = np.maximum(d, d0)
    log = np.log(t / d_hat)
    e = -kappa * (t - d_hat) ** 2 * log
    de = -kappa * (2 * (t - d_hat) * log + (t - d_hat) ** 2 / t)
    dde = kappa * (-2 * log - 4 * (t - d_hat) / t + (t - d_hat) ** 2 / t ** 2)
    below = d < d0
    e = np.where(below, e + de * (d - d0) + 0.5 * dde * (d - d0) ** 2, e)
    de = np.where(below, de + dde * (d - d0), de)
    return e, de, dde


class LatticeSelfContact:
    """Barrier between half-cell samples that are far apart at rest, over node positions y."""

    def __init__(self, lattice, young):
        self.S = subcell_samples(lattice)
        self.rest = np.asarray(self.S @ lattice.nodes)
        self.d_hat = min(float(np.median(np.diff(p))) for p in lattice.sub_planes)
        self.exclude = EXCLUDE * self.d_hat
        self.kappa = float(young) * self.d_hat
        self.corners = self.S.indices.reshape(-1, 8)                       # [P,8] node indices

    def pairs(self, p, radius):
        """Sample pairs closer than `radius` in p and at least `exclude` apart at rest."""
        pairs = cKDTree(p).query_pairs(radius, output_type="ndarray")
        if len(pairs) == 0:
            return pairs.reshape(0, 2)
        far = np.linalg.norm(self.rest[pairs[:, 0]] - self.rest[pairs[:, 1]], axis=1) >= self.exclude
        return pairs[far]

    def terms(self, y, need_hess=True):
        """Energy, gradient on the nodes [3n] and PSD Hessian (sparse, or None)."""
        p = np.asarray(self.S @ y)
        pairs = self.pairs(p, self.d_hat)
        n3 = y.size
        if len(pairs) == 0:
            return 0.0, np.zeros(n3), None
        diff = p[pairs[:, 0]] - p[pairs[:, 1]]
        d = np.linalg.norm(diff, axis=1)
        normal = diff / np.maximum(d, 1e-15)[:, None]
        e, de, dde = barrier(d, self.d_hat, self.kappa)
        g_samples = np.zeros_like(p)
        np.add.at(g_samples, pairs[:, 0], de[:, None] * normal)
        np.add.at(g_samples, pairs[:, 1], -de[:, None] * normal)
        grad = np.asarray(self.S.T @ g_samples).ravel()
        if not need_hess:
            return float(e.sum()), grad, None
        # d along the pair's normal only: the tangential part (de/d < 0) is dropped, so each
        # block is dde (w n)(w n)^T, positive semi-definite
        nodes = np.concatenate([self.corners[pairs[:, 0]], self.corners[pairs[:, 1]]], axis=1)   # [K,16]
        w = np.concatenate([np.full(8, 0.125), np.full(8, -0.125)])
        J = (w[None, :, None] * normal[:, None, :]).reshape(len(pairs), 48)
        blocks = dde[:, None, None] * J[:, :, None] * J[:, None, :]
        dofs = (3 * nodes[:, :, None] + np.arange(3)).reshape(len(pairs), 48)
        rows = np.repeat(dofs, 48, axis=1).ravel()
        cols = np.tile(dofs, (1, 48)).ravel()
        H = sp.csr_matrix((blocks.ravel(), (rows, cols)), shape=(n3, n3))
        return float(e.sum()), grad, H

    def safe_fraction(self, y, step):
        """Largest share (<= 1) of the node step `step` [3n] that changes no pair's distance by
        more than KEEP of its gap to zero (or of d_hat, whichever is less), for the pairs that
        could reach the contact band along the step."""
        p = np.asarray(self.S @ y)
        dp = np.asarray(self.S @ step.reshape(-1, 3))
        reach = 2.0 * float(np.linalg.norm(dp - dp.mean(axis=0), axis=1).max())
        pairs = self.pairs(p, self.d_hat + reach)
        if len(pairs) == 0:
            return 1.0
        d = np.linalg.norm(p[pairs[:, 0]] - p[pairs[:, 1]], axis=1)
        rel = np.linalg.norm(dp[pairs[:, 0]] - dp[pairs[:, 1]], axis=1)
        risky = (d - rel < self.d_hat) & (rel > 0)
        if not risky.any():
            return 1.0
        return float(min(1.0, (KEEP * np.minimum(d[risky], self.d_hat) / rel[risky]).min()))

