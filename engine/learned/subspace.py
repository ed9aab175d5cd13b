"""The latent space of one mesh: a skinning subspace of affine handles.

    x(X; q) = X + sum_h w_h(X) (A_h Xc + b_h),     Xc = X - centroid

Each handle h carries a full affine transform (A_h, b_h): 12 generalised coordinates. Its
weight function w_h is smooth over the body: the h-th lowest eigenfunction of a Laplacian
(over a coarse embedding lattice for solids, over the mesh itself for cloth), refined by the
learned weight field (`model.WeightField`). The first weight is constant, so the first handle
moves the whole body rigidly (or affinely): tumbling, swinging and falling cost no strain.
Higher handles bend and twist regions, each rotating its region to first order. Where firm pins
hold the body (still, or moving as one), the weights after the first are the eigenfunctions of
the body held there and vanish at the pins (`held_pins`): the pins hold the first handle alone,
and every other handle folds the body right up to them. With the free body's eigenfunctions
every handle moved the pins, and holding them still took 51 of a flag's 270 coordinates.

Positions are linear in q, so everything the dynamics needs reduces once per mesh: the
coordinates are re-expressed in a mass-orthonormal basis (kinetic energy 1/2 |q'|^2), and
`vertex_basis` [N,3,d] decodes any vertex count at the same cost per latent step. Lengths are
normalised by the bounding-box diagonal L (see `core.geometry.Normalisation`).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

from ..core.mesh_physics import bending_matrix
from ..core.geometry import (Normalisation, face_edges, farthest_point_sample, is_closed, lumped_vertex_areas, mesh_volume,
                             pinned_surface, triangle_areas)
from ..core.memo import MeshMemo
from .cubature import CAP, ElementForces, fit_cubature, rest_stiffness, triangle_edges

CORNERS = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)])   # bit order x, y, z


# --------------------------------------------------------------------------- how many handles a mesh needs

DETAIL_SCALE = {"low": 0.5, "medium": 1.0, "high": 2.0}
SHEET_HANDLES_PER_AREA = 64   # a sheet's handles per unit of normalised area (a square sheet: 32)
COMPACT_SLENDERNESS = 1.5     # a solid's handles grow as (slenderness / this)^1.25 ...
SLENDER = 4.0                 # ... from this extent over thickness on (beams, rods); below it, base handles
MIN_HANDLES, MAX_HANDLES = 4, 64
MAX_SOLID_HANDLES = 32        # at medium detail: a thin solid plate asked for 64 and took 216 ms a frame
MAX_LATTICE_CELLS = 24
PIN_PENALTY = 1e4             # a held node's weight in the eigenproblem, over the Laplacian's largest diagonal
HOLD_PINS = True              # handles that leave firm pins where they are (False: the free body's eigenfunctions)
AFFINE_PINS = 1e-4            # pins an affine map of their rest places follows closer than this (over the diagonal) move as one
VERTICES_PER_HANDLE = 8       # no more handles than the mesh's vertices can show and its pins can hold
CELLS_PER_SLENDERNESS = 4.5   # lattice cells along the longest side per unit of slenderness (3+ across a beam)
# A solid whose lattice has at most this many cells integrates its elastic energy over every cell
# instead of at fitted cubature samples. The fitted samples are not symmetric where the body is,
# so they squash a round body lopsidedly: on a floor it tipped, and friction made it roll (a jelly
# ball set down rolled 5 mm in 3 s at Medium detail, 58 mm at High; over every cell 0.03 mm and
# 1.7 mm). Every cell costs little at these sizes (docs/DESIGN_NOTES.md §5).
FULL_INTEGRATION_CELLS = 1000


@dataclass(frozen=True)
class Resolution:
    handles: int
    lattice_cells: int        # solids: cells along the longest side of the embedding lattice


def slenderness(x, faces) -> float:
    """Longest extent over mean thickness 6V/A (a cube or a sphere: about 1; a 10:1 bar: about 7).
    Holds for open meshes too (their volume is what the surface closes off from the centroid)."""
    area = float(triangle_areas(x, faces).sum())
    volume = abs(float(mesh_volume(x, faces)))
    if area <= 0 or volume <= 0:
        return 1.0
    return float(np.ptp(x, axis=0).max()) / (6.0 * volume / area)


def resolution(rest, faces, kind: str, base_handles: int = 8, base_cells: int = 8, detail: str = "medium") -> Resolution:
    """The handles a mesh needs, from its geometry (measured with its bounding-box diagonal as 1).

    A sheet bends everywhere: handles in proportion to its area, so folds and ripples of about an
    eighth of its diagonal fit (a square flag: 32). A solid keeps `base_handles` unless it is
    slender (extent / thickness 4 or more: a beam, a rod); then they grow as (extent /
    thickness)^1.25, the handle spacing a beam's bending needs (the evaluation's 6:1 pinned beam:
    32, its sag and first frequency then 8 % and 3 % off the reference's, against 57 % and 48 %
    with 8; 42 were no closer and 1.5x slower), and a lattice with three or more cells across
    its thickness (one-point cells are soft in bending: with 18 cells along that beam instead of
    20 it sags 36 % too far). Bodies less slender did not gain from more handles on the
    evaluation scenes (the poked torus, 3.4: 0.0136 from the reference with 8, 0.0200 with 27;
    the toy and Suzanne: equal) but cost 3-5x as much. `detail` scales the
    count (low 0.5x, medium 1x, high 2x). A coarse mesh gets no more than one handle per 8
    vertices beyond `base_handles`: Blender's 8-vertex bar at 64 handles hangs from its 4 pinned
    vertices while the handles between them let the lattice sag away (1.9 m instead of 51 mm)."""
    x, faces = Normalisation.of(rest).forward(rest), np.asarray(faces)
    scale = DETAIL_SCALE[detail]
    most = max(base_handles, len(x) // VERTICES_PER_HANDLE)
    if kind == "cloth":
        area = float(triangle_areas(x, faces).sum()) if len(faces) else 0.0
        wanted = min(max(base_handles, SHEET_HANDLES_PER_AREA * area), most)
        return Resolution(int(np.clip(round(scale * wanted), MIN_HANDLES, MAX_HANDLES)), base_cells)
    s = slenderness(x, faces) if len(faces) else 1.0
    wanted = min(base_handles * (s / COMPACT_SLENDERNESS) ** 1.25 if s >= SLENDER else base_handles, most,
                 MAX_SOLID_HANDLES)
    handles = int(np.clip(round(scale * wanted), MIN_HANDLES, MAX_HANDLES))
    cells = max(base_cells, CELLS_PER_SLENDERNESS * s, 2.5 * np.sqrt(handles))
    return Resolution(handles, int(min(round(cells), MAX_LATTICE_CELLS)))


# --------------------------------------------------------------------------- embedding lattice (solids)

@dataclass
class Lattice:
    """Cubic cells covering a closed mesh: nodes, the 8 nodes of each cell, trilinear W (vertex <- nodes)."""
    nodes: np.ndarray         # [n,3]
    cell_nodes: np.ndarray    # [C,8]
    cell_size: float
    inside_share: np.ndarray  # [C] fraction of each cell's volume inside the surface (mass)
    W: sp.csr_matrix          # [N,n]
    lo: np.ndarray            # [3] the lattice's corner
    lookup: np.ndarray        # [cx,cy,cz] cell index, -1 where no cell is
    cell_points: np.ndarray | None = None   # [C,3] where each cell's F is taken, in its own 0..1 coordinates

    def weights_at(self, points) -> sp.csr_matrix:
        """Trilinear weights [P,n] of points on the nodes of their cells (a row of zeros where
        no cell is)."""
        return trilinear(points, self.lo, self.cell_size, self.lookup, self.cell_nodes, len(self.nodes))


def trilinear(points, lo, size, lookup, cell_nodes, n) -> sp.csr_matrix:
    counts = np.array(lookup.shape)
    idx = np.clip(np.floor((points - lo) / size).astype(int), 0, counts - 1)
    t = np.clip((points - lo) / size - idx, 0.0, 1.0)   # a vertex on the lattice's boundary: no weight of -1e-16
    cell = lookup[idx[:, 0], idx[:, 1], idx[:, 2]]
    rows = np.repeat(np.arange(len(points)), 8)
    vals = np.stack([np.where(c[0], t[:, 0], 1 - t[:, 0]) * np.where(c[1], t[:, 1], 1 - t[:, 1])
                     * np.where(c[2], t[:, 2], 1 - t[:, 2]) for c in CORNERS], axis=1)
    vals = np.where((vals > 1e-12) & (cell >= 0)[:, None], vals, 0.0).ravel()   # a node a vertex all but misses
                                                                                # would take its share of mass
    W = sp.csr_matrix((vals, (rows, cell_nodes[np.maximum(cell, 0)].ravel())), shape=(len(points), n))
    W.eliminate_zeros()
    return W


def build_lattice(rest, faces, cells: int) -> Lattice:
    lo, hi = rest.min(axis=0), rest.max(axis=0)
    size = float((hi - lo).max()) / cells
    counts = np.maximum(np.ceil((hi - lo) / size - 1e-9).astype(int), 1)
    lo = 0.5 * (lo + hi) - 0.5 * counts * size
    vidx = np.clip(np.floor((rest - lo) / size).astype(int), 0, counts - 1)
    surface = np.concatenate([rest, rest[faces].mean(axis=1)]) if len(faces) else rest
    sidx = np.clip(np.floor((surface - lo) / size).astype(int), 0, counts - 1)
    if is_closed(faces):
        # share of a cell inside the surface, from its 8 corners and its centre
        inside_c = inside_share_grid(rest, faces, lo, size, counts + 1, 0.0)
        share = inside_share_grid(rest, faces, lo, size, counts, 0.5)
        for c in CORNERS:
            share = share + inside_c[c[0]:c[0] + counts[0], c[1]:c[1] + counts[1], c[2]:c[2] + counts[2]]
        share = share / 9.0
    else:  # an open surface simulated as a solid: a shell as thick as the cells that hold it
        share = np.zeros(counts)
    occupied = share > 0
    occupied[sidx[:, 0], sidx[:, 1], sidx[:, 2]] = True
    cell_ids = np.argwhere(occupied)
    grid = (cell_ids[:, None, :] + CORNERS[None]).reshape(-1, 3)
    key = (grid[:, 0] * (counts[1] + 1) + grid[:, 1]) * (counts[2] + 1) + grid[:, 2]
    uniq, inverse = np.unique(key, return_inverse=True)
    cell_nodes = inverse.reshape(-1, 8)
    node_grid = np.zeros((len(uniq), 3), dtype=int)
    node_grid[inverse] = grid
    lookup = -np.ones(counts, dtype=int)
    lookup[cell_ids[:, 0], cell_ids[:, 1], cell_ids[:, 2]] = np.arange(len(cell_ids))
    W = trilinear(rest, lo, size, lookup, cell_nodes, len(uniq))
    points = inside_centroids(rest, faces, lo, size, counts)[occupied] if is_closed(faces) else None
    share = np.maximum(share[occupied], 1.0 / 9.0)   # a cell the surface passes through holds some mass
    return Lattice(lo + node_grid * size, cell_nodes, size, share, W, lo, lookup, points)


CENTROID_SAMPLES = 3      # per axis and cell: where a cut cell's material lies


def inside_centroids(rest, faces, lo, size, counts) -> np.ndarray:
    """[cx,cy,cz,3] the centroid of each cell's part inside the closed surface, in the cell's own
    0..1 coordinates (its centre where none of its samples is inside). A cell the surface cuts
    takes its strain there, not at its centre: at the centre, a beam's outer cells (0.6 full)
    strained as if their material lay at their middle, and the 0.5 m beam bent 21 % too little."""
    m = CENTROID_SAMPLES
    inside = inside_share_grid(rest, faces, lo, size / m, counts * m, 0.5).reshape(
        counts[0], m, counts[1], m, counts[2], m)
    local = (np.arange(m) + 0.5) / m
    total = inside.sum(axis=(1, 3, 5))
    out = np.full(tuple(counts) + (3,), 0.5)
    for axis, sub in enumerate((1, 3, 5)):
        shape = [1] * 6
        shape[sub] = m
        moment = (inside * local.reshape(shape)).sum(axis=(1, 3, 5))
        out[..., axis] = np.where(total > 0, moment / np.maximum(total, 1e-300), 0.5)
    return out


def inside_share_grid(rest, faces, lo, size, counts, offset) -> np.ndarray:
    """`inside_grid` as a share: its columns are nudged off edges and vertices one way, then the
    mirrored way, and the two answers averaged, so a point on the surface counts half and a
    symmetric body gets symmetric masses (one nudge made a UV sphere's left third 0.8 % heavier
    than its right, and equal and opposite pushes sent it drifting 116 mm in 3 s)."""
    return 0.5 * (inside_grid(rest, faces, lo, size, counts, offset).astype(float)
                  + inside_grid(rest, faces, lo, size, counts, offset, nudge=-1.0).astype(float))


def inside_grid(rest, faces, lo, size, counts, offset, nudge=1.0) -> np.ndarray:
    """Which points of the grid lo + (i + offset) * size lie inside a closed mesh [counts]: a ray
    up each grid column crosses the surface an odd number of times above an inside point. (A
    column per loop over all triangles: fast at any vertex count, unlike winding numbers.)"""
    jitter = nudge * np.array([1.234567e-7, 7.654321e-8]) * size     # keep columns off edges and vertices
    xs = lo[0] + (np.arange(counts[0]) + offset) * size + jitter[0]
    ys = lo[1] + (np.arange(counts[1]) + offset) * size + jitter[1]
    zs = lo[2] + (np.arange(counts[2]) + offset) * size
    a, b, c = rest[faces[:, 0]], rest[faces[:, 1]], rest[faces[:, 2]]
    e1, e2 = (b - a)[:, :2], (c - a)[:, :2]
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    ok = np.abs(det) > 1e-300
    inside = np.zeros(counts, dtype=bool)
    for i, x in enumerate(xs):
        for j, y in enumerate(ys):
            p = np.array([x, y]) - a[:, :2]
            u = np.where(ok, (p[:, 0] * e2[:, 1] - p[:, 1] * e2[:, 0]) / np.where(ok, det, 1.0), -1.0)
            v = np.where(ok, (e1[:, 0] * p[:, 1] - e1[:, 1] * p[:, 0]) / np.where(ok, det, 1.0), -1.0)
            hit = (u >= 0) & (v >= 0) & (u + v <= 1)
            z = (a[hit, 2] + u[hit] * (b - a)[hit, 2] + v[hit] * (c - a)[hit, 2])
            inside[i, j] = (np.sum(z[None, :] > zs[:, None], axis=1) % 2) == 1
    return inside


def trilinear_gradients(cell_size: float, points=None) -> np.ndarray:
    """d N_a / dX for a cell's 8 corners at its centre [8,3], or at `points` [K,3] (the cells'
    own 0..1 coordinates) [K,8,3] (one-point cubature per cell)."""
    sign = 2.0 * CORNERS - 1.0
    if points is None:
        return sign * 0.25 / cell_size
    p = np.asarray(points, dtype=np.float64)[:, None, :]                     # [K,1,3]
    factor = np.where(CORNERS[None] == 1, p, 1.0 - p)                       # [K,8,3] each axis's 1-D shape value
    out = np.empty((len(points), 8, 3))
    for axis in range(3):
        others = [a for a in range(3) if a != axis]
        out[:, :, axis] = sign[None, :, axis] * factor[:, :, others[0]] * factor[:, :, others[1]]
    return out / cell_size


# --------------------------------------------------------------------------- smooth weights

def lattice_laplacian(cell_nodes, n):
    pairs = []
    for a in range(8):
        for axis in range(3):
            b = a | (4 >> axis)
            if b != a:
                pairs.append(cell_nodes[:, [a, b]])
    e = np.unique(np.sort(np.concatenate(pairs), axis=1), axis=0)
    return graph_laplacian(e, n)


def mesh_laplacian(faces, n):
    return graph_laplacian(face_edges(faces)[0], n)


def graph_laplacian(edges, n):
    A = sp.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    A = (A + A.T).tocsr()
    return (sp.diags(np.asarray(A.sum(axis=1)).ravel()) - A).tocsr()


def smooth_functions(L, mass, count: int, held=None, points=None):
    """The `count` lowest eigenpairs of L phi = lambda M phi: functions [n, count] (the constant
    first, each scaled to a largest magnitude of 1) and eigenvalues [count] (the shape's spectrum).

    `held` [n] in [0, 1] (the pins' weight at each node, or None): the functions after the
    constant are the lowest ones of the body held there, (L + k diag(held)) phi = lambda M phi
    with k far above L's diagonal, made exactly zero where it is held fully.
    `points` [n,3] (the nodes' positions, or None): each function's sign, and its turn within a
    set of equal eigenvalues, fixed by the shape (`canonical_functions`) rather than by the solver."""
    n = L.shape[0]
    count = min(count, n - 1)
    pinned = held is not None and np.any(held > 0)
    if pinned:
        L = L + sp.diags(PIN_PENALTY * float(L.diagonal().max()) * np.asarray(held, dtype=np.float64))
        count -= 1
    M = sp.diags(mass / mass.mean())
    if n <= 4 * count:
        vals, vecs = scipy.linalg.eigh(L.toarray(), M.toarray(), subset_by_index=[0, count - 1])
    else:   # shift-invert around 0: a sparse factorisation instead of a dense eigensolver (10x faster at 700 nodes)
        vals, vecs = spla.eigsh(L.tocsc(), k=count, M=M.tocsc(), sigma=-1e-3, which="LM",
                                v0=np.ones(n))   # a fixed start vector: the same weights on every run
        order = np.argsort(vals)
        vals, vecs = vals[order], vecs[:, order]
    if pinned:
        vecs = np.concatenate([np.ones((n, 1)), vecs * (1.0 - held)[:, None]], axis=1)
        vals = np.concatenate([[0.0], vals])
    vecs[:, 0] = 1.0
    if points is not None:
        vecs[:, 1:] = canonical_functions(vecs[:, 1:], vals[1:], points, mass)
    return vecs / np.abs(vecs).max(axis=0, keepdims=True), np.maximum(vals, 0.0)


def probe(points) -> np.ndarray:
    """A fixed smooth function of position with no symmetry a mesh could share: what
    `canonical_functions` measures eigenfunctions against."""
    x = np.asarray(points, dtype=np.float64)
    return np.sin(x @ [3.1, 1.7, 2.3] + 0.5) + 0.5 * np.sin(x @ [-2.9, 5.3, 4.1] + 1.3)


def canonical_functions(vecs, vals, points, mass, equal=1e-6) -> np.ndarray:
    """Eigenfunctions [n,k] made independent of the solver's accidents: within a set of equal
    eigenvalues (relative gap under `equal`), turned to diagonalise the probe's weighted inner
    product; each then signed so that its mass-weighted mean of the probe is positive.

    An eigensolver returns each function up to its sign (and a set of equal ones up to a turn),
    and which one it returns depends on rounding: another CPU, or another start vector, flipped
    some of a flag's handles. The span, so the state space, was the same, but the cubature fit
    samples poses in these coordinates and chose other triangles (62 of 200 in common), and the
    flag's distance from the reference went from 0.105 to 0.122."""
    vecs = np.array(vecs, dtype=np.float64)
    weight = np.asarray(mass, dtype=np.float64) * probe(points)
    floor = equal * float(np.abs(vals).max(initial=0.0))   # zero modes (a mesh in several pieces) are equal too
    start = 0
    while start < vecs.shape[1]:
        end = start + 1
        while end < vecs.shape[1] and vals[end] - vals[end - 1] <= equal * max(abs(vals[end]), floor):
            end += 1
        if end - start > 1:
            block = vecs[:, start:end]
            _, turn = np.linalg.eigh(block.T @ (weight[:, None] * block))
            vecs[:, start:end] = block @ turn
        start = end
    sign = np.sign(weight @ vecs)
    return vecs * np.where(sign == 0, 1.0, sign)


# --------------------------------------------------------------------------- elements in the subspace

def solid_local_map(node_basis, cell_nodes, cell_size, cell_points=None):
    """vec F of each cell at its centre (or at `cell_points` [C,3], 0..1 in each cell) as
    offset + G q: (G [C,9,d], offset [C,9])."""
    dN = trilinear_gradients(cell_size, cell_points)                    # [8,3] or [C,8,3]
    spec = "kaid,aj->kijd" if cell_points is None else "kaid,kaj->kijd"
    G = np.einsum(spec, node_basis[cell_nodes], dN).reshape(len(cell_nodes), 9, -1)
    return G, np.tile(np.eye(3).ravel(), (len(cell_nodes), 1))


def cloth_local_map(node_basis, nodes, triangles):
    """A triangle's two edges (x1 - x0, x2 - x0) as offset + G q: (G [K,6,d], offset [K,6],
    rest lengths of its three edges [K,3])."""
    Ut = node_basis[triangles]                                          # [K,3,3,d]
    G = np.stack([Ut[:, 1] - Ut[:, 0], Ut[:, 2] - Ut[:, 0]], axis=1).reshape(len(triangles), 6, -1)
    offset = np.concatenate([nodes[triangles[:, 1]] - nodes[triangles[:, 0]],
                             nodes[triangles[:, 2]] - nodes[triangles[:, 0]]], axis=1)
    return G, offset, np.linalg.norm(triangle_edges(offset), axis=-1)


FIT_ELEMENTS = 4096       # a sheet with more triangles is fitted against this many, spread over it


def fitted_cubature(kind, node_basis, nodes, node_mass, elements, full_weights, cell_size, samples, full=False,
                    cell_points=None):
    """(chosen elements, their weights, held-out force error): `cubature.fit_cubature` against
    full integration over `elements` (cells [E,8] or triangles [E,3] with volume/area weights);
    `full`: all elements with their own weights (error 0)."""
    if full:
        return np.arange(len(elements)), np.asarray(full_weights, dtype=np.float64), 0.0
    if kind == "solid":
        forces = ElementForces(kind, *solid_local_map(node_basis, elements, cell_size, cell_points))
    else:
        forces = ElementForces(kind, *cloth_local_map(node_basis, nodes, elements))
    fit = fit_cubature(forces, full_weights, rest_stiffness(forces, full_weights), node_basis, nodes, node_mass,
                       cap=max(samples, CAP, node_basis.shape[2] // 2))   # more coordinates need more samples
    return fit.elements, fit.weights, fit.error


# --------------------------------------------------------------------------- the subspace of one mesh

@dataclass
class Subspace:
    kind: str                     # "solid" | "cloth"
    norm: Normalisation
    rest: np.ndarray              # [N,3] normalised rest vertices
    faces: np.ndarray
    nodes: np.ndarray             # [n,3] normalised rest nodes (lattice nodes; mesh vertices for cloth)
    node_mass: np.ndarray         # [n] mass fractions (sum 1)
    W: sp.csr_matrix              # [N,n] vertices from nodes
    weights: np.ndarray           # [n,H] handle weights at the nodes
    functions: np.ndarray         # [n,2H] the Laplacian eigenfunctions the weights come from
    spectrum: np.ndarray          # [2H] their eigenvalues
    node_basis: np.ndarray        # [n,3,d] mass-orthonormal node displacement basis
    vertex_basis: np.ndarray      # [N,3,d]
    cell_nodes: np.ndarray | None   # solids: [K,8] cells (cubature samples: the chosen cells)
    cell_size: float
    cell_volume: np.ndarray | None  # [K] their fitted cubature weights (the body's volume is 1)
    cell_points: np.ndarray | None  # solids: [K,3] where each sample cell's F is taken (0..1 in it); None: its centre
    triangles: np.ndarray | None    # cloth: [K,3] sample triangles (node indices)
    triangle_area: np.ndarray | None  # [K] their fitted cubature weights (the sheet's area is 1)
    bending: sp.csr_matrix | None   # cloth: [n,n] quadratic bending matrix (normalised units)
    contact: np.ndarray           # [Kc] vertex indices where the floor is felt
    cubature_error: float = 0.0   # relative error of the fitted reduced force on held-out poses
    centre: np.ndarray | None = None            # [3] the nodes' centre of mass (Xc = X - centre)
    handle_transform: np.ndarray | None = None  # [12H,d] the handles' affine coordinates of q: node_basis = J T

    @property
    def dims(self) -> int:
        return self.node_basis.shape[2]

    def decode(self, q) -> np.ndarray:
        return self.rest + self.vertex_basis @ np.asarray(q)

    @property
    def vertex_mass(self) -> np.ndarray:
        if not hasattr(self, "_vertex_mass"):
            m = np.asarray(self.W.T.sum(axis=1)).ravel()
            vm = self.W @ (self.node_mass / np.maximum(m, 1e-30))
            self._vertex_mass = vm / vm.sum()
        return self._vertex_mass

    @property
    def vertex_gram(self) -> np.ndarray:
        """B^T M B over the vertices [d,d] (B the vertex basis, M their masses): once per mesh."""
        if not hasattr(self, "_vertex_gram"):
            B = self.vertex_basis.reshape(-1, self.dims)
            self._vertex_gram = B.T @ (np.repeat(self.vertex_mass, 3)[:, None] * B)
        return self._vertex_gram


def handle_jacobian(points, centre, weights):
    """[P,3,12H]: displacement of each point per handle coordinate (A_h row-major, then b_h).
    numpy in, numpy out; torch in (training differentiates through the weights), torch out."""
    lib = torch if torch.is_tensor(weights) else np
    P, H = weights.shape
    xc = points - centre
    eye = lib.eye(3, dtype=weights.dtype)
    JA = lib.einsum("ij,nh,nk->nihjk", eye, weights, xc).reshape(P, 3, H, 9)
    Jb = lib.einsum("ij,nh->nihj", eye, weights)
    joined = torch.cat([JA, Jb], -1) if lib is torch else np.concatenate([JA, Jb], -1)
    return joined.reshape(P, 3, 12 * H)


def handle_scalars(points, centre, weights) -> np.ndarray:
    """[P,4H]: w_h(X) (Xc, 1), the scalar functions one displacement component's columns of
    `handle_jacobian` hold (`component_columns`), the same for every component."""
    affine = np.concatenate([points - centre, np.ones((len(points), 1))], axis=1)
    return (weights[:, :, None] * affine[:, None, :]).reshape(len(points), -1)


def component_columns(handles: int, component: int) -> np.ndarray:
    """The handle coordinates (`handle_jacobian`'s order: A_h row-major, then b_h) that move one
    displacement component: row `component` of each A_h and that entry of b_h."""
    return np.array([12 * h + c for h in range(handles) for c in (3 * component, 3 * component + 1,
                                                                   3 * component + 2, 9 + component)])


def mass_orthonormal_transform(scalar, mass, drop=1e-9) -> np.ndarray:
    """T [12H,d] such that the columns of J T span the same displacements as J [n,3,12H]
    (`handle_jacobian`, whose components' columns are the scalar functions `scalar` [n,4H]), with
    (J T)^T diag(m) (J T) = I; directions the nodes cannot feel (e.g. stretching across a flat
    sheet) are dropped. T q are the handles' own coordinates of q.

    Row i of A_h and b_h[i] move the component x_i alone, with the same scalar functions
    w_h (Xc, 1) for each i, so the mass Gram is I3 (x) G_s. T is made from G_s alone and laid out
    component-major, q = (q_x, q_y, q_z): every displacement component, and so every sample's
    local map, uses the same d/3 scalar functions (`LatentScene` assembles Hessians in 3 x 3
    blocks of those, a third of the work), and the basis no longer depends on how LAPACK splits the
    threefold eigenvalue this makes (two threads gave another rotation of the same space; a
    symmetric shape's own repeated eigenvalues still can be split either way)."""
    handles = scalar.shape[1] // 4
    G = scalar.T @ (mass[:, None] * scalar)
    vals, vecs = np.linalg.eigh(G)
    keep = vals > drop * vals.max()
    Ts = canonical_turn(vecs[:, keep] / np.sqrt(vals[keep]), G)
    k = Ts.shape[1]
    T = np.zeros((12 * handles, 3 * k))
    for i in range(3):
        T[component_columns(handles, i), i * k:(i + 1) * k] = Ts
    return T


def canonical_turn(Ts, G, independent=1e-5) -> np.ndarray:
    """Ts [c,k] (G-orthonormal columns) turned to the G-orthonormal basis that Gram-Schmidt makes
    of the original columns in their order, skipping those (nearly) dependent on earlier ones.
    eigh returns the kept space in any orthonormal basis, whose signs and turns within equal
    eigenvalues depend on rounding; the coordinates, and so the poses the cubature is fitted on,
    must not (another basis of the same flag's space chose other sample triangles, 73 of 200 in common)."""
    C = Ts.T @ G                                    # each original column's coordinates in Ts's basis
    chosen = []
    for j in range(C.shape[1]):
        v = C[:, j].copy()
        scale = np.linalg.norm(v)
        for _ in range(2):                          # twice is enough (Kahan-Parlett)
            for u in chosen:
                v -= (u @ v) * u
        if np.linalg.norm(v) > independent * max(scale, 1e-300):
            chosen.append(v / np.linalg.norm(v))
        if len(chosen) == Ts.shape[1]:
            return Ts @ np.stack(chosen, axis=1)
    return Ts


def handle_weights(functions, spectrum, handles: int, weight_field=None) -> np.ndarray:
    """[n, handles]: the lowest eigenfunctions, or the learned field's weights (`WeightField.for_handles`)."""
    handles = min(handles, functions.shape[1])
    return functions[:, :handles] if weight_field is None else weight_field.weights(functions, spectrum, handles)


def held_weights(weights, functions, node_held) -> np.ndarray:
    """The handle weights with the learned field's correction (weights minus the eigenfunctions
    they start from) scaled by (1 - held) like the eigenfunctions themselves (`smooth_functions`):
    a held node keeps only the first handle. The eigenfunctions are masked once: masking the
    whole weights again scaled a lattice node that carries pinned and free vertices by (1 - h)^2."""
    eigen = functions[:, 1:weights.shape[1]]
    out = weights.copy()
    out[:, 1:] = eigen + (weights[:, 1:] - eigen) * (1.0 - node_held)[:, None]
    return out


def held_pins(setup):
    """Which vertices the subspace holds [N] (1 held, 0 free), or None for none.

    Firm pins (weight 1, a scene's default) are held: every handle but the first leaves them
    where they are. The first handle is one affine map of the whole body, so it can keep them
    there or move them together (a swing, a carried edge); pins animated apart from one another
    need the other handles too and are not held, and a softer pin (a painted falloff) stays a
    spring on a free vertex."""
    firm = np.asarray(setup.pin_weight) >= 1.0 - 1e-6
    if not HOLD_PINS or not firm.any():
        return None
    rest = np.concatenate([setup.rest[firm], np.ones((int(firm.sum()), 1))], axis=1)
    targets = [setup.x0[firm]] + ([] if setup.pin_targets is None else list(np.asarray(setup.pin_targets)[:, firm]))
    targets = np.concatenate(targets, axis=1).astype(np.float64)                     # [P, 3T]
    miss = np.abs(rest @ np.linalg.lstsq(rest, targets, rcond=None)[0] - targets).max()
    if miss > AFFINE_PINS * float(np.linalg.norm(np.ptp(setup.rest, axis=0))):
        return None
    return firm.astype(np.float64)


def held_nodes(W, held) -> np.ndarray | None:
    """The pins' weight at each node [n] from the vertices' [N] (a lattice node: the mean over
    the vertices it carries, weighted by how much it carries them); None when nothing is held."""
    held = np.clip(np.asarray(held, dtype=np.float64), 0.0, 1.0)
    if not held.any():
        return None
    carried = np.asarray(W.sum(axis=0)).ravel()
    return np.clip(np.asarray(W.T @ held).ravel() / np.maximum(carried, 1e-12), 0.0, 1.0) * (carried > 0)


def held_points(lat: Lattice, x, faces, held):
    """(W [P,n], held [P]) of the vertices and of points on the pinned faces between them
    (`core.geometry.pinned_surface`, half a cell apart): the lattice under a pinned face is held
    whole, not only the cells around its vertices."""
    points, weight = pinned_surface(x, faces, held, 0.5 * lat.cell_size)
    if not len(points):
        return lat.W, held
    return sp.vstack([lat.W, lat.weights_at(points)]).tocsr(), np.concatenate([held, weight])


def build_subspace(rest, faces, kind: str, handles: int, lattice_cells: int, samples: int,
                   contact_samples: int, weight_field=None, full_integration=None, held=None) -> Subspace:
    """Everything one mesh needs, once: nodes, masses, smooth handle weights, the mass-orthonormal
    basis, the cubature samples of the elastic energy, the bending matrix (cloth), contact samples.
    `weight_field` (`model.WeightField`) refines the eigenfunctions into the handle weights (None:
    the lowest eigenfunctions themselves). `full_integration`: every element is a sample, with
    its own volume or area (what the fitted cubature is measured against); False: fitted samples;
    None: every cell of a solid's lattice up to FULL_INTEGRATION_CELLS, fitted samples beyond
    (and always for sheets). `held` [N] (the
    vertices' pin weights, or None): every handle but the first leaves the held vertices where
    they are (`smooth_functions`), so the pins hold the first handle alone and the others fold
    the body right up to them."""
    norm = Normalisation.of(rest)
    x = norm.forward(rest)
    faces = np.asarray(faces, dtype=np.int64)
    solid = kind == "solid"
    if solid:
        lat = build_lattice(x, faces, lattice_cells)
        nodes, W = lat.nodes, lat.W
        cell_mass = lat.inside_share
        node_mass = np.zeros(len(nodes))
        np.add.at(node_mass, lat.cell_nodes.ravel(), np.repeat(cell_mass / 8.0, 8))
        L = lattice_laplacian(lat.cell_nodes, len(nodes))
    else:
        nodes, W = x, sp.identity(len(x), format="csr")
        node_mass = lumped_vertex_areas(x, faces) if len(faces) else np.ones(len(x))
        node_mass = np.where(node_mass > 0, node_mass, max(node_mass.max(), 1e-12) * 1e-3)
        L = mesh_laplacian(faces, len(x))
    node_mass = node_mass / node_mass.sum()
    node_held = None if held is None else held_nodes(*held_points(lat, x, faces, held) if solid else (W, held))
    field_handles = 0 if weight_field is None else weight_field.handles
    functions, spectrum = smooth_functions(L, node_mass, max(2 * handles, 2 * field_handles), node_held, nodes)
    weights = handle_weights(functions, spectrum, handles, weight_field)
    if node_held is not None:
        weights = held_weights(weights, functions, node_held)
    centre = (node_mass[:, None] * nodes).sum(axis=0)
    scalar = handle_scalars(nodes, centre, weights)
    transform = mass_orthonormal_transform(scalar, node_mass)
    d = transform.shape[1]
    # J T component by component (J itself, [n,3,12H], is 0.9 GB at 100k vertices): each
    # component's block is the scalar functions times the same d/3 columns of T
    per_component = scalar @ transform[component_columns(weights.shape[1], 0), :d // 3]
    node_basis = np.zeros((len(nodes), 3, d))
    for i in range(3):
        node_basis[:, i, i * d // 3:(i + 1) * d // 3] = per_component
    vertex_basis = (W @ node_basis.reshape(len(nodes), -1)).reshape(len(x), 3, d)
    contact = farthest_point_sample(x, contact_samples)
    common = dict(kind="solid" if solid else "cloth", norm=norm, rest=x, faces=faces, nodes=nodes,
                  node_mass=node_mass, W=W, weights=weights, functions=functions, spectrum=spectrum,
                  node_basis=node_basis, vertex_basis=vertex_basis,
                  contact=np.unique(contact), centre=centre, handle_transform=transform)
    if solid:
        volume = lat.inside_share / lat.inside_share.sum()
        every_cell = len(lat.cell_nodes) <= FULL_INTEGRATION_CELLS if full_integration is None else full_integration
        chosen, weights, error = fitted_cubature(kind, node_basis, nodes, node_mass, lat.cell_nodes, volume,
                                                 lat.cell_size, samples, every_cell, lat.cell_points)
        points = None if lat.cell_points is None else lat.cell_points[chosen]
        return Subspace(**common, cell_nodes=lat.cell_nodes[chosen], cell_size=lat.cell_size, cell_volume=weights,
                        cell_points=points,
                        triangles=None, triangle_area=None, bending=None, cubature_error=error)
    area = triangle_areas(x, faces)
    candidates = np.arange(len(faces))
    if len(candidates) > FIT_ELEMENTS and not full_integration:
        candidates = np.sort(farthest_point_sample(x[faces].mean(axis=1), FIT_ELEMENTS))
    full = area[candidates] / area[candidates].sum()
    chosen, weights, error = fitted_cubature(kind, node_basis, nodes, node_mass, faces[candidates], full, 0.0, samples,
                                             full_integration)
    return Subspace(**common, cell_nodes=None, cell_size=0.0, cell_volume=None, cell_points=None,
                    triangles=faces[candidates[chosen]],
                    triangle_area=weights, bending=bending_matrix(x, faces), cubature_error=error)


# --------------------------------------------------------------------------- prepared once per mesh

_SUBSPACES = MeshMemo()


def cached_subspace(rest, faces, kind: str, handles: int, lattice_cells: int, samples: int, contact_samples: int,
                    weight_field=None, held=None) -> Subspace:
    """`build_subspace`, made once per mesh and settings (`core.memo`): the cubature fit is the
    costly part of a prepare. A weight field counts as the same while its parameters are
    (their version counters)."""
    field = None if weight_field is None else (
        id(weight_field), tuple((p._version, p.data_ptr()) for p in weight_field.parameters()))
    pins = None if held is None else hashlib.sha1(np.asarray(held, dtype=np.float32).tobytes()).hexdigest()
    return _SUBSPACES.get(rest, faces, (kind, handles, lattice_cells, samples, contact_samples, field, pins),
                          lambda r, f: build_subspace(r, f, kind, handles, lattice_cells, samples, contact_samples,
                                                      weight_field, held=held))
