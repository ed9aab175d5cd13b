"""Self-contact of a triangle mesh, written once: a search for the vertex-triangle and edge-edge
pairs within a thickness (measured by `core.closest_points`), and a sheet's penalty on the pairs
that enter that thickness (the floor's law, core/physics.py).

- `proximity`: vertex-triangle pairs (the vertex not a corner of the triangle) and edge-edge
  pairs (no shared vertex) within a distance, found through k-d trees of the balls around their
  boxes, then the boxes; with a slack per vertex, every pair whose grown boxes come that near.
- `Patches`: cells of a grid over the rest shape, whose mean motions are local frames for a
  search over a motion and whose neighbourhoods, where they still move as their rest shape
  does, need no search at all.
- `SheetSelfContact`: a sheet's thickness layer (Blender's Self Collision Distance d). Its pairs
  are taken once a substep (`pairs`, at the substep's start x_n and the inertial guess): pairs a
  little beyond the search's reach at rest are listed once, the others searched for only where
  the sheet may have folded since rest or where patches far apart at rest meet (on the bench's
  10k sheet in its gust a substep's pairs take 20-50 ms, where searching the whole sheet took
  0.2-6 s: `neurok bench`'s self-collision row). Each pair's closest points (two material points)
  and side are fixed at x_n. Its gap (`ContactPairs.gaps`) is its height over its triangle's plane
  (an edge pair: the edges' plane), linear in x, or, where the closest point was on a triangle's
  edge or corner, the distance between those points, signed by the side; the penalty
  E = k/2 (d - g)^2 (g < d; k = FLOOR_OMEGA2 times the pair's mass) has an exact gradient and a
  positive semi-definite Gauss-Newton Hessian, each pair's block k (w w^T) (x) n n^T
  (`self_contact_penalty`). With the start's direction for every pair, a vertex's closest point
  on an edge gave a leaning direction, and a sheet sliding over another climbed every edge it
  crossed (a square on a 25 degree slope slid at 0.3 m/s^2, not g sin 25 = 4.1, frictionless:
  tests/test_self_contact.py).
- `LayerFriction`: Coulomb friction between the layers, the law of core/friction.py on each
  touching pair's relative slide sum_i w_i (x_i - x_n,i), its normal force k depth lagged (taken
  at a given state, as the floor's is).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .assembly import padded_rows
from .closest_points import pair_distance, pair_distances
from .friction import slide_terms
from .geometry import face_edges
from .physics import FLOOR_OMEGA2

SEARCH_MARGIN = 0.25    # pairs are taken up to (1 + this) x the thickness (the solve may go past its guess)
# a pair without a plane (its closest point on an edge or corner) measures its gap along the plane's
# normal within this sine of the angle about the triangle's plane, and beyond it: min(length, height / this)
GAP_WEDGE = 0.2
BAND = 0.4              # pairs up to this many mean edge lengths beyond that at rest are listed


# --------------------------------------------------------------------------- proximity search

class Boxes:
    """Axis-aligned boxes lo, hi [3,P] (an axis a row, so that a box's side is a 1-D gather) around
    points or groups of points each grown by its own slack, and a ball about each, centre [P,3]
    and radius [P], that holds the points so grown (the k-d trees' bound)."""

    def __init__(self, lo, hi, centre, radius):
        self.lo, self.hi, self.centre, self.radius = lo, hi, centre, radius

    @classmethod
    def around(cls, x, grow):
        """A box around each point x [N,3], `grow` [N] from it on every side."""
        boxes = cls(np.ascontiguousarray((x - grow[:, None]).T), np.ascontiguousarray((x + grow[:, None]).T), x, grow)
        boxes._rows = np.ascontiguousarray(x.T)
        return boxes

    def of(self, corners):
        """The box around each group of these points' boxes, corners [P,k]."""
        columns = [np.ascontiguousarray(corners[:, k]) for k in range(corners.shape[1])]
        least = lambda rows: np.array([np.minimum.reduce([row[c] for c in columns]) for row in rows])
        most = lambda rows: np.array([np.maximum.reduce([row[c] for c in columns]) for row in rows])
        low, high = least(self._rows), most(self._rows)
        radius = 0.5 * np.sqrt(((high - low) ** 2).sum(axis=0)) + np.maximum.reduce([self.radius[c] for c in columns])
        return Boxes(least(self.lo), most(self.hi), 0.5 * (low + high).T, radius)

    def subset(self, index):
        return Boxes(self.lo[:, index], self.hi[:, index], self.centre[index], self.radius[index])


def box_pairs(a: Boxes, b: Boxes, distance, same=False):
    """Pairs (i [K], j [K]) of boxes a_i, b_j that come within `distance` of each other on every
    axis (`same`: a is b, each pair once, i < j): the balls around them through k-d trees of their
    centres (compiled), then the boxes, one axis at a time."""
    from scipy.spatial import cKDTree
    if not a.lo.shape[1] or not b.lo.shape[1]:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    reach = distance + float(a.radius.max()) + float(b.radius.max())
    if same:
        ij = cKDTree(a.centre, balanced_tree=False).query_pairs(reach, output_type="ndarray")
        i, j = ij[:, 0], ij[:, 1]
    else:
        near = cKDTree(a.centre, balanced_tree=False).sparse_distance_matrix(
            cKDTree(b.centre, balanced_tree=False), reach, output_type="ndarray")
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
        near = pair_distances(x, nodes, is_vt) < distance
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
    edge-edge, of the first edge's far end and of the other edge's ends relative to its first
    (`_relative_motion`, which the search screens with, per kind of pair)."""
    nodes, is_vt = np.asarray(nodes), np.asarray(is_vt, bool)
    rows, out = _coordinate_rows(move), np.empty(len(nodes))
    for kind in (True, False):
        out[is_vt == kind] = _relative_motion(_gather(rows, nodes[is_vt == kind]), kind)
    return out


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


# --------------------------------------------------------------------------- patches of the rest shape

PATCH_WIDTH = 1.5       # a patch's cell is this many times (reach + longest edge) wide: patches that are
                        # not neighbours are further apart than a pair's centres within reach


class Patches:
    """The cells of a grid over a mesh's rest shape (`size` wide) as patches: a vertex, an edge or
    a triangle is in the patch of its centre at rest (vertex, midpoint, centroid). Patches are neighbours
    when their cells touch (a patch is its own neighbour); a patch's neighbourhood is every corner
    of every vertex, edge and triangle of its neighbours. They serve a search over a motion twice:

    - frames (`motion`): a pair's distance does not change when all its vertices move alike, so a
      search need only grow each vertex by its motion relative to a frame it shares with every
      vertex it may meet: its patch's mean motion, plus how much that differs from the mean of
      any patch that meets its own on the way (on the bench's 10k sheet in its gust a few mm,
      where the whole sheet's mean motion leaves up to 23 mm);
    - rigidity (`rigid`): where a neighbourhood's positions at both ends of a way are a rotation
      and a translation of its rest shape up to eps, the positions along the way are their blend,
      an affine map of the rest shape that shortens no length by more than cos(half the angle
      between the rotations), up to eps: its pairs keep at least that share of their rest
      distance less 2 eps, and those far enough apart at rest need no search."""

    def __init__(self, rest, faces, edges, size):
        rest = np.asarray(rest, dtype=np.float64)
        self.corners = (np.arange(len(rest))[:, None], edges, faces)        # vertices, edges, triangles
        centres = np.concatenate([rest[c].mean(axis=1) for c in self.corners])
        cells, member = np.unique(np.floor((centres - rest.min(axis=0, initial=0.0)) / size).astype(np.int64),
                                  axis=0, return_inverse=True)
        member = member.ravel()                 # the patch of each vertex, then edge, then triangle
        self.of = tuple(np.split(member, np.cumsum([len(c) for c in self.corners])[:-1]))
        order = np.argsort(member, kind="stable")
        self.count = np.bincount(member)
        self.starts = np.r_[0, np.cumsum(self.count)[:-1]]
        self.vertex_rank = np.argsort(order)[:len(rest)]          # where each vertex is in patch order
        # each member's corners in patch order (a vertex three times, an edge's second end twice)
        # and their shares of its centre
        corners = np.concatenate([np.repeat(self.corners[0], 3, axis=1), edges[:, [0, 1, 1]], faces])[order]
        shares = np.concatenate([np.full((len(rest), 3), 1 / 3), np.tile([0.5, 0.25, 0.25], (len(edges), 1)),
                                 np.full((len(faces), 3), 1 / 3)])[order]
        self._members = tuple(zip(np.ascontiguousarray(corners.T), shares.T[:, :, None].copy()))
        self.edges = edges
        touching = _touching(cells)
        a, b = touching.nonzero()
        self.neighbour_keys = np.sort((a * len(self) + b)[a <= b])
        self._neighbourhoods(rest, touching)

    def __len__(self):
        return len(self.count)

    def _neighbourhoods(self, rest, touching):
        """Each patch's neighbourhood as vertex indices [P,M] (padded with its first vertex,
        `inside` False and `weight` 0 there) and its rest shape about its centroid [P,M,3]."""
        n, count = len(rest), len(self)
        holds = sum(sp.csr_matrix((np.ones(c.size), (np.repeat(of, c.shape[1]), c.ravel())), shape=(count, n))
                    for of, c in zip(self.of, self.corners))
        held = (touching @ holds).tocsr()
        held.sort_indices()
        self.region, _, self.inside = padded_rows(held)
        self.weight = self.inside / self.inside.sum(axis=1)[:, None]
        shape = rest[self.region]
        self.rest_shape = shape - np.matmul(self.weight[:, None, :], shape)
        self._fit = (self.rest_shape * self.weight[..., None]).transpose(0, 2, 1).copy()

    def neighbours(self, a, b):
        """Whether patches a [K] and b [K] are neighbours."""
        return in_sorted(np.minimum(a, b) * len(self) + np.maximum(a, b), self.neighbour_keys)

    def motion(self, x, move, reach):
        """The frames of the way from x [N,3] over `move` [N,3]: the pairs of patches (a [K],
        b [K]) that are not neighbours but whose members' centres may come within `reach` and the
        longest edge of each other on the way (as those of a pair within reach do), and how far
        each vertex may be from halfway (x + move / 2) anywhere on the way, relative to a frame
        common to it and every vertex it may come within `reach` and two edges of (as a pair's
        corners do) [N]: half its motion relative to its patch's mean, plus half the most that
        mean differs from the mean of a patch that meets its own; or half its motion relative to
        the whole mesh's mean, where that is less in all."""
        both = np.concatenate([x, move], axis=1)
        ends = np.take(both, self.edges[:, 0], axis=0) - np.take(both, self.edges[:, 1], axis=0)
        longest = float(np.sqrt(np.maximum(_norm2(ends[:, :3]), _norm2(ends[:, :3] + ends[:, 3:])).max(initial=0.0)))
        members = sum(share * np.take(both, corner, axis=0) for corner, share in self._members)   # patch order
        centre, motion = members[:, :3], members[:, 3:]
        frame = np.add.reduceat(motion, self.starts, axis=0) / self.count[:, None]
        own = np.sqrt(_norm2(motion - np.repeat(frame, self.count, axis=0)))
        halfway = centre + 0.5 * motion
        grow = 0.5 * np.maximum.reduceat(own, self.starts)[:, None]
        lo = np.minimum.reduceat(halfway, self.starts) - grow
        hi = np.maximum.reduceat(halfway, self.starts) + grow
        a, b, gap = _meeting_boxes(lo, hi, frame, reach + 2.0 * longest)
        apart = np.sqrt(_norm2(frame[a] - frame[b]))
        spread = np.zeros(len(self))
        np.maximum.at(spread, a, apart)
        np.maximum.at(spread, b, apart)
        local = 0.5 * (own[self.vertex_rank] + spread[self.of[0]])
        whole = 0.5 * np.sqrt(_norm2(move - move.mean(axis=0)))
        far = (gap < reach + longest) & ~self.neighbours(a, b)
        return a[far], b[far], local if local.sum() < whole.sum() else whole

    def rigid(self, y):
        """(off [P,M], rotation [P,3,3]): for each neighbourhood, the rotation (with a translation)
        of its rest shape nearest y [N,3] (least squares), and how far each of its vertices
        (`region`) is from where they put it."""
        shape = np.take(y, self.region, axis=0)
        u, _, vt = np.linalg.svd(np.matmul(self._fit, shape))
        vt[:, 2] *= np.sign(np.linalg.det(np.matmul(u, vt)))[:, None]      # a rotation, not a reflection
        rotation = np.matmul(vt.transpose(0, 2, 1), u.transpose(0, 2, 1))
        off = shape - np.matmul(self.rest_shape, rotation.transpose(0, 2, 1))
        off -= np.matmul(self.weight[:, None, :], shape)                     # less the centroid
        return np.sqrt(np.einsum("pmi,pmi->pm", off, off)), rotation

    def slots(self, patch, vertices):
        """Where vertices [K,k] are in the neighbourhood of `patch` [K] (each one there)."""
        big = int(self.region.max(initial=0)) + 1
        held = (np.arange(len(self))[:, None] * big + self.region)[self.inside]      # sorted: rows, then vertices
        first = np.r_[0, np.cumsum(self.inside.sum(axis=1))[:-1]]
        return np.searchsorted(held, patch[:, None] * big + vertices) - first[patch][:, None]


def _mean_length(x, edges) -> float:
    """The mean length of edges [E,2] at x [N,3] (0 without edges)."""
    return float(np.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=1).mean()) if len(edges) else 0.0


def _norm2(v):
    """Squared length of each row of v [K,3]."""
    return np.einsum("ki,ki->k", v, v)


def _meeting_boxes(lo, hi, frame, near):
    """Pairs (a, b), a < b, of boxes lo..hi [P,3] moving apart or together by half the
    difference of their frames' motions [P,3] either way that may come within `near` of each
    other on every axis, and the largest of their axes' gaps so grown [K]."""
    from scipy.spatial import cKDTree
    half = 0.5 * float(np.linalg.norm(hi - lo, axis=1).max(initial=0.0))
    drift = float(np.linalg.norm(frame - frame.mean(axis=0), axis=1).max(initial=0.0))
    ab = cKDTree(0.5 * (lo + hi), balanced_tree=False).query_pairs(near + 2.0 * half + drift, output_type="ndarray")
    a, b = ab[:, 0], ab[:, 1]
    closing = 0.5 * np.abs(frame[a] - frame[b])
    gap = np.max(np.maximum(lo[a] - hi[b], lo[b] - hi[a]) - closing, axis=1)
    keep = gap < near
    return a[keep], b[keep], gap[keep]


def _touching(cells):
    """[P,P] sparse: 1 where integer cells [P,3] touch (differ by at most one on every axis)."""
    base = int(np.ptp(cells, axis=0).max(initial=0)) + 3
    weights = np.array([base * base, base, 1])
    code = (cells - cells.min(axis=0) + 1) @ weights
    order = np.argsort(code)
    rows, cols = [], []
    for offset in np.stack(np.meshgrid(*[[-1, 0, 1]] * 3, indexing="ij"), axis=-1).reshape(-1, 3):
        wanted = code + offset @ weights
        at = np.minimum(np.searchsorted(code[order], wanted), len(code) - 1)
        found = code[order][at] == wanted
        rows.append(np.nonzero(found)[0])
        cols.append(order[at[found]])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(cells), len(cells)))


# --------------------------------------------------------------------------- the sheet's thickness layer

@dataclass(frozen=True)
class ContactPairs:
    """A substep's self-contact pairs: vertices [K,4], weights [K,4] (their closest points at the
    substep's start: sum_i w_i x_i is the vector between those two material points), the
    directions at the start [K,3] (which side the vertex, or the first edge, was on), the
    triangle's (the edges') unit normal at the start turned to that side [K,3], penalty stiffness
    [K] (N/m), whether each pair's closest points were inside both its triangle (edges) [K], and
    the map from x (flattened) to those vectors, `between` [3K,3N] (sparse: w_i at vertex
    i's coordinates)."""
    nodes: np.ndarray
    weights: np.ndarray
    normal: np.ndarray
    plane: np.ndarray
    k: np.ndarray
    inside: np.ndarray
    between: sp.csr_matrix

    @classmethod
    def build(cls, nodes, weights, normal, k, n, plane=None):
        K = len(nodes)
        cols = (3 * nodes[:, None, :] + np.arange(3)[None, :, None]).reshape(3 * K, 4)   # row 3k+c: coordinate c
        vals = np.broadcast_to(weights[:, None, :], (K, 3, 4)).reshape(3 * K, 4)
        between = sp.csr_matrix((vals.ravel(), cols.ravel(), 4 * np.arange(3 * K + 1)), shape=(3 * K, 3 * n))
        inside = np.all(weights != 0.0, axis=1)
        return cls(nodes, weights, normal, normal if plane is None else plane, k, inside, between)

    def __len__(self):
        return len(self.nodes)

    def gaps(self, x):
        """Each pair's gap [K] at x [N,3] and the direction [K,3] along which it grows (its
        gradient in the vector between the pair's material points). A pair whose closest points
        were inside its triangle (edges) keeps that plane: its gap is the height over it along the
        start's direction (linear in x: the sheet may slide along the plane as far as it likes).
        One whose closest point was on the triangle's edge or corner has none: its gap is the
        distance between its two material points, min(length, height / GAP_WEDGE) with height
        over the triangle's plane (as it was at the start): negative where the vertex has crossed
        that plane, and continuous where it passes beside the edge at the plane's height (signed
        by the side alone, the gap jumped from +length to -length there, and so did the energy:
        the sheet layer's line search stalled on it). Along the start's direction instead, a
        vertex sliding past such an edge would climb it (that direction leans)."""
        d = (self.between @ np.ravel(x)).reshape(-1, 3)
        along = np.einsum("ki,ki->k", d, self.normal)
        length = np.linalg.norm(d, axis=1)
        height = np.einsum("ki,ki->k", d, self.plane)
        point = ~self.inside & (length > 1e-12)
        gap = np.where(point, length, along)
        direction = np.where(point[:, None], d / np.where(point, length, 1.0)[:, None], self.normal)
        low = point & (height < GAP_WEDGE * length)           # within the wedge about the plane, or beyond it
        gap = np.where(low, height / GAP_WEDGE, gap)
        direction = np.where(low[:, None], self.plane / GAP_WEDGE, direction)
        return gap, direction


def self_contact_penalty(x, pairs: ContactPairs, distance: float, need_hess=True):
    """The thickness layer's penalty at x [N,3]: E = sum k/2 depth^2, depth = max(d - g, 0) with g
    each pair's gap (`ContactPairs.gaps`: its height over its triangle's plane, or the distance
    between its two material points where it has no plane; negative where it has passed
    through). Returns (energy, gradient [N,3], Hessian [3N,3N] sparse, its Gauss-Newton
    part: each pair's block k (w w^T) (x) n n^T with n the gap's direction, positive
    semi-definite; None without `need_hess`), depth [K])."""
    n = len(x)
    if not len(pairs):
        return 0.0, np.zeros_like(x), sp.csr_matrix((3 * n, 3 * n)) if need_hess else None, np.zeros(0)
    gap, direction = pairs.gaps(x)
    depth = np.maximum(distance - gap, 0.0)
    push = pairs.k * depth
    # dE/dx_i = -k depth w_i n for each pair's vertex i
    grad = -(pairs.between.T @ (push[:, None] * direction).ravel()).reshape(n, 3)
    # in x's memory order: the sheet layer's vectors are column-major, and a sum with a row-major
    # gradient would be row-major, every later view of it a copy (a tenth of a 10k sheet's frame)
    grad = np.asfortranarray(grad) if np.isfortran(x) else grad
    hess = None
    if need_hess:
        J = _gap_jacobian(pairs, direction, n)
        hess = (J.T @ sp.diags(pairs.k * (depth > 0)) @ J).tocsr()
    return 0.5 * float(np.dot(push, depth)), grad, hess, depth


def _gap_jacobian(pairs: ContactPairs, direction, n):
    """[K,3N] sparse: row k holds w_i n_k at vertex i's coordinates."""
    J = (pairs.weights[:, :, None] * direction[:, None, :]).reshape(len(pairs), 12)
    dofs = (3 * pairs.nodes[:, :, None] + np.arange(3)).ravel()
    return sp.csr_matrix((J.ravel(), dofs, 12 * np.arange(len(pairs) + 1)), shape=(len(pairs), 3 * n))


@dataclass(frozen=True)
class LayerFriction:
    """Coulomb friction between a sheet's layers over one substep: the touching pairs' map from x
    to the vectors between their material points, `between` [3K,3N] (the rows of
    `ContactPairs.between`), their directions at the start [K,3], and `weight` = mu lambda [K],
    lambda = k depth at the state the normal forces were taken at (lagged)."""
    between: sp.csr_matrix
    normal: np.ndarray
    weight: np.ndarray

    @classmethod
    def of(cls, pairs: ContactPairs, x, distance: float, mu: float) -> "LayerFriction | None":
        """The friction of the pairs that touch at x [N,3] (None: none do, or mu = 0)."""
        if pairs is None or not len(pairs) or mu <= 0.0:
            return None
        depth = np.maximum(distance - pairs.gaps(x)[0], 0.0)
        on = np.nonzero(depth > 0.0)[0]
        if not len(on):
            return None
        rows = (3 * on[:, None] + np.arange(3)).ravel()
        return cls(pairs.between[rows], pairs.normal[on], mu * pairs.k[on] * depth[on])

    def terms(self, x, x_n, h: float, need_hess=True):
        """(energy, gradient [N,3], Hessian [3N,3N] sparse or None) of the friction potential at x
        [N,3] for a substep h from x_n (`core.friction.slide_terms` on each pair's relative slide)."""
        n, K = len(x), len(self.weight)
        slide = (self.between @ (np.ravel(x) - np.ravel(x_n))).reshape(K, 3)
        energy, g_slide, H_blocks = slide_terms(slide, self.normal, self.weight, h, need_hess)
        grad = (self.between.T @ g_slide.ravel()).reshape(n, 3)
        grad = np.asfortranarray(grad) if np.isfortran(x) else grad      # x's memory order (`self_contact_penalty`)
        hess = None
        if need_hess:
            blocks = sp.bsr_matrix((H_blocks, np.arange(K), np.arange(K + 1)), shape=(3 * K, 3 * K))
            hess = (self.between.T @ blocks @ self.between).tocsr()
        return energy, grad, hess


class SheetSelfContact:
    """A sheet's self-contact: no part of it enters another's thickness layer of `distance`.

    Pairs within the search's reach of each other at rest (a mesh finer than the thickness, or a
    rest shape whose layers already touch) are part of the sheet's own neighbourhood and never
    checked. The pairs a little further apart at rest (the band: up to BAND mean edges further; on
    the bench's 10k sheet, whose edges are twice the thickness, a vertex and the triangles around
    its own) are listed once and measured where the sheet about them may have moved them within
    reach; the others are searched for only where the sheet may have folded since rest, and between
    patches that are not neighbours but meet on the way (`Patches`)."""

    def __init__(self, rest, faces, distance: float, mass):
        rest = np.asarray(rest, dtype=np.float64)
        self.faces = np.asarray(faces, dtype=np.int64)
        self.edges = face_edges(self.faces)[0]
        self.distance = float(distance)
        self.mass = np.asarray(mass, dtype=np.float64)
        self.reach = (1.0 + SEARCH_MARGIN) * self.distance
        self.band = self.reach + BAND * _mean_length(rest, self.edges)
        longest = float(np.linalg.norm(rest[self.edges[:, 0]] - rest[self.edges[:, 1]], axis=1).max(initial=0.0))
        self.patches = Patches(rest, self.faces, self.edges, PATCH_WIDTH * (self.reach + longest))
        vt, ee = proximity(rest, self.faces, self.band, self.edges, slack=np.zeros(len(rest)))
        rest_distance = pair_distances(rest, *pair_nodes(vt, ee, self.faces, self.edges))
        within = rest_distance < self.band
        vt, ee, rest_distance = vt[within[:len(vt)]], ee[within[len(vt):]], rest_distance[within]
        # listed, or never checked: by whether their patches are neighbours (nearly all are)
        keys, apart = self._keys(vt, ee), self._apart(vt, ee)
        self._not_searched = tuple(np.sort(k[~a]) for k, a in zip(keys, apart))
        self._not_searched_apart = tuple(np.sort(k[a]) for k, a in zip(keys, apart))
        listed = rest_distance >= self.reach
        self._list(vt[listed[:len(vt)]], ee[listed[len(vt):]], rest_distance[listed])

    def _list(self, vt, ee, rest_distance):
        """Keep the band's pairs vt [K,2], ee [L,2] and their rest distances [K+L] by owner, then
        rest distance, so that a patch's unsure ones are the start of its run, and each corner's
        place in its owner's neighbourhood (an index into a flat [P x M] array)."""
        owner = self._owner(vt, ee)
        key = owner + rest_distance / self.band
        order = np.argsort(key, kind="stable")
        self._listed = np.concatenate([vt, ee])[order]
        self._listed_is_vt = np.r_[np.ones(len(vt), bool), np.zeros(len(ee), bool)][order]
        self._listed_key = key[order]
        self._listed_owner = owner[order]
        self._listed_rest = rest_distance[order]
        fitted_in = np.maximum(self._listed_owner, 0)
        nodes = pair_nodes(vt, ee, self.faces, self.edges)[0][order]
        width = self.patches.region.shape[1]
        self._listed_at = np.ascontiguousarray((fitted_in[:, None] * width + self.patches.slots(fitted_in, nodes)).T)

    def _keys(self, vt, ee):
        """One integer key per vertex-triangle and per edge-edge pair."""
        return vt @ [len(self.faces), 1], ee @ [len(self.edges), 1]

    def _apart(self, vt, ee):
        """Whether the patches of each vertex-triangle and each edge-edge pair are not neighbours."""
        vertex, edge, triangle = self.patches.of
        neighbours = self.patches.neighbours
        return ~neighbours(vertex[vt[:, 0]], triangle[vt[:, 1]]), ~neighbours(edge[ee[:, 0]], edge[ee[:, 1]])

    def _owner(self, vt, ee):
        """The patch [K+L] whose neighbourhood holds every corner of each pair: the first one's,
        where the second one's patch is its neighbour (else -1: measured at every substep)."""
        vertex, edge, triangle = self.patches.of
        first = np.concatenate([vertex[vt[:, 0]], edge[ee[:, 0]]])
        second = np.concatenate([triangle[vt[:, 1]], edge[ee[:, 1]]])
        return np.where(self.patches.neighbours(first, second), first, -1)

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
        nodes, is_vt, dist, w = self._within_reach(x_n, move, *self._candidates(x_n, move))
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
        normal, across, nodes, w = normal[ok] / length[ok, None], across[ok], nodes[ok], w[ok]
        across_length = np.linalg.norm(across, axis=1)     # 0 for a degenerate triangle: its side is the direction's
        plane = np.where(across_length[:, None] > 0, across / np.maximum(across_length, 1e-300)[:, None], normal)
        k = FLOOR_OMEGA2 * 0.5 * np.einsum("kj,kj->k", np.abs(w), self.mass[nodes])
        return ContactPairs.build(nodes, w, normal, k, len(x_n), plane)

    def _within_reach(self, x_n, move, vt, ee):
        """Of candidate pairs vt [K,2], ee [L,2], those whose distance at x_n less their corners'
        motion relative to one another (`relative_motion`) is within reach, each contact once:
        their vertices [M,4], whether vertex-triangle, distances and closest-point weights at x_n.
        Decided on coordinate rows (edge pairs only with their closest points inside both), then
        measured for the weights."""
        corners, motion = _coordinate_rows(x_n), _coordinate_rows(move)
        vt_nodes = np.concatenate([vt[:, :1], self.faces[vt[:, 1]]], axis=1)
        gap = _point_triangle_distance(*_gather(corners, vt_nodes))
        vt_nodes = vt_nodes[gap - _relative_motion(_gather(motion, vt_nodes), True) < self.reach + 1e-9]
        ee_nodes = np.concatenate([self.edges[ee[:, 0]], self.edges[ee[:, 1]]], axis=1)
        inside, gap = _edge_edge_inside(*_gather(corners, ee_nodes))
        ee_nodes, gap = ee_nodes[inside], gap[inside]
        ee_nodes = ee_nodes[gap - _relative_motion(_gather(motion, ee_nodes), False) < self.reach + 1e-9]
        nodes = np.concatenate([vt_nodes, ee_nodes])
        is_vt = np.r_[np.ones(len(vt_nodes), bool), np.zeros(len(ee_nodes), bool)]
        dist, w = pair_distance(x_n, nodes, is_vt)
        keep = distinct_contacts(nodes, is_vt, w)
        return nodes[keep], is_vt[keep], dist[keep], w[keep]

    def _candidates(self, x_n, move):
        """Vertex-triangle and edge-edge pairs [K,2], [L,2] that may come within reach on the way
        from x_n over `move`: the listed ones whose patch's neighbourhood may have brought them
        there, and those a search finds (`_searched`)."""
        off_start, turn_start = self.patches.rigid(x_n)
        off_end, turn_end = self.patches.rigid(x_n + move)
        shrink = np.sqrt(np.clip((np.einsum("pij,pij->p", turn_start, turn_end) + 1.0) / 4.0, 0.0, 1.0))
        off = np.maximum(off_start, off_end)
        listed, is_vt = self._unsure(off, shrink)
        vt, ee = self._searched(x_n, move, loose=shrink * self.band - 2.0 * off.max(axis=1) < self.reach)
        return np.concatenate([listed[is_vt], vt]), np.concatenate([listed[~is_vt], ee])

    def _unsure(self, off, shrink):
        """The listed pairs [K,2] that may come within reach on the way, and which are vertex-
        triangle [K]: on the way a pair keeps at least `shrink` [P] x its rest distance, less its
        two parts' largest offsets from the fits `off` [P,M] (`Patches`). Sure for a whole patch
        where twice its largest offset leaves it out of reach, else where its own corners' do."""
        eps = off.max(axis=1)
        closest_sure = np.minimum((self.reach + 2.0 * eps) / np.maximum(shrink, 1e-9), self.band)
        at = _runs(self._listed_key, np.arange(-1.0, len(self.patches)), np.r_[1.0, closest_sure / self.band])
        owner, is_vt = self._listed_owner[at], self._listed_is_vt[at]
        a, b, c, d = np.take(off.ravel(), self._listed_at[:, at])          # each corner's offset
        parts = np.where(is_vt, a + np.maximum(np.maximum(b, c), d), np.maximum(a, b) + np.maximum(c, d))
        unsure = (owner < 0) | (shrink[owner] * self._listed_rest[at] - parts < self.reach)
        return self._listed[at[unsure]], is_vt[unsure]

    def _searched(self, x_n, move, loose):
        """Pairs beyond the band at rest [K,2], [L,2] that may come within reach on the way from
        x_n over `move`: searched halfway, each vertex grown by its slack relative to the frames,
        between neighbouring patches that are both `loose` [P] (may have folded since rest), and
        between patches that are not neighbours but meet on the way."""
        patches, count = self.patches, len(self.patches)
        far_a, far_b, slack = patches.motion(x_n, move, self.reach)
        apart = np.sort(far_a * count + far_b)
        neighbours = patches.neighbour_keys
        near = neighbours[loose[neighbours // count] & loose[neighbours % count]]
        searched = loose.copy()
        searched[far_a] = searched[far_b] = True
        points = Boxes.around(x_n + 0.5 * move, slack)
        vertex_patch, edge_patch, triangle_patch = patches.of

        def wanted(kind, keys, first, second):
            """Which pairs (keys [K]) between members of patches `first` and `second` [K] to keep:
            those in wanted patch pairs, neither listed nor excluded at rest."""
            patch_pair = np.minimum(first, second) * count + np.maximum(first, second)
            far = in_sorted(patch_pair, apart)
            close = ~far
            close[close] = in_sorted(patch_pair[close], near)
            seen = np.zeros(len(keys), bool)
            seen[close] = in_sorted(keys[close], self._not_searched[kind])
            seen[far] = in_sorted(keys[far], self._not_searched_apart[kind])
            return (far | close) & ~seen

        v, t = self._vertex_triangle_near(points, np.nonzero(searched[vertex_patch])[0],
                                          np.nonzero(searched[triangle_patch])[0])
        i, j = self._edge_edge_near(points, np.nonzero(searched[edge_patch])[0])
        vt, ee = np.stack([v, t], axis=1), np.stack([i, j], axis=1)
        vt_keys, ee_keys = self._keys(vt, ee)
        return (vt[wanted(0, vt_keys, vertex_patch[v], triangle_patch[t])],
                ee[wanted(1, ee_keys, edge_patch[i], edge_patch[j])])

    def _vertex_triangle_near(self, points: Boxes, vertices, triangles):
        """Pairs (v, t) of these vertices and triangles (not its corners) whose boxes come within reach."""
        v, t = box_pairs(points.subset(vertices), points.of(self.faces[triangles]), self.reach)
        v, t = vertices[v], triangles[t]
        corner = self.faces[t].T
        keep = (corner[0] != v) & (corner[1] != v) & (corner[2] != v)
        return v[keep], t[keep]

    def _edge_edge_near(self, points: Boxes, edges):
        """Pairs (i < j) of these edges (sorted; no shared vertex) whose boxes come within reach."""
        segments = points.of(self.edges[edges])
        i, j = box_pairs(segments, segments, self.reach, same=True)
        i, j = edges[i], edges[j]
        end_i, end_j = self.edges[i].T, self.edges[j].T
        keep = (end_i[0] != end_j[0]) & (end_i[0] != end_j[1]) & (end_i[1] != end_j[0]) & (end_i[1] != end_j[1])
        return i[keep], j[keep]

    def terms(self, x, pairs: ContactPairs, need_hess=True):
        """(energy, gradient [3N], Hessian [3N,3N] sparse or None) of the penalty at x [N,3]."""
        energy, grad, H, depth = self_contact_penalty(x, pairs, self.distance, need_hess)
        return energy, grad.ravel(), H if need_hess and depth.any() else None


def _runs(sorted_keys, starts, lengths):
    """Indices of `sorted_keys` in [start, start + length) for each start, one run after another."""
    first = np.searchsorted(sorted_keys, starts)
    count = np.searchsorted(sorted_keys, starts + lengths) - first
    return np.repeat(first - np.cumsum(count) + count, count) + np.arange(count.sum())


def in_sorted(keys, sorted_keys):
    """Mask of `keys` found in `sorted_keys` (sorted)."""
    if len(sorted_keys) == 0:
        return np.zeros(len(keys), bool)
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[at] == keys
