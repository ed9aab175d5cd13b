"""Mesh geometry shared by every engine: normalisation, areas, volume, normals, masses, sample points."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def bbox_diagonal(x) -> float:
    """The length of the bounding box's diagonal of points x [N,3] (1 where they all coincide): the
    size a body's pins, tolerances and distances are measured against."""
    x = np.asarray(x, np.float64)
    return float(np.linalg.norm(x.max(axis=0) - x.min(axis=0))) or 1.0


@dataclass
class Normalisation:
    """x_normalised = (x - centre) / scale, with scale the bounding-box diagonal (metres)."""
    centre: np.ndarray
    scale: float

    @classmethod
    def of(cls, rest):
        lo, hi = rest.min(axis=0), rest.max(axis=0)
        return cls(0.5 * (lo + hi), float(np.linalg.norm(hi - lo)) or 1.0)

    def forward(self, x):
        return (np.asarray(x, dtype=np.float64) - self.centre) / self.scale

    def inverse(self, xn):
        return np.asarray(xn) * self.scale + self.centre


def triangle_areas(x, faces):
    return 0.5 * np.linalg.norm(np.cross(x[faces[:, 1]] - x[faces[:, 0]], x[faces[:, 2]] - x[faces[:, 0]]), axis=1)


def lumped_vertex_areas(x, faces):
    area = np.zeros(len(x))
    a3 = triangle_areas(x, faces) / 3.0
    for k in range(3):
        np.add.at(area, faces[:, k], a3)
    return area


def face_edges(faces):
    """(edges [E,2], each the lower vertex first, sorted; the edge of each face corner [3F]: corner
    k of face f, counting (0,1) for all faces, then (1,2), then (2,0), is edge corner[k F + f])."""
    faces = np.asarray(faces)
    e = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    if not len(e):
        return np.zeros((0, 2), np.int64), np.zeros(0, np.int64)
    edges, inverse = np.unique(e, axis=0, return_inverse=True)
    return edges, inverse.ravel()


def edge_face_counts(faces) -> np.ndarray:
    """How many triangles share each edge of `face_edges` (2 inside a manifold, 1 on a border)."""
    edges, corner = face_edges(faces)
    return np.bincount(corner, minlength=len(edges))


def is_closed(faces) -> bool:
    """Every edge is shared by exactly two triangles."""
    faces = np.asarray(faces).reshape(-1, 3)
    return len(faces) > 0 and bool(np.all(edge_face_counts(faces) == 2))


def winding_numbers(points, x, faces, chunk=256):
    """Generalised winding number of a closed triangle mesh at each point (1 inside, 0 outside)."""
    out = np.zeros(len(points))
    a0, b0, c0 = x[faces[:, 0]], x[faces[:, 1]], x[faces[:, 2]]
    for s in range(0, len(points), chunk):
        p = points[s:s + chunk, None, :]
        a, b, c = a0[None] - p, b0[None] - p, c0[None] - p
        la, lb, lc = (np.linalg.norm(v, axis=2) for v in (a, b, c))
        det = np.einsum("pfi,pfi->pf", a, np.cross(b, c))
        den = la * lb * lc + np.einsum("pfi,pfi->pf", a, b) * lc + np.einsum("pfi,pfi->pf", b, c) * la \
            + np.einsum("pfi,pfi->pf", c, a) * lb
        out[s:s + chunk] = np.arctan2(det, den).sum(axis=1) / (2.0 * np.pi)
    return out


def vertex_normals(x, faces):
    n = np.zeros_like(x)
    fn = np.cross(x[faces[:, 1]] - x[faces[:, 0]], x[faces[:, 2]] - x[faces[:, 0]])
    for k in range(3):
        np.add.at(n, faces[:, k], fn)
    length = np.linalg.norm(n, axis=1, keepdims=True)
    return np.where(length > 0, n / np.maximum(length, 1e-30), 0.0)


def face_columns(faces) -> tuple:
    """The three corner columns of faces [F,3], each contiguous (np.take is fastest with those)."""
    return tuple(np.ascontiguousarray(np.asarray(faces)[:, j]) for j in range(3))


def face_cross(x, corners, xt=None) -> np.ndarray:
    """(x1 - x0) x (x2 - x0) per triangle as [3,F], `corners` from `face_columns`: coordinates in
    rows, so every operation is on contiguous vectors (several times faster than np.cross on
    [F,3] at these sizes). `xt`: x transposed to [3,N] if the caller has it."""
    xt = np.ascontiguousarray(np.asarray(x, np.float64).T) if xt is None else xt
    p0 = np.take(xt, corners[0], axis=1)        # np.take: several times faster than fancy indexing here
    u = np.take(xt, corners[1], axis=1) - p0
    v = np.take(xt, corners[2], axis=1) - p0
    return np.stack([u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]])


def mesh_volume(x, faces, corners=None):
    """Enclosed volume of a closed surface (signed: negative inside out). `corners`: the faces'
    `face_columns` if the caller keeps them."""
    corners = face_columns(faces) if corners is None else corners
    xt = np.ascontiguousarray(np.asarray(x, np.float64).T)
    p0, p1, p2 = (np.take(xt, c, axis=1) for c in corners)      # sum of p0 . (p1 x p2) / 6
    return float(np.dot(p0[0], p1[1] * p2[2] - p1[2] * p2[1]) + np.dot(p0[1], p1[2] * p2[0] - p1[0] * p2[2])
                 + np.dot(p0[2], p1[0] * p2[1] - p1[1] * p2[0])) / 6.0


def vertex_mass_fractions(rest, faces, vertex_mass=None):
    """Share of the body's mass at each vertex (sums to 1). Without recorded masses, mass is
    spread in proportion to the area around each vertex (vertices of no face get the mean)."""
    if vertex_mass is not None:
        m = np.asarray(vertex_mass, dtype=np.float64)
    else:
        m = lumped_vertex_areas(np.asarray(rest, np.float64), faces) if len(faces) else np.ones(len(rest))
        m = np.where(m > 0, m, m[m > 0].mean() if np.any(m > 0) else 1.0)
    return m / m.sum()


def farthest_point_sample(x, k, seed=0):
    """Indices of k points spread over x (greedy farthest-point sampling)."""
    n = len(x)
    if n <= k:
        idx = np.arange(n)
        return np.concatenate([idx, np.random.default_rng(seed).choice(n, k - n)]) if n < k else idx
    rng = np.random.default_rng(seed)
    pool = x if n <= 20000 else x[rng.choice(n, 20000, replace=False)]
    columns = np.ascontiguousarray(np.asarray(pool, np.float64).T)

    def distance(i):        # |pool - pool[i]| as np.linalg.norm sums it (the same ties), one column at a time: 7x faster
        d = columns[0] - columns[0, i]
        d *= d
        for c in columns[1:]:
            t = c - c[i]
            t *= t
            d += t
        return np.sqrt(d, out=d)
    chosen = [int(rng.integers(len(pool)))]
    dist = distance(chosen[0])
    for _ in range(k - 1):
        i = int(np.argmax(dist))
        chosen.append(i)
        np.minimum(dist, distance(i), out=dist)
    if len(pool) == n:
        return np.asarray(chosen)
    # map pool points back to the nearest original vertex indices
    from scipy.spatial import cKDTree
    return cKDTree(x).query(pool[chosen])[1]


def sample_triangles(x, faces, spacing):
    """The points x and points on every triangle, no further apart than about `spacing`."""
    points, _ = triangle_samples(x, faces, spacing)
    return np.concatenate([x, points])


def triangle_samples(x, faces, spacing):
    """(points [P,3], the triangle each lies on [P]): a barycentric grid on every triangle, no
    further apart than about `spacing` (corners included)."""
    pts, owner = [np.zeros((0, 3))], [np.zeros(0, dtype=np.int64)]
    lengths = np.linalg.norm(x[faces[:, [1, 2, 0]]] - x[faces], axis=2).max(axis=1)
    steps = np.ceil(lengths / spacing).astype(int)
    for k in np.unique(steps):
        if k < 1:
            continue
        which = np.nonzero(steps == k)[0]
        sel = faces[which]
        i, j = np.meshgrid(np.arange(k + 1), np.arange(k + 1), indexing="ij")
        keep = (i + j) <= k
        u, v = i[keep] / k, j[keep] / k
        w = 1.0 - u - v
        p = (w[None, :, None] * x[sel[:, 0]][:, None] + u[None, :, None] * x[sel[:, 1]][:, None]
             + v[None, :, None] * x[sel[:, 2]][:, None])
        pts.append(p.reshape(-1, 3))
        owner.append(np.repeat(which, len(u)))
    return np.concatenate(pts), np.concatenate(owner)


def pinned_surface(x, faces, pin_weight, spacing):
    """(points [P,3], pin weights [P]) on the surface the pins cover: points about `spacing`
    apart on every triangle whose three vertices are pinned (weight: the least of the three).
    A pinned face is held whole, not at its corners: Blender's 8-vertex box held by the 4
    corners of its top face hung as from 4 points (issue 43)."""
    pin_weight = np.asarray(pin_weight, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    covered = faces[np.all(pin_weight[faces] > 0, axis=1)] if len(faces) else faces
    if not len(covered):
        return np.zeros((0, 3)), np.zeros(0)
    points, owner = triangle_samples(np.asarray(x, dtype=np.float64), covered, spacing)
    return points, pin_weight[covered].min(axis=1)[owner]
