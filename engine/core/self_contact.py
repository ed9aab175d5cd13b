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
    p = np.take(x, nodes, axis=0)
    if is_vt.any():
        d[is_vt], w[is_vt] = point_triangle(*(p[is_vt, k] for k in range(4)))
    if (~is_vt).any():
        d[~is_vt], w[~is_vt] = edge_edge(*(p[~is_vt, k] for k in range(4)))
    return d, w


# --------------------------------------------------------------------------- proximity search

class Boxes:
    """Axis-aligned boxes: lo, hi [3,P] (one row an axis, so that a box's side is a 1-D gather)."""

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    @classmethod
    def around(cls, x, grow):
        """A box around each point x [N,3], `grow` [N] from it on every side."""
        return cls(np.ascontiguousarray((x - grow[:, None]).T), np.ascontiguousarray((x + grow[:, None]).T))

    def of(self, corners):
        """The box around each group of these boxes, corners [P,k]."""
        columns = [np.ascontiguousarray(corners[:, k]) for k in range(corners.shape[1])]
        return Boxes(np.array([np.minimum.reduce([side[c] for c in columns]) for side in self.lo]),
                     np.array([np.maximum.reduce([side[c] for c in columns]) for side in self.hi]))

    def centres(self):
        return 0.5 * (self.lo + self.hi).T

    def radius(self):
        """The largest half-diagonal: a ball of it about its centre holds every box."""
        return 0.5 * float(np.sqrt(((self.hi - self.lo) ** 2).sum(axis=0)).max(initial=0.0))


def box_pairs(a: Boxes, b: Boxes, distance, same=False):
    """Pairs (i [K], j [K]) of boxes a_i, b_j that come within `distance` of each other on every
    axis (`same`: a is b, each pair once, i < j): the balls around them through k-d trees of their
    centres (compiled), then the boxes, one axis at a time."""
    from scipy.spatial import cKDTree
    if not a.lo.shape[1] or not b.lo.shape[1]:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    reach = distance + a.radius() + b.radius()
    if same:
        ij = cKDTree(a.centres(), balanced_tree=False).query_pairs(reach, output_type="ndarray")
        i, j = ij[:, 0], ij[:, 1]
    else:
        near = cKDTree(a.centres(), balanced_tree=False).sparse_distance_matrix(
            cKDTree(b.centres(), balanced_tree=False), reach, output_type="ndarray")
        i, j = near["i"], near["j"]
    for axis in range(3):
        keep = (a.lo[axis][i] - b.hi[axis][j] < distance) & (b.lo[axis][j] - a.hi[axis][i] < distance)
        i, j = i[keep], j[keep]
    return i.astype(np.int64), j.astype(np.int64)


def proximity(x, faces, distance, edges=None, slack=None):
    """Vertex-triangle pairs [K,2] (vertex, triangle; the vertex not one of its corners) and
    edge-edge pairs [L,2] (indices into `edges`, default `face_edges(faces)`; no shared vertex,
    the lower index first) within `distance` of each other at x [N,3]. With `slack` [N] (how far
    each vertex may move from x, relative to any one frame), the pairs whose boxes, grown by their
    corners' slack, come within `distance` on every axis (a superset: no distance is measured)."""
    x = np.asarray(x, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64)
    edges = face_edges(faces)[0] if edges is None else np.asarray(edges, dtype=np.int64)
    points = Boxes.around(x, np.zeros(len(x)) if slack is None else np.asarray(slack, dtype=np.float64))
    v, t = box_pairs(points, points.of(faces), distance)
    corner = faces.T
    keep = (corner[0][t] != v) & (corner[1][t] != v) & (corner[2][t] != v)
    vt = np.stack([v[keep], t[keep]], axis=1)
    segments = points.of(edges)
    a, b = box_pairs(segments, segments, distance, same=True)
    end = edges.T
    keep = (end[0][a] != end[0][b]) & (end[0][a] != end[1][b]) & (end[1][a] != end[0][b]) & (end[1][a] != end[1][b])
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
        _, first = np.unique(_row_keys(np.concatenate([nodes[vt, :1], feature + 1], axis=1)), return_index=True)
        keep[vt] = False
        keep[vt[first]] = True
    return keep


def _row_keys(rows):
    """One key per row of non-negative integers [K,m], equal for equal rows: an int64 number in
    base (largest + 1) where that fits, else the rows themselves as one opaque value each."""
    base = int(rows.max(initial=0)) + 1
    if base ** rows.shape[1] < 2 ** 62:
        return rows @ base ** np.arange(rows.shape[1] - 1, -1, -1, dtype=np.int64)
    return np.ascontiguousarray(rows).view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()


def relative_motion(move, nodes, is_vt):
    """Bound [K] on how much each pair's distance changes when its vertices move by `move` [N,3]
    (or any share of it): vertex-triangle, the largest motion of a corner relative to the vertex;
    edge-edge, of the first edge's far end and of the other edge's ends relative to its first."""
    m = np.take(move, nodes, axis=0)
    to_first = np.linalg.norm(m[:, 1:] - m[:, :1], axis=2)
    return np.where(is_vt, to_first.max(axis=1), to_first[:, 0] + to_first[:, 1:].max(axis=1))


# --------------------------------------------------------------------------- cheap screens

def _coordinate_rows(x):
    """x [N,3] as three rows [3,N]: a coordinate of many vertices is then a 1-D gather."""
    return np.ascontiguousarray(np.asarray(x, dtype=np.float64).T)


def _gather(rows, nodes):
    """Each of the four vertices of pairs `nodes` [K,4] as a tuple of coordinate arrays [K]."""
    return tuple(tuple(row[np.ascontiguousarray(nodes[:, k])] for row in rows) for k in range(4))


def _minus(a, b):
    return a[0] - b[0], a[1] - b[1], a[2] - b[2]


def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _relative_motion(m, vertex_triangle):
    """`relative_motion` of pairs of one kind, their corners' motions m (coordinate tuples)."""
    to_first = [np.sqrt(_dot(d, d)) for d in (_minus(m[k], m[0]) for k in (1, 2, 3))]
    if vertex_triangle:
        return np.maximum(np.maximum(to_first[0], to_first[1]), to_first[2])
    return to_first[0] + np.maximum(to_first[1], to_first[2])


def _point_triangle_distance(p, a, b, c):
    """The distance from points p to triangles (a, b, c) (coordinate tuples), as `point_triangle`
    measures it but without its weights, on coordinate arrays: a screen five times as fast."""
    ab, ac, ap = _minus(b, a), _minus(c, a), _minus(p, a)
    d00, d01, d11, d20, d21 = _dot(ab, ab), _dot(ab, ac), _dot(ac, ac), _dot(ap, ab), _dot(ap, ac)
    denom = np.maximum(d00 * d11 - d01 * d01, 1e-30)
    v, w = (d11 * d20 - d01 * d21) / denom, (d00 * d21 - d01 * d20) / denom
    off = tuple(ap[k] - v * ab[k] - w * ac[k] for k in range(3))
    best = np.where((v >= 0) & (w >= 0) & (v + w <= 1), _dot(off, off), np.inf)
    for start, end in ((a, b), (b, c), (c, a)):
        edge, to_p = _minus(end, start), _minus(p, start)
        t = np.clip(_dot(to_p, edge) / np.maximum(_dot(edge, edge), 1e-30), 0.0, 1.0)
        off = tuple(to_p[k] - t * edge[k] for k in range(3))
        best = np.minimum(best, _dot(off, off))
    return np.sqrt(best)


def _edge_edge_inside(p0, p1, q0, q1):
    """Whether segments p0p1 and q0q1 (coordinate tuples) have their closest points inside both
    (as `edge_edge` finds them, with a little room), and the distance between their lines there."""
    d1, d2, r = _minus(p1, p0), _minus(q1, q0), _minus(p0, q0)
    a, e = np.maximum(_dot(d1, d1), 1e-30), np.maximum(_dot(d2, d2), 1e-30)
    b, c, f = _dot(d1, d2), _dot(d1, r), _dot(d2, r)
    denom = a * e - b * b
    s = (b * f - c * e) / np.maximum(denom, 1e-30)
    t = (b * s + f) / e
    room = 1e-9
    inside = (denom > 1e-12 * a * e) & (s > -room) & (s < 1 + room) & (t > -room) & (t < 1 + room)
    off = tuple(r[k] + s * d1[k] - t * d2[k] for k in range(3))
    return inside, np.sqrt(_dot(off, off))


# --------------------------------------------------------------------------- local frames of motion

PATCH_EDGES = 3.0       # a patch of `MotionFrames` is a rest-shape cell about this many edges wide


class MotionFrames:
    """Patches of a mesh (the cells of a grid over its rest shape) whose mean motions serve as
    local frames for a search over a motion. A pair's distance does not change when all its
    vertices move alike, so the search need only grow each vertex by its motion relative to a
    frame it shares with every vertex it may meet: on the bench's 10k sheet in its gust, a few mm
    from the patches' frames where the whole sheet's mean motion leaves up to 23 mm."""

    def __init__(self, rest, edges):
        rest = np.asarray(rest, dtype=np.float64)
        self.edges = edges
        length = np.linalg.norm(rest[edges[:, 0]] - rest[edges[:, 1]], axis=1)
        cell = PATCH_EDGES * float(length.mean()) if len(length) and length.mean() > 0 else 1.0
        cells = np.floor((rest - rest.min(axis=0, initial=0.0)) / cell).astype(np.int64)
        self.patch = np.unique(cells, axis=0, return_inverse=True)[1].ravel()
        self.order = np.argsort(self.patch, kind="stable")
        self.count = np.bincount(self.patch)
        self.starts = np.r_[0, np.cumsum(self.count)[:-1]]

    def slack(self, x, move, distance, base=None):
        """How far each vertex may lie from `base` [N,3] (default: halfway, x + move / 2) anywhere
        on the way from x [N,3] over `move` [N,3], relative to a frame common to every pair within
        `distance` on the way: its offset relative to its patch's mean offset, plus how much that
        mean differs from the mean of any patch that meets its own on the way (within `distance`
        and two edges); or its offset relative to the whole mesh's mean, where that is less (in all)."""
        base = x + 0.5 * move if base is None else base
        offsets = (x - base, x + move - base)          # the offset from base changes linearly on the way
        whole = np.max([np.linalg.norm(d - d.mean(axis=0), axis=1) for d in offsets], axis=0)
        if len(self.count) < 2:
            return whole
        a, b = self._meeting(x, move, distance)
        own, apart = np.zeros(len(x)), np.zeros(len(a))
        for d in offsets:
            frame = self._means(d)
            own = np.maximum(own, np.linalg.norm(d - frame[self.patch], axis=1))
            apart = np.maximum(apart, np.linalg.norm(frame[a] - frame[b], axis=1))
        spread = np.zeros(len(self.count))
        np.maximum.at(spread, a, apart)
        np.maximum.at(spread, b, apart)
        local = own + spread[self.patch]
        return local if local.sum() < whole.sum() else whole

    def _means(self, values):
        """Each patch's mean of per-vertex values [N,3]."""
        return np.add.reduceat(values[self.order], self.starts, axis=0) / self.count[:, None]

    def _meeting(self, x, move, distance):
        """Pairs of patches (a [K], b [K]) that may hold a pair within `distance` somewhere on the
        way from x over `move`: balls around the patches, grown by their vertices' motion
        relative to the patch's mean, that come within `distance` and 1 + 1/sqrt(3) of the longest
        edge of each other as they move with their means (a pair's corners lie within that of the
        corner nearest its closest points; a triangle's points within 1/sqrt(3) of its longest
        edge of a corner)."""
        from scipy.spatial import cKDTree
        ends = x[self.edges], (x + move)[self.edges]
        longest = max(float(np.linalg.norm(e[:, 0] - e[:, 1], axis=1).max(initial=0.0)) for e in ends)
        near = distance + (1.0 + 1.0 / np.sqrt(3.0)) * longest
        frame = self._means(move)
        own = np.linalg.norm(move - frame[self.patch], axis=1)
        xs = x[self.order]
        centre = 0.5 * (np.minimum.reduceat(xs, self.starts) + np.maximum.reduceat(xs, self.starts))
        radius = np.maximum.reduceat(np.linalg.norm(xs - centre[self.patch[self.order]], axis=1) + own[self.order],
                                     self.starts)
        drift = float(np.linalg.norm(frame - frame.mean(axis=0), axis=1).max())
        ab = cKDTree(centre + 0.5 * frame).query_pairs(near + 2.0 * radius.max() + drift, output_type="ndarray")
        a, b = ab[:, 0], ab[:, 1]
        apart, closing = centre[a] - centre[b], frame[a] - frame[b]
        when = np.clip(-(apart * closing).sum(axis=1) / np.maximum((closing * closing).sum(axis=1), 1e-300), 0.0, 1.0)
        keep = np.linalg.norm(apart + when[:, None] * closing, axis=1) < near + radius[a] + radius[b]
        return a[keep], b[keep]


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
        self.frames = MotionFrames(rest, self.edges)

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
        vt, ee = self._candidates(x_n, move)
        # screened on coordinate rows (distance less the corners' relative motion), then measured
        corners, motion = _coordinate_rows(x_n), _coordinate_rows(move)
        vt_nodes = np.concatenate([vt[:, :1], self.faces[vt[:, 1]]], axis=1)
        gap = _point_triangle_distance(*_gather(corners, vt_nodes))
        vt_nodes = vt_nodes[gap - _relative_motion(_gather(motion, vt_nodes), True) < self.reach + 1e-9]
        ee_nodes = np.concatenate([self.edges[ee[:, 0]], self.edges[ee[:, 1]]], axis=1)
        inside, gap = _edge_edge_inside(*_gather(corners, ee_nodes))
        ee_nodes = ee_nodes[inside]
        ee_nodes = ee_nodes[gap[inside] - _relative_motion(_gather(motion, ee_nodes), False) < self.reach + 1e-9]
        nodes = np.concatenate([vt_nodes, ee_nodes])
        is_vt = np.r_[np.ones(len(vt_nodes), bool), np.zeros(len(ee_nodes), bool)]
        dist, w = pair_distance(x_n, nodes, is_vt)
        keep = dist - relative_motion(move, nodes, is_vt) < self.reach
        near = np.nonzero(keep)[0]
        keep[near] = distinct_contacts(nodes[near], is_vt[near], w[near])
        nodes, is_vt, dist, w = nodes[keep], is_vt[keep], dist[keep], w[keep]
        p = np.take(x_n, nodes, axis=0)
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

    def _candidates(self, x_n, move):
        """Vertex-triangle and edge-edge pairs [K,2], [L,2] (not excluded) that may come within
        the search's reach on the way from x_n over `move`: searched halfway, each vertex grown
        by its slack relative to the frames (`MotionFrames.slack`)."""
        vt, ee = proximity(x_n + 0.5 * move, self.faces, self.reach, self.edges,
                           slack=self.frames.slack(x_n, move, self.reach))
        vt = vt[~in_sorted(vt @ [len(self.faces), 1], self._excluded[0])]
        ee = ee[~in_sorted(ee @ [len(self.edges), 1], self._excluded[1])]
        return vt, ee

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
