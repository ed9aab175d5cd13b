"""Self-contact of a solid: distant parts of the body may not pass through each other.

The inversion barrier (solid.py) keeps every element upright, but it cannot stop two parts of
a body that are far apart at rest from sliding through each other: a jelly pressed flat folds,
and its folds cross. Parts of a solid cannot pass through each other without their surfaces
crossing, and the mesh follows the lattice, so contact is kept on the lattice's boundary
surface: the outer faces of its half-cells (the sub-grid of quadratic cells), each split into
two triangles (IPC, Li et al. 2020, point-triangle and edge-edge):

- every boundary node is kept at least `d_hat` (a quarter of a half-cell) from every boundary
  triangle, and every boundary edge from every other edge, by IPC's barrier
  -kappa (d - d_hat)^2 log(d / d_hat) (zero with its first two derivatives at d_hat, infinite
  at 0). kappa = E h^2 / d_hat (h the half-cell size), so a pair at half the band pushes with
  about E over a half-cell face;
- pairs nearer than EXCLUDE half-cells at rest are never checked (on a flat face a node lies in
  the plane of its neighbours' triangles); that takes in every pair that shares a node;
- distances come from the closest points; their gradient is exact (the closest points move
  with the primitives) and the Hessian keeps only the part along the contact normal, so it is
  positive semi-definite;
- a step limit (`safe_fraction`) lets no Newton step bring a pair closer by more than KEEP of
  its gap (or of d_hat): a distance changes at most by the largest motion of the pair's
  corners relative to one of them, so along a straight step nothing passes through the band.
  The pairs that can reach the band along a step are kept for the line search on it.

Contact is frictionless. The mesh can still fold *inside* a half-cell while the load lasts: it
follows the nodes trilinearly there, and a half-cell's trilinear map can turn inside out near a
corner while every quadrature point of the quadratic tetrahedra stays upright
(docs/PHYSICS.md (o)).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.spatial import cKDTree
from scipy.spatial.distance import cdist

from ..core.closest_points import edge_edge, pair_distance, point_triangle  # noqa: F401 (tests)
from ..core.self_contact import in_sorted

D_HAT = 0.25            # contact band, in half-cell sizes
EXCLUDE = 0.9           # pairs nearer than this many half-cell sizes at rest are never checked
KEEP = 0.5              # a step closes at most this share of a pair's gap (or of d_hat)
CHUNK = 200_000         # pairs measured at a time, so that a cancel is seen within a fraction of a second
WIDE = 3.0              # balls wider than this many times the median are paired directly (`near_balls`)
DENSE_BLOCK = 500_000   # pairs measured at a time there


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


def near_balls(a, ra, b, rb, radius):
    """Pairs [K,2] (i, j) of balls (centres a [n,3], radii ra [n]) and (b, rb) whose gap
    |a_i - b_j| - ra_i - rb_j is less than `radius`, in (i, j) order; with b None, the pairs
    i < j within a. A search tree's query has one radius, which its widest balls set, and a
    moving body's few wide balls (its fastest nodes, a stretched face) made it return nearly
    every pair; so the balls wider than WIDE times the median are measured against all others
    directly, and the tree searches the rest with their own widest radius."""
    same = b is None
    b, rb = (a, ra) if same else (b, rb)
    wide_a, wide_b = _wide(ra), _wide(rb)
    narrow_a, narrow_b = np.flatnonzero(~wide_a), np.flatnonzero(~wide_b)
    parts = [_near_tree(a, ra, b, rb, radius, narrow_a, narrow_b, same)]
    blocks = [(np.flatnonzero(wide_a), np.arange(len(b)))]
    if not same:        # within one set the first block already holds every pair with a wide ball
        blocks.append((narrow_a, np.flatnonzero(wide_b)))
    for rows, cols in blocks:
        if len(rows) and len(cols):
            parts.append(_near_dense(a, ra, b, rb, radius, rows, cols))
    pairs = np.concatenate(parts)
    if same:
        pairs = np.sort(pairs[pairs[:, 0] != pairs[:, 1]], axis=1)
    key = np.unique(pairs[:, 0].astype(np.int64) * len(b) + pairs[:, 1])
    return np.stack([key // len(b), key % len(b)], axis=1).astype(np.intp)


def _wide(r):
    """Which balls are wider than WIDE times the median ball."""
    return r > WIDE * float(np.median(r)) if len(r) else np.zeros(0, dtype=bool)


def _near_tree(a, ra, b, rb, radius, rows, cols, same):
    """`near_balls` among a[rows] and b[cols], by a search tree (indices into a and b)."""
    if not len(rows) or not len(cols):
        return np.zeros((0, 2), dtype=np.intp)
    ar, bc = a[rows], b[cols]
    if same:
        found = cKDTree(ar).query_pairs(radius + 2 * ra[rows].max(), output_type="ndarray").reshape(-1, 2)
        pairs = rows[found]
    else:
        found = cKDTree(ar).sparse_distance_matrix(cKDTree(bc), radius + ra[rows].max() + rb[cols].max(),
                                                   output_type="ndarray")
        pairs = np.stack([rows[found["i"]], cols[found["j"]]], axis=1)
    gap = np.linalg.norm(a[pairs[:, 0]] - b[pairs[:, 1]], axis=1)
    return pairs[gap - ra[pairs[:, 0]] - rb[pairs[:, 1]] < radius]


def _near_dense(a, ra, b, rb, radius, rows, cols):
    """`near_balls` between a[rows] and b[cols], every pair measured (in blocks of DENSE_BLOCK)."""
    out, step = [], max(1, DENSE_BLOCK // len(cols))
    for k in range(0, len(rows), step):
        r = rows[k:k + step]
        near = cdist(a[r], b[cols]) - ra[r, None] - rb[None, cols] < radius
        i, j = np.nonzero(near)
        out.append(np.stack([r[i], cols[j]], axis=1))
    return np.concatenate(out)


def boundary_triangles(lattice):
    """[T,3] node indices of the lattice's outer half-cell faces, two triangles per face."""
    p = lattice.order
    shape = tuple(len(s) - 1 for s in lattice.sub_planes)
    occupied = np.zeros(shape, dtype=bool)
    for d in np.ndindex(p, p, p):
        sub = p * lattice.cell_ids + np.array(d)
        occupied[tuple(sub.T)] = True
    padded = np.pad(occupied, 1)
    cells = np.argwhere(occupied)
    tris = []
    for axis in range(3):
        u, v = [a for a in range(3) if a != axis]
        for side in (0, 1):
            step = np.zeros(3, dtype=int)
            step[axis] = 2 * side - 1
            nb = cells + 1 + step
            open_face = cells[~padded[tuple(nb.T)]]
            base = open_face.copy()
            base[:, axis] += side
            corners = []
            for du, dv in ((0, 0), (1, 0), (1, 1), (0, 1)):
                c = base.copy()
                c[:, u] += du
                c[:, v] += dv
                corners.append(lattice.node_index[tuple(c.T)])
            q = np.stack(corners, axis=1)
            tris.append(q[:, [0, 1, 2]])
            tris.append(q[:, [0, 2, 3]])
    return np.concatenate(tris)


class LatticeSelfContact:
    """IPC barrier between the lattice's boundary nodes, triangles and edges, over node positions y."""

    def __init__(self, lattice, young):
        self.tris = boundary_triangles(lattice)
        edges = np.sort(np.concatenate([self.tris[:, [0, 1]], self.tris[:, [1, 2]], self.tris[:, [2, 0]]]), axis=1)
        self.edges = np.unique(edges, axis=0)
        self.points = np.unique(self.tris)
        self.rest = lattice.nodes
        h = min(float(np.median(np.diff(p))) for p in lattice.sub_planes)
        self.d_hat = D_HAT * h
        self.exclude = EXCLUDE * h
        self.kappa = float(young) * h * h / self.d_hat
        self._along = None              # (y, step, pairs): the pairs that can meet along a step
        self.pairs_checked = 0          # work done: pairs whose distance was measured (budget.py)
        self.between_chunks = None      # called between chunks of pairs (the simulator checks for a cancel)
        self.excluded = self._excluded_keys()
        self.pairs_checked = 0

    def _pairs_near(self, y):
        """Pairs that may be within d_hat of each other at y: those found for the last step
        when y lies on it (nothing else can reach the band there), else a fresh search."""
        if self._along is not None:
            y0, step, pairs = self._along
            move = y - y0
            share = float((move * step).sum() / max((step * step).sum(), 1e-300))
            if -1e-9 <= share <= 1.0 + 1e-9 and np.abs(move - share * step).max() <= 1e-12 * (1.0 + np.abs(y0).max()):
                return pairs
        return self._candidates(y, self.d_hat)

    # ----- candidate pairs: node indices [K,4] (point and triangle, or edge and edge) and a kind
    # mask (True: point-triangle)

    def _excluded_keys(self):
        """Sorted keys of the pairs never checked: nearer than `exclude` at rest (which takes in
        every pair that shares a node)."""
        pt, ee = self._search(self.rest, self.exclude)
        nodes, is_pt = self._pair_nodes(pt, ee)
        near = self.distance(self.rest, nodes, is_pt)[0] < self.exclude
        return np.sort(pt[near[:len(pt)]] @ [len(self.tris), 1]), np.sort(ee[near[len(pt):]] @ [len(self.edges), 1])

    def _search(self, y, radius, motion=None):
        """Point-triangle pairs [K,2] (point, triangle) and edge-edge pairs [L,2] that may be
        nearer than `radius` in y, or (with `motion` [n], how far each node may move relative to
        the others) may come nearer than `radius` along the move: each primitive is a ball about
        its centre (its size and its nodes' motion), and two balls nearer than `radius` pair."""
        if motion is None:
            motion = np.zeros(len(y))
        tri_x = y[self.tris]
        centre = tri_x.mean(axis=1)
        size = np.linalg.norm(tri_x - centre[:, None], axis=2).max(axis=1) + motion[self.tris].max(axis=1)
        pt = near_balls(y[self.points], motion[self.points], centre, size, radius)
        ends = y[self.edges]
        mid = ends.mean(axis=1)
        size = 0.5 * np.linalg.norm(ends[:, 0] - ends[:, 1], axis=1) + motion[self.edges].max(axis=1)
        return pt, near_balls(mid, size, None, None, radius)

    def _pair_nodes(self, pt, ee):
        nodes = np.concatenate([np.concatenate([self.points[pt[:, 0]][:, None], self.tris[pt[:, 1]]], axis=1),
                                np.concatenate([self.edges[ee[:, 0]], self.edges[ee[:, 1]]], axis=1)])
        is_pt = np.concatenate([np.ones(len(pt), bool), np.zeros(len(ee), bool)])
        return nodes.astype(np.int64), is_pt

    def _candidates(self, y, radius, motion=None):
        """The pairs of `_search` that are checked at all (not excluded at rest)."""
        pt, ee = self._search(y, radius, motion)
        pt = pt[~in_sorted(pt @ [len(self.tris), 1], self.excluded[0])]
        ee = ee[~in_sorted(ee @ [len(self.edges), 1], self.excluded[1])]
        return self._pair_nodes(pt, ee)

    def distance(self, y, nodes, is_pt):
        """Distance [K] of each pair at y, and the weights [K,4] of its nodes whose sum is the
        vector between its closest points."""
        self.pairs_checked += len(nodes)
        if len(nodes) <= CHUNK:
            return pair_distance(y, nodes, is_pt)
        parts = []
        for k in range(0, len(nodes), CHUNK):
            if self.between_chunks is not None:
                self.between_chunks()
            parts.append(pair_distance(y, nodes[k:k + CHUNK], is_pt[k:k + CHUNK]))
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def terms(self, y, need_hess=True):
        """Energy, gradient on the nodes [3n] and PSD Hessian (sparse, or None)."""
        n3 = y.size
        nodes, is_pt = self._pairs_near(y)
        if len(nodes):
            d, w = self.distance(y, nodes, is_pt)
            near = d < self.d_hat
            nodes, d, w = nodes[near], d[near], w[near]
        if len(nodes) == 0:
            return 0.0, np.zeros(n3), None
        diff = (w[:, :, None] * y[nodes]).sum(axis=1)
        normal = diff / np.maximum(d, 1e-15)[:, None]
        e, de, dde = barrier(d, self.d_hat, self.kappa)
        J = (w[:, :, None] * normal[:, None, :]).reshape(len(d), 12)                 # dd/dx of the 4 nodes
        grad = np.zeros(n3)
        dofs = (3 * nodes[:, :, None] + np.arange(3)).reshape(len(d), 12)
        np.add.at(grad, dofs, de[:, None] * J)
        if not need_hess:
            return float(e.sum()), grad, None
        blocks = dde[:, None, None] * J[:, :, None] * J[:, None, :]
        H = sp.csr_matrix((blocks.ravel(), (np.repeat(dofs, 12, axis=1).ravel(), np.tile(dofs, (1, 12)).ravel())),
                          shape=(n3, n3))
        return float(e.sum()), grad, H

    def _reach(self, dy, nodes, is_pt):
        """How much each pair's distance can change under the node motion dy: at most the largest
        motion of its corners relative to one of them (edge-edge: of each edge's far end, plus of
        the other edge's ends). By chunks, like `distance`, so a cancel is seen between them."""
        if self.between_chunks is not None:
            self.between_chunks()
        move = dy[nodes]
        return np.where(is_pt, np.linalg.norm(move[:, 1:] - move[:, :1], axis=2).max(axis=1),
                        np.linalg.norm(move[:, 1:2] - move[:, :1], axis=2)[:, 0]
                        + np.linalg.norm(move[:, 2:] - move[:, :1], axis=2).max(axis=1))

    def safe_fraction(self, y, step):
        """Largest share (<= 1) of the node step `step` [3n] that brings no pair closer by more
        than KEEP of its gap (or of d_hat, whichever is less)."""
        dy = step.reshape(-1, 3)
        # a pair's distance changes at most by the motions of its two primitives relative to a
        # common one (here the mean); twice that is searched, for margin
        motion = np.linalg.norm(dy - dy[self.points].mean(axis=0), axis=1)
        nodes, is_pt = self._candidates(y, self.d_hat, 2.0 * motion)
        if len(nodes) == 0:
            self._along = (y.copy(), dy.copy(), (nodes, is_pt))
            return 1.0
        d, _ = self.distance(y, nodes, is_pt)
        rel = np.concatenate([self._reach(dy, nodes[k:k + CHUNK], is_pt[k:k + CHUNK])
                              for k in range(0, len(nodes), CHUNK)])
        reachable = d - rel < self.d_hat
        self._along = (y.copy(), dy.copy(), (nodes[reachable], is_pt[reachable]))
        risky = reachable & (rel > 0)
        if not risky.any():
            return 1.0
        return float(min(1.0, (KEEP * np.minimum(d[risky], self.d_hat) / rel[risky]).min()))
