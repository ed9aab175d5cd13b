"""Procedural shape families for training data, and the demo sample meshes.

`make_shape(family, rng, target_vertices)` returns one random member of a family as a `Mesh`
whose bounding box is centred at the origin and whose longest side is uniformly drawn in
[0.2, 1.0] m. Solids are closed, consistently outward-oriented, manifold triangle meshes
(every edge shared by exactly two faces, no degenerate faces, no duplicate vertices); they get
a random anisotropic scale (each axis 0.4..1.0 of the longest) and a random rotation.

Solid families:
  box           a subdivided box (each side a grid, shared edges welded), sharp or with
                rounded edges (Minkowski sum of a smaller box and a sphere)
  sphere        a geodesic icosphere
  capsule       a cylinder capped by two hemispheres, revolved around z
  torus         a ring with tube/ring radius ratio 0.2..0.45
  superquadric  a parametric superellipsoid with exponents in [0.3, 3], sampled at equal arc
                length along its two generating superellipses; single welded pole vertices
  blob          an icosphere displaced by smooth low-frequency radial noise (amplitude 0.1..0.35)
  union         two or three overlapping ellipsoids that all contain the origin, merged as the
                radial maximum r(dir) = max_k r_k(dir): a star-shaped, hence watertight, surface

Sheet family:
  sheet         an open rectangular grid (aspect ratio 1..3, roughly square cells, checkerboard
                diagonals) in the XY plane, or stood up in the XZ plane half of the time

Every random choice comes from the `rng` passed in, so the same seed gives the same mesh.
`make_sample(name)` builds the fixed demo meshes stored in assets/samples/.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from ..core import geometry
from ..core.formats import Mesh, NeurokError, write_obj

SOLID_FAMILIES = ("box", "sphere", "capsule", "torus", "superquadric", "blob", "union")
SHEET_FAMILIES = ("sheet",)
FAMILIES = SOLID_FAMILIES + SHEET_FAMILIES
SAMPLES = ("soft_toy", "flag", "jelly")

MIN_SIZE, MAX_SIZE = 0.2, 1.0  # longest bounding-box side, metres
MIN_AXIS_SCALE = 0.4  # each local axis is at least this fraction of the longest


# --------------------------------------------------------------------------- public API

def make_shape(family: str, rng: np.random.Generator, target_vertices: int = 800) -> Mesh:
    """A random member of `family`, centred at the origin, with about `target_vertices` vertices."""
    if family not in FAMILIES:
        raise NeurokError(f"unknown shape family '{family}' (one of {', '.join(FAMILIES)})")
    target = max(int(target_vertices), 50)
    if family == "sheet":
        vertices, faces = _random_sheet(rng, target)
        return Mesh(_centre_bounding_box(vertices), faces, name="sheet")
    axis_scale = _random_axis_scale(rng)
    vertices, faces = _SOLID_BUILDERS[family](rng, target, axis_scale)
    vertices = vertices @ _random_rotation(rng).T
    vertices = _fit_longest_side(vertices, rng.uniform(MIN_SIZE, MAX_SIZE))
    return _orient_outward(Mesh(vertices, faces, name=family))


def make_sample(name: str) -> Mesh:
    """A fixed demo mesh: 'soft_toy', 'flag' or 'jelly' (bounding box centred at the origin)."""
    builders = {"soft_toy": _soft_toy, "flag": _flag, "jelly": _jelly}
    if name not in builders:
        raise NeurokError(f"unknown sample '{name}' (one of {', '.join(SAMPLES)})")
    vertices, faces = builders[name]()
    mesh = Mesh(_centre_bounding_box(vertices), faces, name=name)
    return mesh if name == "flag" else _orient_outward(mesh)


def is_watertight(mesh: Mesh) -> bool:
    """True when every edge is used by exactly two faces, once in each direction.

    That makes the surface closed and consistently oriented; faces that repeat a vertex fail.
    """
    f = np.asarray(mesh.faces, dtype=np.int64)
    if len(f) == 0 or np.any(f[:, 0] == f[:, 1]) or np.any(f[:, 1] == f[:, 2]) or np.any(f[:, 2] == f[:, 0]):
        return False
    directed = _directed_edges(f)
    n = max(int(f.max()) + 1, 1)
    keys = directed[:, 0] * n + directed[:, 1]
    if len(np.unique(keys)) != len(keys):
        return False  # an edge used twice in the same direction (or by more than two faces)
    reverse = directed[:, 1] * n + directed[:, 0]
    return bool(np.all(np.isin(reverse, keys)))


def mesh_volume(mesh: Mesh) -> float:
    return geometry.mesh_volume(mesh.vertices, mesh.faces)


def face_areas(mesh: Mesh) -> np.ndarray:
    return geometry.triangle_areas(mesh.vertices, mesh.faces)


# --------------------------------------------------------------------------- placement helpers

def _random_axis_scale(rng) -> np.ndarray:
    scale = rng.uniform(MIN_AXIS_SCALE, 1.0, size=3)
    return scale / scale.max()


def _random_rotation(rng) -> np.ndarray:
    """A uniformly random 3x3 rotation matrix (from a normalised Gaussian quaternion)."""
    w, x, y, z = _unit(rng.normal(size=4))
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def _centre_bounding_box(vertices: np.ndarray) -> np.ndarray:
    return vertices - 0.5 * (vertices.min(axis=0) + vertices.max(axis=0))


def _fit_longest_side(vertices: np.ndarray, longest: float) -> np.ndarray:
    vertices = _centre_bounding_box(vertices)
    return vertices * (longest / np.ptp(vertices, axis=0).max())


def _orient_outward(mesh: Mesh) -> Mesh:
    if mesh_volume(mesh) < 0:
        mesh.faces = mesh.faces[:, ::-1].copy()
    return mesh


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _directed_edges(faces: np.ndarray) -> np.ndarray:
    return np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])


def _random_directions(rng, count: int) -> np.ndarray:
    return _unit(rng.normal(size=(count, 3)))


# --------------------------------------------------------------------------- mesh topologies

@lru_cache(maxsize=32)
def _geodesic_sphere(frequency: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit icosphere: each icosahedron face split into frequency^2 triangles (10 f^2 + 2 vertices).

    Points are welded exactly by their integer barycentric weights on the icosahedron corners.
    """
    corners, ico_faces = _icosahedron()
    n = frequency
    index_of: dict = {}
    points: list = []

    def point(face, i, j):
        weights = ((face[0], n - i - j), (face[1], i), (face[2], j))
        key = tuple(sorted((vid, w) for vid, w in weights if w > 0))
        if key not in index_of:
            index_of[key] = len(points)
            points.append(sum(w * corners[vid] for vid, w in key))
        return index_of[key]

    tris = []
    for face in ico_faces:
        for i in range(n):
            for j in range(n - i):
                tris.append((point(face, i, j), point(face, i + 1, j), point(face, i, j + 1)))
                if i + j < n - 1:
                    tris.append((point(face, i + 1, j), point(face, i + 1, j + 1), point(face, i, j + 1)))
    vertices = _unit(np.asarray(points, dtype=np.float64))
    faces = np.asarray(tris, dtype=np.int64)
    vertices.flags.writeable = False
    faces.flags.writeable = False
    return vertices, faces


def _icosahedron() -> tuple[np.ndarray, list]:
    t = (1 + 5 ** 0.5) / 2
    corners = _unit(np.array([
        [-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t],
        [0, -1, -t], [0, 1, -t], [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]], dtype=np.float64))
    faces = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4),
             (11, 10, 2), (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8),
             (3, 8, 9), (4, 9, 5), (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)]
    return corners, faces


def _icosphere_frequency(target: int) -> int:
    return max(1, int(round(np.sqrt((target - 2) / 10.0))))


def _radial_surface(radius_of, target: int) -> tuple[np.ndarray, np.ndarray]:
    """A star-shaped closed surface: icosphere directions d pushed out to radius_of(d) > 0."""
    directions, faces = _geodesic_sphere(_icosphere_frequency(target))
    radius = radius_of(directions)
    return directions * radius[:, None], faces.copy()


def _latlong_faces(rings: int, around: int) -> np.ndarray:
    """Faces of a closed lat-long grid: vertex 0 = south pole, rings x around, last = north pole."""
    ring = lambda i, j: 1 + i * around + (j % around)  # noqa: E731
    north = 1 + rings * around
    tris = []
    for j in range(around):
        tris.append((0, ring(0, j + 1), ring(0, j)))
        tris.append((north, ring(rings - 1, j), ring(rings - 1, j + 1)))
    for i in range(rings - 1):
        for j in range(around):
            a, b, c, d = ring(i, j), ring(i, j + 1), ring(i + 1, j + 1), ring(i + 1, j)
            tris += [(a, b, c), (a, c, d)]
    return np.asarray(tris, dtype=np.int64)


def _latlong_vertices(ring_points: np.ndarray, south, north) -> np.ndarray:
    return np.concatenate([np.asarray(south, float)[None], ring_points.reshape(-1, 3),
                           np.asarray(north, float)[None]])


def _periodic_grid_faces(nu: int, nv: int) -> np.ndarray:
    """Faces of a grid periodic in both directions (a torus); vertex (i, j) is i * nv + j."""
    i, j = np.meshgrid(np.arange(nu), np.arange(nv), indexing="ij")
    i, j = i.ravel(), j.ravel()
    a, b = i * nv + j, ((i + 1) % nu) * nv + j
    c, d = ((i + 1) % nu) * nv + (j + 1) % nv, i * nv + (j + 1) % nv
    return np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])


def _grid_faces(nx: int, ny: int) -> np.ndarray:
    """Faces of an open nx x ny vertex grid (vertex (i, j) is j * nx + i), normals along +z
    for x-right/y-up layouts, diagonals alternating in a checkerboard."""
    tris = []
    for j in range(ny - 1):
        for i in range(nx - 1):
            a, b, c, d = j * nx + i, j * nx + i + 1, (j + 1) * nx + i + 1, (j + 1) * nx + i
            tris += [(a, b, c), (a, c, d)] if (i + j) % 2 == 0 else [(a, b, d), (b, c, d)]
    return np.asarray(tris, dtype=np.int64)


def _box_lattice(counts) -> tuple[np.ndarray, np.ndarray]:
    """Surface of an integer lattice box [0, m]^3 split into unit quads; shared edges welded.

    Returns lattice coordinates in [-1, 1] per axis (float) and outward-oriented faces.
    """
    counts = np.asarray(counts, dtype=np.int64)
    grid = np.stack(np.meshgrid(*[np.arange(m + 1) for m in counts], indexing="ij"), axis=-1)
    on_surface = np.any((grid == 0) | (grid == counts), axis=-1)
    index = np.full(on_surface.shape, -1, dtype=np.int64)
    index[on_surface] = np.arange(int(on_surface.sum()))
    tris = []
    for axis in range(3):
        for side in (0, 1):
            tris.append(_box_side_faces(index, counts, axis, side))
    lattice = grid[on_surface].astype(np.float64)
    return 2.0 * lattice / counts - 1.0, np.concatenate(tris)


def _box_side_faces(index: np.ndarray, counts: np.ndarray, axis: int, side: int) -> np.ndarray:
    u_axis, v_axis = (axis + 1) % 3, (axis + 2) % 3  # u x v = +axis
    if side == 0:
        u_axis, v_axis = v_axis, u_axis
    sl = [slice(None)] * 3
    sl[axis] = counts[axis] if side else 0
    plane = index[tuple(sl)]  # remaining axes in increasing order
    if u_axis > v_axis:
        plane = plane.T  # make rows follow u and columns follow v
    a, b = plane[:-1, :-1], plane[1:, :-1]
    c, d = plane[1:, 1:], plane[:-1, 1:]
    return np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)])


# --------------------------------------------------------------------------- radial functions

def _ellipsoid_radius(directions, centre, semi_axes, rotation) -> np.ndarray:
    """Distance from the origin along each direction to the surface of an ellipsoid containing it."""
    to_local = rotation.T / np.asarray(semi_axes, float)[:, None]
    p = directions @ to_local.T
    q = to_local @ np.asarray(centre, float)
    pq, pp, qq = p @ q, np.einsum("ij,ij->i", p, p), q @ q
    return (pq + np.sqrt(pq * pq - pp * (qq - 1.0))) / pp


def _capsule_radius(directions, tip, radius) -> np.ndarray:
    """Distance from the origin along each direction to a capsule around the segment origin-tip."""
    tip = np.asarray(tip, float)
    length = np.linalg.norm(tip)
    axis = tip / length
    best = np.full(len(directions), float(radius))  # the cap around the origin
    along = directions @ axis
    across = np.linalg.norm(directions - along[:, None] * axis, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_side = radius / across
    side_ok = (across > 0) & (t_side * along >= 0) & (t_side * along <= length)
    best = np.where(side_ok, np.maximum(best, t_side), best)
    dp = directions @ tip
    disc = dp * dp - length * length + radius * radius
    t_cap = dp + np.sqrt(np.maximum(disc, 0.0))
    return np.where(disc >= 0, np.maximum(best, t_cap), best)


def _smooth_noise(directions, rng) -> np.ndarray:
    """Low-frequency noise on the sphere in [-1, 1]: a few random plane waves."""
    waves = int(rng.integers(3, 7))
    axes = _random_directions(rng, waves)
    freq = rng.uniform(1.0, 3.0, size=waves)
    phase = rng.uniform(0, 2 * np.pi, size=waves)
    weight = rng.uniform(0.5, 1.0, size=waves)
    noise = np.cos((directions @ axes.T) * freq + phase) @ weight
    noise -= noise.mean()
    return noise / np.abs(noise).max()


# --------------------------------------------------------------------------- solid families

def _box(rng, target, axis_scale):
    rounding = 0.0 if rng.random() < 0.5 else rng.uniform(0.05, 0.3) * axis_scale.min()
    return _rounded_box(axis_scale, rounding, target)


def _rounded_box(half_extents, rounding: float, target: int):
    """A box (half extents given) whose edges are rounded with `rounding` (0 = sharp).

    Lattice coordinates are warped so the samples are evenly spaced in arc length, then each
    point is pushed to inner box + rounding * direction (the Minkowski sum of box and ball).
    """
    half = np.asarray(half_extents, float)
    inner = half - rounding
    path = 2 * (inner + rounding * np.pi / 4)  # length of one side's cross-section
    counts = _counts_for_area(path, target)
    lattice, faces = _box_lattice(counts)
    s = np.abs(lattice) * (inner + rounding * np.pi / 4)
    if rounding > 0:
        over = np.maximum(s - inner, 0.0)
        s = np.minimum(s, inner) + rounding * np.tan(over / rounding)
    q = np.sign(lattice) * s
    core = np.clip(q, -inner, inner)
    offset = q - core
    length = np.linalg.norm(offset, axis=1, keepdims=True)
    if rounding > 0:
        q = core + rounding * offset / np.where(length > 0, length, 1.0)
    return q, faces


def _counts_for_area(side_lengths, target: int) -> np.ndarray:
    """Lattice counts proportional to side lengths with about `target` surface vertices."""
    a, b, c = side_lengths
    k = np.sqrt(max(target - 2, 6) / (2 * (a * b + b * c + c * a)))
    return np.maximum(1, np.round(k * np.asarray(side_lengths))).astype(int)


def _sphere(rng, target, axis_scale):
    vertices, faces = _radial_surface(lambda d: np.ones(len(d)), target)
    return vertices * axis_scale, faces


def _blob(rng, target, axis_scale):
    amplitude = rng.uniform(0.1, 0.35)
    vertices, faces = _radial_surface(lambda d: 1.0 + amplitude * _smooth_noise(d, rng), target)
    return vertices * axis_scale, faces


def _union(rng, target, axis_scale):
    parts = [_random_ellipsoid_around_origin(rng) for _ in range(int(rng.integers(2, 4)))]
    radius_of = lambda d: np.max([_ellipsoid_radius(d, *part) for part in parts], axis=0)  # noqa: E731
    vertices, faces = _radial_surface(radius_of, target)
    return vertices * axis_scale, faces


def _random_ellipsoid_around_origin(rng):
    semi_axes = rng.uniform(0.3, 1.0, size=3)
    rotation = _random_rotation(rng)
    offset = _random_directions(rng, 1)[0] * rng.uniform(0.3, 0.75)  # |offset| < 1: origin inside
    return rotation @ (semi_axes * offset), semi_axes, rotation


def _capsule(rng, target, axis_scale):
    half_length = rng.uniform(0.25, 1.5)  # cylinder half length, radius 1
    around = max(6, int(round(np.sqrt(target / (0.5 + half_length / np.pi)))))
    step = 2 * np.pi / around
    cap_rings = max(2, int(round((np.pi / 2) / step)))
    body_rings = max(1, int(round(2 * half_length / step)))
    cap_angles = np.linspace(-np.pi / 2, 0, cap_rings + 1)[1:]  # south cap, pole excluded
    profile_z = np.concatenate([np.sin(cap_angles) - half_length,
                                np.linspace(-half_length, half_length, body_rings + 1)[1:],
                                half_length - np.sin(cap_angles[-2::-1])])
    profile_r = np.concatenate([np.cos(cap_angles), np.ones(body_rings), np.cos(cap_angles[-2::-1])])
    omega = np.arange(around) * step
    rings = np.stack([profile_r[:, None] * np.cos(omega), profile_r[:, None] * np.sin(omega),
                      np.broadcast_to(profile_z[:, None], (len(profile_z), around))], axis=-1)
    top = half_length + 1.0
    vertices = _latlong_vertices(rings, (0, 0, -top), (0, 0, top))
    return vertices * axis_scale, _latlong_faces(len(profile_z), around)


def _torus(rng, target, axis_scale):
    ratio = rng.uniform(0.2, 0.45)  # tube radius / ring radius
    tube = max(6, int(round(np.sqrt(target * ratio))))
    ring = max(8, int(round(target / tube)))
    u = np.arange(ring) * 2 * np.pi / ring
    v = np.arange(tube) * 2 * np.pi / tube
    uu, vv = np.meshgrid(u, v, indexing="ij")
    reach = 1.0 + ratio * np.cos(vv)
    vertices = np.stack([reach * np.cos(uu), reach * np.sin(uu), ratio * np.sin(vv)], -1).reshape(-1, 3)
    return vertices * axis_scale, _periodic_grid_faces(ring, tube)


def _superquadric(rng, target, axis_scale):
    e_lat, e_lon = rng.uniform(0.3, 3.0, size=2)
    rings = max(3, int(round(np.sqrt(target / 2.0))))
    around = 2 * rings
    eta = _equal_arc_parameters(e_lat, -np.pi / 2, np.pi / 2, rings + 2)[1:-1]  # poles excluded
    omega = _equal_arc_parameters(e_lon, -np.pi, np.pi, around + 1)[:-1]  # periodic
    ring_r, ring_z = _signed_power(np.cos(eta), e_lat), _signed_power(np.sin(eta), e_lat)
    cx, cy = _signed_power(np.cos(omega), e_lon), _signed_power(np.sin(omega), e_lon)
    points = np.stack([ring_r[:, None] * cx, ring_r[:, None] * cy,
                       np.broadcast_to(ring_z[:, None], (rings, around))], axis=-1)
    vertices = _latlong_vertices(points, (0, 0, -1), (0, 0, 1))
    return vertices * axis_scale, _latlong_faces(rings, around)


def _signed_power(x, exponent):
    return np.sign(x) * np.abs(x) ** exponent


def _equal_arc_parameters(exponent, start, stop, count) -> np.ndarray:
    """Angles along the superellipse (C^e, S^e) from start to stop at equal arc-length steps."""
    fine = np.linspace(start, stop, 4097)
    curve = np.stack([_signed_power(np.cos(fine), exponent), _signed_power(np.sin(fine), exponent)], 1)
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(curve, axis=0), axis=1))])
    return np.interp(np.linspace(0.0, arc[-1], count), arc, fine)


_SOLID_BUILDERS = {"box": _box, "sphere": _sphere, "capsule": _capsule, "torus": _torus,
                   "superquadric": _superquadric, "blob": _blob, "union": _union}


# --------------------------------------------------------------------------- sheets

def _random_sheet(rng, target):
    aspect = rng.uniform(1.0, 3.0)
    longest = rng.uniform(MIN_SIZE, MAX_SIZE)
    density = target * rng.uniform(0.75, 1.25)  # several resolutions across calls
    ny = max(2, int(round(np.sqrt(density / aspect))))
    nx = max(2, int(round(density / ny)))
    vertices, faces = _sheet_grid(longest, longest * (ny - 1) / (nx - 1), nx, ny)
    if rng.random() < 0.5:
        vertices = vertices[:, [0, 2, 1]]  # stand up in the XZ plane
    return vertices, faces


def _sheet_grid(width: float, height: float, nx: int, ny: int):
    """An open nx x ny vertex grid in the XY plane, x in [0, width], y in [0, height], normal +z."""
    x, y = np.meshgrid(np.linspace(0, width, nx), np.linspace(0, height, ny))
    vertices = np.stack([x.ravel(), y.ravel(), np.zeros(nx * ny)], axis=1)
    return vertices, _grid_faces(nx, ny)


# --------------------------------------------------------------------------- demo samples

def _soft_toy():
    """A teddy-like bear about 0.3 m tall, facing -y: radial max of ellipsoids and capsules."""
    identity = np.eye(3)
    ellipsoids = [((0, 0, -0.07), (0.085, 0.075, 0.10), identity),  # body
                  ((0, 0, 0.065), (0.07, 0.065, 0.075), identity)]  # head
    capsules = [((0, -0.065, 0.05), 0.028),  # snout
                ((0.055, 0, 0.125), 0.025), ((-0.055, 0, 0.125), 0.025),  # ears
                ((0.10, -0.02, -0.05), 0.03), ((-0.10, -0.02, -0.05), 0.03),  # arms
                ((0.05, -0.04, -0.15), 0.035), ((-0.05, -0.04, -0.15), 0.035)]  # legs

    def radius_of(d):
        radii = [_ellipsoid_radius(d, *e) for e in ellipsoids] + [_capsule_radius(d, *c) for c in capsules]
        return np.max(radii, axis=0)

    vertices, faces = _radial_surface(radius_of, 1500)
    return vertices * (0.3 / np.ptp(vertices[:, 2])), faces


def _flag():
    """A 0.6 m x 0.4 m flag hanging in the XZ plane, 25 x 17 vertices; the pole side is x = min."""
    vertices, faces = _sheet_grid(0.6, 0.4, 25, 17)
    return vertices[:, [0, 2, 1]], faces  # y -> z (a mirror), so the normal is -y, towards a front view


def _jelly():
    """A 0.25 m cube with rounded edges (radius 0.035 m), about 1000 vertices."""
    return _rounded_box((0.125, 0.125, 0.125), 0.035, 1000)
