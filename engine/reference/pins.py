"""Pins: stiff springs that hold painted vertices, and the lattice region they fill, on target.

Every pinned vertex is a spring to its target, acting on the degrees of freedom through the
interpolation W. On a solid that alone would hold only the points where vertices are, and the
lattice cell around them would still bend and stretch, so the free length would be longer than
what was painted. So in every lattice cell that holds pinned vertices, the nodes inside those
vertices' bounding box are held too (held_nodes), by springs to targets given by the best affine
fit of the pinned vertices' target motion (exact for translations and rotations). The lattice
puts grid planes on the boundary of the pinned region (lattice.grid_planes), so a painted slab
holds exactly its own cells.

Stiffness is proportional to the mass held, k = weight * mass * omega^2 (core.physics), and the
energy is quadratic: 1/2 y^T H y - b(frame)^T y + const(frame).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..core.geometry import bbox_diagonal, pinned_surface
from ..core.physics import pin_stiffness


def pinned_box(setup):
    """Bounding box (lo, hi) of the pinned vertices' rest positions, or None."""
    pinned = np.asarray(setup.pin_weight) > 0
    if not pinned.any():
        return None
    rest = np.asarray(setup.rest)[pinned]
    return rest.min(axis=0), rest.max(axis=0)


def held_nodes(lattice, setup):
    """Weight (0..1) with which each lattice node is driven. In every cell that holds pinned
    vertices (on its boundary counts), the nodes inside the bounding box of those vertices are
    driven with their mean pin weight (the largest over the cells of a node). So a painted slab
    holds its cells whole, and a painted face holds the whole face, not only its corners: points
    on the faces whose vertices are all pinned count as pinned vertices (an 8-vertex box held by
    its top face's 4 corners had only the 4 corner nodes held: 6.4 mm of sag for rho g L^2/2E 6.1)."""
    weight = np.zeros(len(lattice.nodes))
    pin_w = np.asarray(setup.pin_weight, dtype=np.float64)
    pinned = np.nonzero(pin_w > 0)[0]
    if not len(pinned):
        return weight
    # the pinned vertices and points on the faces they pin (a face pinned by its corners is held whole)
    spacing = 0.5 * min(float(np.diff(p).min()) for p in lattice.planes)
    face_points, face_w = pinned_surface(setup.rest, setup.faces, pin_w, spacing)
    rest = np.concatenate([np.asarray(setup.rest, dtype=np.float64)[pinned], face_points])
    pin_w = np.concatenate([pin_w[pinned], face_w])
    # coordinates recorded in float32 (a replayed sequence) must select the same nodes
    tol = 1e-5 * bbox_diagonal(setup.rest)
    sides = []                                          # per axis: the cell below and above each vertex
    for a in range(3):
        planes = lattice.planes[a]
        last = len(planes) - 2
        below = np.clip(np.searchsorted(planes, rest[:, a] - tol, side="left") - 1, 0, last)
        above = np.clip(np.searchsorted(planes, rest[:, a] + tol, side="right") - 1, 0, last)
        sides.append((below, above))
    lookup = -np.ones(tuple(len(p) - 1 for p in lattice.planes), dtype=np.int64)
    lookup[tuple(lattice.cell_ids.T)] = np.arange(len(lattice.cell_ids))
    pairs = set()
    for i in (0, 1):
        for j in (0, 1):
            for k in (0, 1):
                cell = lookup[sides[0][i], sides[1][j], sides[2][k]]
                pairs.update(zip(cell[cell >= 0].tolist(), np.nonzero(cell >= 0)[0].tolist()))
    cells, verts = np.array(sorted(pairs)).T
    C = len(lattice.cell_ids)
    lo = np.full((C, 3), np.inf)
    hi = np.full((C, 3), -np.inf)
    np.minimum.at(lo, cells, rest[verts])
    np.maximum.at(hi, cells, rest[verts])
    total = np.bincount(cells, weights=pin_w[verts], minlength=C)
    count = np.bincount(cells, minlength=C)
    for c in np.unique(cells):
        nodes = lattice.cell_nodes[c]
        x = lattice.nodes[nodes]
        inside = nodes[np.all((x >= lo[c] - tol) & (x <= hi[c] + tol), axis=1)]
        weight[inside] = np.maximum(weight[inside], total[c] / count[c])
    return weight


class Pins:
    def __init__(self, setup, W, vertex_mass, dof_mass, rest_dofs, diagonal, lattice=None):
        mat = setup.material
        self.setup = setup
        self.rest = np.asarray(setup.rest, dtype=np.float64)
        self.rest_dofs = rest_dofs
        self.k = pin_stiffness(np.asarray(setup.pin_weight, dtype=np.float64), vertex_mass, mat, diagonal)
        node_w = held_nodes(lattice, setup) if lattice is not None else np.zeros(len(rest_dofs))
        self.node_k = pin_stiffness(node_w, dof_mass, mat, diagonal)
        self.driven = np.nonzero(self.node_k > 0)[0]
        self.W3 = sp.kron(W, sp.identity(3), format="csr")
        self.H = (self.W3.T @ sp.diags(np.repeat(self.k, 3)) @ self.W3
                  + sp.diags(np.repeat(self.node_k, 3))).tocsr()
        if len(self.driven):
            self._prepare_affine_fit()

    def _prepare_affine_fit(self):
        w = np.asarray(self.setup.pin_weight, dtype=np.float64)
        self.fit_vertices = np.nonzero(w > 0)[0]
        sw = np.sqrt(w[self.fit_vertices])[:, None]
        self.fit_centre = self.rest[self.fit_vertices].mean(axis=0)
        X = np.hstack([self.rest[self.fit_vertices] - self.fit_centre, np.ones((len(sw), 1))])
        self.fit_pinv = np.linalg.pinv(sw * X, rcond=1e-8) * sw.T          # [4, Np], weights folded in
        self.fit_nodes = np.hstack([self.rest_dofs[self.driven] - self.fit_centre, np.ones((len(self.driven), 1))])

    def node_targets(self, vertex_targets):
        """Targets of the driven nodes [D,3] from the pinned vertices' targets."""
        u = vertex_targets[self.fit_vertices] - self.rest[self.fit_vertices]
        return self.rest_dofs[self.driven] + self.fit_nodes @ (self.fit_pinv @ u)

    def linear_terms(self, frame):
        """(b, const) of the pin energy 1/2 y^T H y - b^T y + const at `frame`."""
        xt = np.asarray(self.setup.pin_target(frame), dtype=np.float64)
        k3 = np.repeat(self.k, 3)
        b = self.W3.T @ (k3 * xt.ravel())
        const = 0.5 * float(np.dot(k3 * xt.ravel(), xt.ravel()))
        if len(self.driven):
            nt = self.node_targets(xt)
            nk = self.node_k[self.driven][:, None]
            b = b.reshape(-1, 3)
            b[self.driven] += nk * nt
            b = b.ravel()
            const += 0.5 * float(np.sum(nk * nt ** 2))
        return b, const

    def energy_grad(self, yf, b, const):
        Hy = self.H @ yf
        return 0.5 * float(np.dot(yf, Hy)) - float(np.dot(b, yf)) + const, Hy - b

    def max_drift(self, y, frame):
        """Largest distance of a pinned vertex or driven node from its target (m)."""
        xt = np.asarray(self.setup.pin_target(frame), dtype=np.float64)
        x = np.asarray(self.W3 @ y.ravel()).reshape(-1, 3)
        d = np.linalg.norm(x - xt, axis=1)[self.k > 0]
        if len(self.driven):
            d = np.concatenate([d, np.linalg.norm(y[self.driven] - self.node_targets(xt), axis=1)])
        return float(d.max()) if len(d) else 0.0
