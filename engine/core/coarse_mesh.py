"""A coarser triangulation of a sheet whose vertices are some of the sheet's own, and the embedding
that carries the fine sheet on it.

`coarsen` merges one end of an edge into the other, first where that makes the shortest longest
edge (so the vertices stay spread about evenly: shortest-edge-first left a grid in strips), until
the sheet has the vertices asked for: what remains is a subset of the original vertices at their
own rest positions. A collapse is refused where it would change the sheet's
topology (the link condition), move its border (a border vertex only slides into a neighbour
along a nearly straight border; corners stay), release a pin (a pinned vertex only merges into
a pinned one), tip a triangle over (its normal turns more than `MAX_NORMAL_TURN_DEG`) or leave a
sliver (quality below `MIN_QUALITY`).

`Embedding` places each fine vertex on its nearest coarse triangle at rest: barycentric weights
and an offset in the triangle's own frame, so a fine vertex follows its triangle as it moves and
turns (`positions`), and the weights carry masses and forces from the fine sheet to the coarse one
(`matrix`, its transpose)."""
from __future__ import annotations

import heapq
import math

import numpy as np
import scipy.sparse as sp
from scipy.spatial import cKDTree

from .closest_points import point_triangle
from .geometry import edge_face_counts, face_edges

MAX_BORDER_TURN_DEG = 20.0     # a border vertex whose border turns more than this stays (a corner)
MAX_NORMAL_TURN_DEG = 30.0     # a collapse may turn no triangle's normal more than this
MIN_QUALITY = 0.3              # 4 sqrt(3) area / sum of squared sides (1: equilateral)


def coarsen(rest, faces, target: int, pinned=None):
    """(kept vertex indices [P] into `rest`, faces [F',3] over the kept ones, 0..P-1) of a coarser
    triangulation of the sheet with about `target` vertices (more where no further collapse is
    allowed). `pinned`: [N] bool, vertices that may only merge into other pinned ones."""
    rest = np.asarray(rest, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64)
    n = len(rest)
    if n <= target or not len(faces):
        return np.arange(n), faces.copy()
    pinned = np.zeros(n, bool) if pinned is None else np.asarray(pinned, bool)
    collapser = _Collapser(rest, faces, pinned)
    collapser.run(target)
    return collapser.result()


def _sub(a, b):
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def _cross(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


class _Collapser:
    """The mutable mesh of `coarsen`: faces, each vertex's faces, neighbours and border
    neighbours, and a heap of collapses (u into v) by the longest edge u's neighbours would then
    have to v (positions never move: a collapse keeps one end)."""

    def __init__(self, rest, faces, pinned):
        self.p = [tuple(r) for r in rest.tolist()]
        self.faces = faces.tolist()
        self.face_alive = [True] * len(self.faces)
        n = len(rest)
        self.removed = [False] * n
        self.pinned = pinned.tolist()
        self.vfaces = [set() for _ in range(n)]
        for f, tri in enumerate(self.faces):
            for v in tri:
                self.vfaces[v].add(f)
        edges, _ = face_edges(faces)
        counts = edge_face_counts(faces)
        self.nbrs = [set() for _ in range(n)]
        for a, b in edges.tolist():
            self.nbrs[a].add(b)
            self.nbrs[b].add(a)
        self.border = [set() for _ in range(n)]
        for a, b in edges[counts == 1].tolist():
            self.border[a].add(b)
            self.border[b].add(a)
        # vertices on edges of three or more triangles, or where borders meet, never move
        self.locked = [False] * n
        for v in np.unique(edges[counts > 2]).tolist():
            self.locked[v] = True
        for v in range(n):
            if self.border[v] and len(self.border[v]) != 2:
                self.locked[v] = True
        self.alive = n
        # a queued cost holds while u's neighbours are as they were: `changes` counts their changes
        self.changes = [0] * n
        u, v = np.concatenate([edges, edges[:, ::-1]]).T
        self.heap = list(zip(_first_costs(rest, edges, u, v).tolist(), u.tolist(), v.tolist(), [0] * len(u)))
        heapq.heapify(self.heap)

    def _cost(self, u, v):
        """The longest edge from v to u's neighbours, were u merged into v."""
        vx, vy, vz = self.p[v]
        longest = 0.0
        for w in self.nbrs[u]:      # written out: the coarsening's hottest loop (100k vertices: 730k calls)
            x, y, z = self.p[w]
            dx, dy, dz = x - vx, y - vy, z - vz
            square = dx * dx + dy * dy + dz * dz
            if square > longest:
                longest = square
        return math.sqrt(longest)

    def run(self, target):
        while self.alive > target and self.heap:
            cost, u, v, seen = heapq.heappop(self.heap)
            if self.removed[u] or self.removed[v] or v not in self.nbrs[u]:
                continue
            if seen != self.changes[u]:
                now = self._cost(u, v)
                if now > cost * (1.0 + 1e-12):      # u's neighbours changed since: queue it again
                    heapq.heappush(self.heap, (now, u, v, self.changes[u]))
                    continue
            if self._allowed(u, v):
                self._collapse(u, v)

    def _allowed(self, u, v) -> bool:
        """Whether u may merge into v (module docstring)."""
        if self.locked[u] or (self.pinned[u] and not self.pinned[v]):
            return False
        if self.border[u]:
            if v not in self.border[u]:
                return False
            (w,) = self.border[u] - {v}
            into, out = _sub(self.p[u], self.p[v]), _sub(self.p[w], self.p[u])
            cos_turn = _dot(into, out) / max(math.sqrt(_dot(into, into) * _dot(out, out)), 1e-300)
            if cos_turn < math.cos(math.radians(MAX_BORDER_TURN_DEG)):
                return False
        shared = [f for f in self.vfaces[u] if v in self.faces[f]]
        opposite = {w for f in shared for w in self.faces[f] if w != u and w != v}
        if self.nbrs[u] & self.nbrs[v] != opposite:
            return False
        return self._fan_stays_sound(u, v)

    def _fan_stays_sound(self, u, v) -> bool:
        """No triangle of u's fan turns over or becomes a sliver when u moves to v."""
        min_cos = math.cos(math.radians(MAX_NORMAL_TURN_DEG))
        for f in self.vfaces[u]:
            tri = self.faces[f]
            if v in tri:
                continue
            a, b, c = (self.p[w] for w in tri)
            old = _cross(_sub(b, a), _sub(c, a))
            moved = [self.p[v] if w == u else self.p[w] for w in tri]
            new = _cross(_sub(moved[1], moved[0]), _sub(moved[2], moved[0]))
            old_n, new_n = math.sqrt(_dot(old, old)), math.sqrt(_dot(new, new))
            if new_n <= 0.0 or _dot(old, new) < min_cos * old_n * new_n:
                return False
            sides = sum(_dot(d, d) for d in (_sub(moved[1], moved[0]), _sub(moved[2], moved[1]),
                                             _sub(moved[0], moved[2])))
            if 2.0 * math.sqrt(3.0) * new_n < MIN_QUALITY * sides:    # 4 sqrt(3) area = 2 sqrt(3) |cross|
                return False
        return True

    def _collapse(self, u, v):
        new = self.nbrs[u] - self.nbrs[v] - {v}
        for f in list(self.vfaces[u]):
            tri = self.faces[f]
            if v in tri:
                self.face_alive[f] = False
                for w in tri:
                    self.vfaces[w].discard(f)
            else:
                tri[tri.index(u)] = v
                self.vfaces[v].add(f)
        self.vfaces[u] = set()
        for w in self.nbrs[u]:
            self.nbrs[w].discard(u)
            self.changes[w] += 1
            if w != v:
                self.nbrs[w].add(v)
                self.nbrs[v].add(w)
        if self.border[u]:
            (w,) = self.border[u] - {v}
            self.border[w].discard(u)
            self.border[w].add(v)
            self.border[v].discard(u)
            self.border[v].add(w)
        self.nbrs[u], self.border[u] = set(), set()
        self.removed[u] = True
        self.alive -= 1
        # v's edges already queued are costed again when they come up (`run`); its new ones are queued
        for w in new:
            heapq.heappush(self.heap, (self._cost(v, w), v, w, self.changes[v]))
            heapq.heappush(self.heap, (self._cost(w, v), w, v, self.changes[w]))

    def result(self):
        keep = np.nonzero(~np.asarray(self.removed))[0]
        new_index = np.full(len(self.removed), -1, np.int64)
        new_index[keep] = np.arange(len(keep))
        faces = np.asarray([t for t, alive in zip(self.faces, self.face_alive) if alive], np.int64)
        return keep, new_index[faces.reshape(-1, 3)]


def _first_costs(rest, edges, u, v):
    """`_Collapser._cost` of every collapse u -> v of the untouched mesh, vectorised."""
    both = np.concatenate([edges, edges[:, ::-1]])
    order = np.argsort(both[:, 0], kind="stable")
    starts = np.searchsorted(both[order, 0], np.arange(len(rest) + 1))
    counts = np.diff(starts)[u]                                  # u's neighbours, for each collapse
    first = starts[u]
    flat = np.repeat(first - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) + np.arange(counts.sum())
    w = both[order, 1][flat]
    d = np.linalg.norm(rest[w] - rest[np.repeat(v, counts)], axis=1)
    return np.maximum.reduceat(d, np.concatenate([[0], np.cumsum(counts)[:-1]]))


class Embedding:
    """Fine vertices on a coarse triangulation (module docstring). Built at rest; `positions` gives
    the fine vertices for any coarse positions."""

    CANDIDATES = 8      # nearest coarse triangles (by centre) measured for each fine vertex

    def __init__(self, rest_fine, keep, coarse_faces):
        rest_fine = np.asarray(rest_fine, dtype=np.float64)
        rest_coarse = rest_fine[keep]
        self.faces = np.asarray(coarse_faces, dtype=np.int64)
        n, m = len(rest_fine), len(keep)
        tri = rest_coarse[self.faces]                                        # [F,3,3]
        k = min(self.CANDIDATES, len(self.faces))
        _, near = cKDTree(tri.mean(axis=1)).query(rest_fine, k=k)
        near = near.reshape(n, k)
        best_d = np.full(n, np.inf)
        self.triangle = np.zeros(n, np.int64)
        bary = np.zeros((n, 3))
        for j in range(k):
            t = near[:, j]
            d, w = point_triangle(rest_fine, tri[t, 0], tri[t, 1], tri[t, 2])
            better = d < best_d
            best_d = np.where(better, d, best_d)
            self.triangle = np.where(better, t, self.triangle)
            bary = np.where(better[:, None], -w[:, 1:], bary)
        # a kept vertex is its own coarse vertex, exactly
        self.triangle[keep] = 0
        bary[keep] = 0.0
        corners = self.faces[self.triangle].copy()
        corners[keep] = np.arange(m)[:, None]
        bary[keep, 0] = 1.0
        self.corners, self.bary = corners, bary
        self.matrix = sp.csr_matrix((bary.ravel(), (np.repeat(np.arange(n), 3), corners.ravel())), shape=(n, m))
        offset = rest_fine - self.matrix @ rest_coarse
        offset[keep] = 0.0
        self.offset_rows = np.nonzero(np.linalg.norm(offset, axis=1) > 1e-9 * (np.ptp(rest_fine, axis=0).max() or 1.0))[0]
        frames = triangle_frames(rest_coarse, self.faces[self.triangle[self.offset_rows]])
        self.local_offset = np.einsum("kij,kj->ki", frames, offset[self.offset_rows])   # in the frame's axes

    def positions(self, x_coarse) -> np.ndarray:
        """Fine vertex positions [N,3] on the coarse sheet at `x_coarse` [P,3]."""
        x_coarse = np.asarray(x_coarse, dtype=np.float64)
        x = self.matrix @ x_coarse
        if len(self.offset_rows):
            frames = triangle_frames(x_coarse, self.faces[self.triangle[self.offset_rows]])
            x[self.offset_rows] += np.einsum("kji,kj->ki", frames, self.local_offset)
        return x

    def transfer(self, per_fine) -> np.ndarray:
        """A quantity that adds up (masses, forces) moved from the fine vertices to the coarse ones."""
        return self.matrix.T @ np.asarray(per_fine, dtype=np.float64)


def triangle_frames(x, tris) -> np.ndarray:
    """[K,3,3] orthonormal frames of triangles `tris` [K,3] at x, rows: along the first edge,
    across it in the plane, the normal."""
    a, b, c = x[tris[:, 0]], x[tris[:, 1]], x[tris[:, 2]]
    e1 = b - a
    e1 /= np.maximum(np.linalg.norm(e1, axis=1, keepdims=True), 1e-300)
    normal = np.cross(b - a, c - a)
    normal /= np.maximum(np.linalg.norm(normal, axis=1, keepdims=True), 1e-300)
    e2 = np.cross(normal, e1)
    return np.stack([e1, e2, normal], axis=1)
