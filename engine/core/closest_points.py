"""Closest points between a point and a triangle and between two segments, vectorised over pairs,
written once: the sheet's self-contact (core/self_contact.py) and the solid's lattice barrier
(reference/lattice_contact.py) measure their pairs with them.

Each returns distances and the weights of the pair's four vertices whose sum is the vector between
the closest points (barycentric clamping onto the triangle, its edges or the segments' ends), so
that a pair's gap and its gradient are linear in the four vertices."""
from __future__ import annotations

import numpy as np


def point_triangle(p, a, b, c):
    """Distance from points p to triangles (a, b, c) [K,3] each, and the weights [K,4] of
    (p, a, b, c) whose sum is the vector from the closest point to p."""
    ab, ac, ap = b - a, c - a, p - a
    d00, d01, d11 = (ab * ab).sum(1), (ab * ac).sum(1), (ac * ac).sum(1)
    d20, d21 = (ap * ab).sum(1), (ap * ac).sum(1)
    denom = np.maximum(d00 * d11 - d01 ** 2, 1e-30)
    v = (d11 * d20 - d01 * d21) / denom
    w = (d00 * d21 - d01 * d20) / denom
    bary = np.stack([1.0 - v - w, v, w], axis=1)
    inside = (bary >= 0).all(axis=1)
    best = np.where(inside, np.linalg.norm(p - (bary[:, :1] * a + bary[:, 1:2] * b + bary[:, 2:] * c), axis=1),
                    np.inf)
    verts = (a, b, c)
    for i, j in ((0, 1), (1, 2), (2, 0)):
        e = verts[j] - verts[i]
        t = np.clip(((p - verts[i]) * e).sum(1) / np.maximum((e * e).sum(1), 1e-30), 0.0, 1.0)
        d = np.linalg.norm(p - verts[i] - t[:, None] * e, axis=1)
        better = ~inside & (d < best)
        edge_bary = np.zeros_like(bary)
        edge_bary[:, i], edge_bary[:, j] = 1.0 - t, t
        bary = np.where(better[:, None], edge_bary, bary)
        best = np.where(better, d, best)
    return best, np.concatenate([np.ones((len(p), 1)), -bary], axis=1)


def edge_edge(p0, p1, q0, q1):
    """Distance between segments p0p1 and q0q1 [K,3] each, and the weights [K,4] of
    (p0, p1, q0, q1) whose sum is the vector between the closest points."""
    d1, d2, r = p1 - p0, q1 - q0, p0 - q0
    a, e = np.maximum((d1 * d1).sum(1), 1e-30), np.maximum((d2 * d2).sum(1), 1e-30)
    b, c, f = (d1 * d2).sum(1), (d1 * r).sum(1), (d2 * r).sum(1)
    denom = a * e - b * b
    s = np.where(denom > 1e-12 * a * e, np.clip((b * f - c * e) / np.maximum(denom, 1e-30), 0.0, 1.0), 0.0)
    t = (b * s + f) / e
    s = np.where(t < 0, np.clip(-c / a, 0.0, 1.0), np.where(t > 1, np.clip((b - c) / a, 0.0, 1.0), s))
    t = np.clip(t, 0.0, 1.0)
    weights = np.stack([1.0 - s, s, -(1.0 - t), -t], axis=1)
    diff = weights[:, :1] * p0 + weights[:, 1:2] * p1 + weights[:, 2:3] * q0 + weights[:, 3:] * q1
    return np.linalg.norm(diff, axis=1), weights


def pair_distance(x, nodes, is_vt):
    """Distance [K] of each pair of vertex quads `nodes` [K,4] (vertex-triangle where `is_vt`,
    else edge-edge) at x [N,3], and the weights [K,4] whose sum is the vector between its closest points."""
    d = np.empty(len(nodes))
    w = np.empty((len(nodes), 4))
    p = np.take(x, nodes, axis=0)
    if is_vt.any():
        d[is_vt], w[is_vt] = point_triangle(*(p[is_vt, k] for k in range(4)))
    if (~is_vt).any():
        d[~is_vt], w[~is_vt] = edge_edge(*(p[~is_vt, k] for k in range(4)))
    return d, w


def pair_distances(x, nodes, is_vt, chunk=500_000):
    """`pair_distance`'s distances alone, `chunk` pairs at a time (a fine sheet's rest search
    measures tens of millions)."""
    return np.concatenate([np.zeros(0)] + [pair_distance(x, nodes[k:k + chunk], is_vt[k:k + chunk])[0]
                                           for k in range(0, len(nodes), chunk)])
