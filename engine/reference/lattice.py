"""The embedding lattice of a solid: box cells around the mesh, split into tetrahedra.

The mesh is embedded in a rectilinear grid of box cells (uniform, except that grid planes are
moved or inserted to lie on the boundary of the pinned region, so a pin holds exactly what was
painted). Each occupied cell is split into six tetrahedra around one of its main diagonals (a Kuhn
split), mirrored along each axis in every other cell, so the cells still meet face to face, and along
an axis with an even count of cells the lattice is mirror-symmetric, as its box is. (One
diagonal for every cell made the body stiffer along it: a symmetric body pressed straight down
sheared sideways, experiments/lattice_symmetry.py.) With `order=2` the tetrahedra are quadratic (10
nodes: corners and edge midpoints), so the nodes of a cell form a 3 x 3 x 3 "sub-grid" of half
spacing; quadratic elements bend without locking where linear ones are far too stiff.

Mesh vertices follow the nodes by trilinear interpolation inside the sub-grid cell they lie in
(positive weights, exact for affine motion). Masses are lumped on the sub-grid: each sub-cell
gives an eighth of its volume to each of its corners.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..core.geometry import is_closed, sample_triangles, winding_numbers

DEFAULT_LATTICE_CELLS = 6       # quadratic cells along the longest side of a solid
MAX_LATTICE_CELLS = 500         # cap on occupied quadratic cells (linear: 8x as many, same node budget)
SNAP_MIN = 0.05                 # an inserted grid plane is at least this share of a cell from another

# Kuhn split: six tetrahedra, one per axis order, all along the 0 -> (1,1,1) diagonal (before mirroring)
KUHN_AXIS_ORDERS = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))
# edges of a tetrahedron, in the order of its quadratic nodes 4..9
TET_EDGES = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))


def kuhn_tetrahedron(axis_order, flip, p):
    """Local node indices in a cell (its (p+1)^3 sub-grid, row-major) of the corners (and, for p = 2,
    edge midpoints) of the Kuhn tetrahedron that walks from corner 0 along `axis_order`, mirrored
    along the axes where `flip` is 1, positively oriented."""
    corners = [np.zeros(3, int)]
    for a in axis_order:
        step = corners[-1].copy()
        step[a] = p
        corners.append(step)
    corners = np.where(np.asarray(flip)[None] == 1, p - np.array(corners), np.array(corners))
    if np.linalg.det((corners[1:] - corners[0]).astype(float)) < 0:
        corners[[1, 2]] = corners[[2, 1]]
    if p == 2:
        corners = np.concatenate([corners, [(corners[a] + corners[b]) // 2 for a, b in TET_EDGES]])
    return (corners[:, 0] * (p + 1) + corners[:, 1]) * (p + 1) + corners[:, 2]


def grid_planes(lo, hi, count, snaps=()):
    """Uniform planes lo..hi in `count` cells; each snap coordinate moves the nearest interior
    plane onto itself, or becomes a new plane when the nearest one is fixed (an end of the body
    or already snapped)."""
    h = (hi - lo) / count
    planes = [[c, 0 < i < count] for i, c in enumerate(np.linspace(lo, hi, count + 1))]   # [coord, movable]
    for b in sorted(snaps):
        if b <= lo + SNAP_MIN * h or b >= hi - SNAP_MIN * h:
            continue                                  # the pinned region reaches the body's end
        coords = np.array([c for c, _ in planes])
        m = int(np.argmin(np.abs(coords - b)))
        if planes[m][1]:
            planes[m] = [b, False]
        elif abs(coords[m] - b) >= SNAP_MIN * h:
            planes.append([b, False])
            planes.sort()
    return np.array(sorted(c for c, _ in planes))


def locate(planes, x):
    """Index of the interval of `planes` holding each coordinate (ends clamp), and the local
    coordinate t in [0, 1] inside it."""
    idx = np.clip(np.searchsorted(planes, x, side="right") - 1, 0, len(planes) - 2)
    t = (x - planes[idx]) / (planes[idx + 1] - planes[idx])
    return idx, t


class Lattice:
    """Cells, nodes, tetrahedra, vertex weights W and node volumes of an embedded solid."""

    def __init__(self, rest, faces, cells=DEFAULT_LATTICE_CELLS, order=2, snap_box=None):
        """`snap_box`: (lo, hi) corners of a region whose boundary planes the grid should contain
        (the pinned vertices' bounding box), or None."""
        assert order in (1, 2)
        self.order = order
        faces = np.asarray(faces)
        lo, hi = rest.min(axis=0), rest.max(axis=0)
        extent = np.maximum(hi - lo, 1e-9)
        while True:
            counts = np.maximum(1, np.round(extent / extent.max() * cells)).astype(int)
            snaps = [() if snap_box is None else (snap_box[0][a], snap_box[1][a]) for a in range(3)]
            self.planes = [grid_planes(lo[a], lo[a] + extent[a], counts[a], snaps[a]) for a in range(3)]
            occupied = self._occupied_cells(rest, faces)
            if occupied.sum() <= MAX_LATTICE_CELLS * (8 if order == 1 else 1) or cells <= 2:
                break
            cells = max(2, int(cells * 0.85))
        self.cell_ids = np.argwhere(occupied)                                # [C,3]
        self.sub_planes = [self._subdivide(p) for p in self.planes]
        self._number_nodes()
        self.tets = self._tetrahedra()
        self.W = self._interpolation(rest)
        self.node_volume = self._node_volumes()

    # ----- grid

    def _subdivide(self, planes):
        if self.order == 1:
            return planes
        mids = 0.5 * (planes[1:] + planes[:-1])
        return np.insert(planes, np.arange(1, len(planes)), mids)

    def locate_cells(self, x):
        return np.stack([locate(self.planes[a], x[:, a])[0] for a in range(3)], axis=1)

    def _occupied_cells(self, rest, faces):
        shape = tuple(len(p) - 1 for p in self.planes)
        occ = np.zeros(shape, dtype=bool)
        spacing = 0.5 * min(np.diff(p).min() for p in self.planes)
        pts = sample_triangles(rest, faces, spacing) if len(faces) else rest
        idx = self.locate_cells(pts)
        occ[idx[:, 0], idx[:, 1], idx[:, 2]] = True
        if len(faces) and is_closed(faces):
            empty = np.argwhere(~occ)
            if len(empty):
                centres = np.stack([0.5 * (self.planes[a][empty[:, a]] + self.planes[a][empty[:, a] + 1])
                                    for a in range(3)], axis=1)
                inside = empty[winding_numbers(centres, rest, faces) > 0.5]
                occ[inside[:, 0], inside[:, 1], inside[:, 2]] = True
        return occ

    def _number_nodes(self):
        """Nodes are the sub-grid points of occupied cells: `cell_nodes` [C,(p+1)^3] in local
        order (di, dj, dk) row-major, `nodes` [n,3] rest positions, `node_index` a dense map."""
        p = self.order
        offsets = np.array([[i, j, k] for i in range(p + 1) for j in range(p + 1) for k in range(p + 1)])
        sub = (p * self.cell_ids[:, None, :] + offsets[None]).reshape(-1, 3)
        shape = tuple(len(s) for s in self.sub_planes)
        flat = np.ravel_multi_index(sub.T, shape)
        uniq, inverse = np.unique(flat, return_inverse=True)
        self.cell_nodes = inverse.reshape(len(self.cell_ids), -1)
        self.node_grid = np.stack(np.unravel_index(uniq, shape), axis=1)     # sub-grid coordinates
        self.nodes = np.stack([self.sub_planes[a][self.node_grid[:, a]] for a in range(3)], axis=1)
        self.node_index = -np.ones(shape, dtype=np.int64)
        self.node_index[tuple(self.node_grid.T)] = np.arange(len(uniq))

    def _tetrahedra(self):
        """[6C, 4] (linear) or [6C, 10] (quadratic: corners, then the midpoints of TET_EDGES),
        every tetrahedron positively oriented: the Kuhn split of each cell, mirrored along each axis
        whose cell index is odd."""
        mirror = self.cell_ids % 2                                           # [C,3]: 1 = mirrored along that axis
        out = np.zeros((6 * len(self.cell_ids), 4 if self.order == 1 else 10), dtype=np.int64)
        for code in range(8):
            flip = np.array([(code >> a) & 1 for a in range(3)])
            cells = np.flatnonzero((mirror == flip).all(axis=1))
            nodes = self.cell_nodes[cells]
            for t, order in enumerate(KUHN_AXIS_ORDERS):
                out[t * len(self.cell_ids) + cells] = nodes[:, kuhn_tetrahedron(order, flip, self.order)]
        return out

    def _interpolation(self, rest):
        """W [N, n]: trilinear weights of each vertex on the corners of its sub-grid cell."""
        idx, t = zip(*(locate(self.sub_planes[a], rest[:, a]) for a in range(3)))
        idx, t = np.stack(idx, axis=1), np.stack(t, axis=1)
        rows, cols, vals = [], [], []
        for corner in ((i, j, k) for i in (0, 1) for j in (0, 1) for k in (0, 1)):
            node = self.node_index[idx[:, 0] + corner[0], idx[:, 1] + corner[1], idx[:, 2] + corner[2]]
            assert np.all(node >= 0), "every vertex lies in an occupied cell"
            w = np.prod([t[:, a] if corner[a] else 1.0 - t[:, a] for a in range(3)], axis=0)
            rows.append(np.arange(len(rest))); cols.append(node); vals.append(w)
        return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                             shape=(len(rest), len(self.nodes)))

    def _node_volumes(self):
        p = self.order
        vol = np.zeros(len(self.nodes))
        for d in ((i, j, k) for i in range(p) for j in range(p) for k in range(p)):
            lo = p * self.cell_ids + np.array(d)
            size = np.prod([np.diff(self.sub_planes[a])[lo[:, a]] for a in range(3)], axis=0)
            for corner in ((i, j, k) for i in (0, 1) for j in (0, 1) for k in (0, 1)):
                node = self.node_index[lo[:, 0] + corner[0], lo[:, 1] + corner[1], lo[:, 2] + corner[2]]
                np.add.at(vol, node, size / 8.0)
        return vol

    def grid_laplacian(self):
        """[n, n] graph Laplacian of the sub-grid: each node joined to its neighbours one sub-grid
        step away along an axis (both in the lattice)."""
        rows, cols = [], []
        for a in range(3):
            step = np.zeros(3, dtype=np.int64)
            step[a] = 1
            up = self.node_grid + step
            inside = up[:, a] < self.node_index.shape[a]
            j = np.full(len(up), -1)
            j[inside] = self.node_index[tuple(up[inside].T)]
            i = np.flatnonzero(j >= 0)
            rows.append(i); cols.append(j[i])
        i, j = np.concatenate(rows), np.concatenate(cols)
        n = len(self.nodes)
        adj = sp.csr_matrix((np.ones(2 * len(i)), (np.concatenate([i, j]), np.concatenate([j, i]))), shape=(n, n))
        return (sp.diags(np.asarray(adj.sum(axis=1)).ravel()) - adj).tocsr()

    def cell_centres(self):
        return np.stack([0.5 * (self.planes[a][self.cell_ids[:, a]] + self.planes[a][self.cell_ids[:, a] + 1])
                         for a in range(3)], axis=1)
