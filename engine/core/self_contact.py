"""Self-contact of a triangle mesh, written once: closest points between triangles, points and
segments; a search (k-d trees of bounding balls) for the vertex-triangle and edge-edge pairs within a thickness;
and a sheet's penalty on the pairs that enter that thickness (the floor's law, core/physics.py).

- `point_triangle`, `edge_edge`: distances and the weights of the pair's four vertices whose sum
  is the vector between the closest points (barycentric clamping), vectorised over pairs. The
  solid's lattice barrier (reference/lattice_contact.py) uses them too.
- `proximity`: vertex-triangle pairs (the vertex not a corner of the triangle) and edge-edge
  pairs (no shared vertex) within a distance, found through k-d trees of bounding balls built
  afresh at every call; with a second state, every pair whose balls over the motion come that
  near (one search a substep covers the whole Newton solve).
- `SheetSelfContact`: a sheet's thickness layer (Blender's Self Collision Distance d). Its pairs
  are taken once a substep (`pairs`, at the substep's start x_n and the inertial guess); each
  pair's closest points and direction are fixed there, so its gap g(x) = n . sum_i w_i x_i is
  linear in x (g = G x, G sparse, built once a substep) and the penalty E = k/2 (d - g)^2 (g < d;
  k = FLOOR_OMEGA2 times the pair's mass) is convex with exact gradient and Hessian, each pair's
  block k (w w^T) (x) n n^T (`self_contact_penalty`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .geometry import face_edges
from .physics import FLOOR_OMEGA2

SEARCH_MARGIN = 0.25    # pairs are taken up to (1 + this) x the thickness (the solve may go past its guess)


# --------------------------------------------------------------------------- closest points

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
    p = x[nodes]
    if is_vt.any():
        d[is_vt], w[is_vt] = point_triangle(*(p[is_vt, k] for k in range(4)))
    if (~is_vt).any():
        d[~is_vt], w[~is_vt] = edge_edge(*(p[~is_vt, k] for k in range(4)))
    return d, w


# --------------------------------------------------------------------------- proximity search

def ball_pairs(centre_a, radius_a, centre_b, radius_b, distance, same=False):
    """Pairs (i [K], j [K]) of balls a_i, b_j whose surfaces come within `distance` of each other
    (`same`: a is b, each pair once, i < j), through k-d trees of the centres (compiled; a numpy
    spatial hash of boxes took 7x as long on a folded 10k sheet)."""
    from scipy.spatial import cKDTree
    if not len(centre_a) or not len(centre_b):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if same:
        ij = cKDTree(centre_a).query_pairs(distance + 2.0 * radius_a.max(), output_type="ndarray").reshape(-1, 2)
        i, j = ij[:, 0], ij[:, 1]
    else:
        near = cKDTree(centre_a).sparse_distance_matrix(cKDTree(centre_b), distance + radius_a.max() + radius_b.max(),
                                                        output_type="ndarray")
        i, j = near["i"].astype(np.int64), near["j"].astype(np.int64)
    gap = np.linalg.norm(centre_a[i] - centre_b[j], axis=1) - radius_a[i] - radius_b[j]
    keep = gap < distance
    return i[keep], j[keep]


def _balls(corners, slack):
    """Centre [P,3] and radius [P] of a ball around each set of points corners [P,k,3], grown by
    the most its corners may move, `slack` [P,k]."""
    centre = 0.5 * (corners.min(axis=1) + corners.max(axis=1))
    return centre, (np.linalg.norm(corners - centre[:, None], axis=2) + slack).max(axis=1)


def _boxes_near(lo_a, hi_a, lo_b, hi_b, distance):
    """Whether boxes lo_a..hi_a and lo_b..hi_b [K,3] come within `distance` of each other on every axis."""
    return np.all((lo_a - hi_b < distance) & (lo_b - hi_a < distance), axis=1)


def proximity(x, faces, distance, edges=None, slack=None):
    """Vertex-triangle pairs [K,2] (vertex, triangle; the vertex not one of its corners) and
    edge-edge pairs [L,2] (indices into `edges`, default `face_edges(faces)`; no shared vertex,
    the lower index first) within `distance` of each other at x [N,3]. With `slack` [N] (how far
    each vertex may move from x, relative to any one frame), the pairs whose bounding balls, grown
    by their corners' slack, come within `distance` (a superset: no distance is measured)."""
    x = np.asarray(x, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64)
    edges = face_edges(faces)[0] if edges is None else np.asarray(edges, dtype=np.int64)
    grow = np.zeros(len(x)) if slack is None else np.asarray(slack, dtype=np.float64)
    lo, hi = x - grow[:, None], x + grow[:, None]               # each vertex's box, and each triangle's and edge's
    tri_lo, tri_hi = lo[faces].min(axis=1), hi[faces].max(axis=1)
    edge_lo, edge_hi = lo[edges].min(axis=1), hi[edges].max(axis=1)
    tri, tri_r = _balls(x[faces], grow[faces])
    v, t = ball_pairs(x, grow, tri, tri_r, distance)
    keep = _boxes_near(lo[v], hi[v], tri_lo[t], tri_hi[t], distance)
    v, t = v[keep], t[keep]
    keep = np.all(faces[t] != v[:, None], axis=1)
    vt = np.stack([v[keep], t[keep]], axis=1)
    seg, seg_r = _balls(x[edges], grow[edges])
    a, b = ball_pairs(seg, seg_r, seg, seg_r, distance, same=True)
    near = _boxes_near(edge_lo[a], edge_hi[a], edge_lo[b], edge_hi[b], distance)
    a, b = a[near], b[near]
    keep = np.all(edges[a][:, :, None] != edges[b][:, None, :], axis=(1, 2))
    ee = np.stack([a[keep], b[keep]], axis=1)
    if slack is None:
        nodes, is_vt = pair_nodes(vt, ee, faces, edges)
        near = pair_distance(x, nodes, is_vt)[0] < distance
        vt, ee = vt[near[:len(vt)]], ee[near[len(vt):]]
    return vt, ee


def pair_nodes(vt, ee, faces, edges):
    """The four vertices [K+L,4] of vertex-triangle pairs (vertex, then the triangle's corners)
    followed by edge-edge pairs (one edge's ends, then the other's), and which are vertex-triangle."""
    nodes = np.concatenate([np.concatenate([vt[:, :1], faces[vt[:, 1]]], axis=1),
                            np.concatenate([edges[ee[:, 0]], edges[ee[:, 1]]], axis=1)]).astype(np.int64)
    return nodes, np.r_[np.ones(len(vt), bool), np.zeros(len(ee), bool)]


def distinct_contacts(nodes, is_vt, w):
    """Mask [K] of the pairs that hold distinct contacts: a vertex-triangle pair only once for
    the vertex and the triangle's closest feature (a vertex near a corner or an edge is near every
    triangle on it), an edge-edge pair only when its closest points are inside both edges (else a
    vertex-triangle pair holds it)."""
    keep = (w[:, 1] > 0) & (w[:, 1] < 1) & (w[:, 3] < 0) & (w[:, 3] > -1)
    vt = np.nonzero(is_vt)[0]
    if len(vt):
        feature = np.sort(np.where(w[vt, 1:] < 0, nodes[vt, 1:], -1), axis=1)
        _, first = np.unique(np.concatenate([nodes[vt, :1], feature], axis=1), axis=0, return_index=True)
        keep[vt] = False
        keep[vt[first]] = True
    return keep


def relative_motion(move, nodes, is_vt):
    """Bound [K] on how much each pair's distance changes when its vertices move by `move` [N,3]
    (or any share of it): vertex-triangle, the largest motion of a corner relative to the vertex;
    edge-edge, of the first edge's far end and of the other edge's ends relative to its first."""
    m = move[nodes]
    to_first = np.linalg.norm(m[:, 1:] - m[:, :1], axis=2)
    return np.where(is_vt, to_first.max(axis=1), to_first[:, 0] + to_first[:, 1:].max(axis=1))


# --------------------------------------------------------------------------- the sheet's thickness layer

@dataclass(frozen=True)
class ContactPairs:
    """A substep's self-contact pairs: vertices [K,4], weights [K,4] (the gap vector is
    sum_i w_i x_i), fixed unit directions [K,3], penalty stiffness [K] (N/m), and the gaps'
    Jacobian G [K,3N] (sparse: row k holds w_i n_k at vertex i's coordinates), so that the gaps
    at x are G x (x flattened)."""
    nodes: np.ndarray
    weights: np.ndarray
    normal: np.ndarray
    k: np.ndarray
    G: sp.csr_matrix

    @classmethod
    def build(cls, nodes, weights, normal, k, n):
        J = (weights[:, :, None] * normal[:, None, :]).reshape(len(nodes), 12)
        dofs = (3 * nodes[:, :, None] + np.arange(3)).ravel()
        G = sp.csr_matrix((J.ravel(), dofs, 12 * np.arange(len(nodes) + 1)), shape=(len(nodes), 3 * n))
        return cls(nodes, weights, normal, k, G)

    def __len__(self):
        return len(self.nodes)


def self_contact_penalty(x, pairs: ContactPairs, distance: float, need_hess=True):
    """The thickness layer's penalty at x [N,3]: E = sum k/2 depth^2, depth = max(d - g, 0) with
    g = n . sum_i w_i x_i each pair's gap along its fixed direction. Returns (energy, gradient
    [N,3], Hessian [3N,3N] sparse = G^T diag(k [depth > 0]) G (exact, positive semi-definite:
    each pair's block is k (w w^T) (x) n n^T; None without `need_hess`), depth [K])."""
    n = len(x)
    if not len(pairs):
        return 0.0, np.zeros((n, 3)), sp.csr_matrix((3 * n, 3 * n)) if need_hess else None, np.zeros(0)
    depth = np.maximum(distance - pairs.G @ np.ravel(x), 0.0)
    push = pairs.k * depth
    grad = -(pairs.G.T @ push).reshape(n, 3)          # dE/dx_i = -k depth w_i n for each pair's vertex i
    hess = None
    if need_hess:
        hess = (pairs.G.T @ sp.diags(pairs.k * (depth > 0)) @ pairs.G).tocsr()
    return 0.5 * float(np.dot(push, depth)), grad, hess, depth


class SheetSelfContact:
    """A sheet's self-contact: no part of it enters another's thickness layer of `distance`.

    Pairs that are within the thickness at rest (a mesh finer than the thickness, or a rest shape
    whose layers already touch) are part of the sheet's own neighbourhood and never checked."""

    def __init__(self, rest, faces, distance: float, mass):
        self.faces = np.asarray(faces, dtype=np.int64)
        self.edges = face_edges(self.faces)[0]
        self.distance = float(distance)
        self.mass = np.asarray(mass, dtype=np.float64)
        self.reach = (1.0 + SEARCH_MARGIN) * self.distance
        vt, ee = proximity(rest, self.faces, self.reach, self.edges)
        self._excluded = (np.sort(vt @ [len(self.faces), 1]), np.sort(ee @ [len(self.edges), 1]))

    def pairs(self, x_n, x_guess=None) -> ContactPairs:
        """The pairs of a substep that starts at x_n [N,3] and whose Newton solve starts at
        x_guess: those that can come within (1 + SEARCH_MARGIN) x the thickness on the way there,
        each contact once (`distinct_contacts`). Each pair's closest points and direction are
        taken at x_n and kept for the substep: the direction's sign says which side of the
        triangle (or edge) the vertex (edge) is on at the substep's start, so a trial state on
        the other side is deeper in the layer, never out of it on the wrong side — a sheet cannot
        be pushed through itself within a substep (an unsigned distance taken at the trial state
        would let it through)."""
        x_n = np.asarray(x_n, dtype=np.float64)
        move = np.zeros_like(x_n) if x_guess is None else np.asarray(x_guess, dtype=np.float64) - x_n
        # a pair's distance changes by at most its corners' motions relative to any one frame: the mean's
        slack = np.linalg.norm(move - move.mean(axis=0), axis=1)
        vt, ee = proximity(x_n, self.faces, self.reach, self.edges, slack=slack)
        vt = vt[~in_sorted(vt @ [len(self.faces), 1], self._excluded[0])]
        ee = ee[~in_sorted(ee @ [len(self.edges), 1], self._excluded[1])]
        nodes, is_vt = pair_nodes(vt, ee, self.faces, self.edges)
        dist, w = pair_distance(x_n, nodes, is_vt)
        keep = distinct_contacts(nodes, is_vt, w)
        keep &= dist - relative_motion(move, nodes, is_vt) < self.reach
        nodes, is_vt, dist, w = nodes[keep], is_vt[keep], dist[keep], w[keep]
        p = x_n[nodes]
        diff = np.einsum("kj,kji->ki", w, p)
        # touching at x_n: no direction between the closest points; take the triangle's normal
        # (edge-edge: the edges' common normal) turned towards the vertex's side
        across = np.where(is_vt[:, None], np.cross(p[:, 2] - p[:, 1], p[:, 3] - p[:, 1]),
                          np.cross(p[:, 1] - p[:, 0], p[:, 3] - p[:, 2]))
        across *= np.where(np.einsum("ki,ki->k", across, diff) < 0, -1.0, 1.0)[:, None]
        touching = dist <= 1e-9 * self.distance
        normal = np.where(touching[:, None], across, diff)
        length = np.linalg.norm(normal, axis=1)
        ok = length > 0
        normal = normal[ok] / length[ok, None]
        nodes, w = nodes[ok], w[ok]
        k = FLOOR_OMEGA2 * 0.5 * np.einsum("kj,kj->k", np.abs(w), self.mass[nodes])
        return ContactPairs.build(nodes, w, normal, k, len(x_n))

    def terms(self, x, pairs: ContactPairs, need_hess=True):
        """(energy, gradient [3N], Hessian [3N,3N] sparse or None) of the penalty at x [N,3]."""
        energy, grad, H, depth = self_contact_penalty(x, pairs, self.distance, need_hess)
        return energy, grad.ravel(), H if need_hess and depth.any() else None


def in_sorted(keys, sorted_keys):
    """Mask of `keys` found in `sorted_keys` (sorted)."""
    if len(sorted_keys) == 0:
        return np.zeros(len(keys), bool)
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[at] == keys
