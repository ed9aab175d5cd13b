"""Collision objects: triangle meshes (static or moving) that a simulated object must stay out of.

Engine-independent and pure numpy, so both engines (and the add-on, and tests) share one definition:

* `Collider`            one collision mesh: faces, vertex positions per frame (one frame = static),
                        outer/inner thickness, friction, damping (Blender's Collision settings).
* `closest_points`      closest point on a triangle mesh, distance, face and normal, for many points.
* `signed_distance`     distance to the surface, negative inside (closed meshes: winding number;
                        open meshes: the side of the closest face's normal).
* `contact_penalty`     the penalty energy E = ½ k Σ m_i max(0, thickness − d_i)², its gradient and a
                        Gauss-Newton Hessian (k m_i n nᵀ per contact): add it to an incremental potential.
* `resolve_contacts`    post-step projection: move penetrating points to the thickness shell and
                        remove their approaching normal velocity (scaled by damping) and part of the
                        tangential one (Coulomb friction) — the simplest hook for any engine.

Units: metres, seconds. `thickness_outer` is the shell kept outside the surface (Blender's Collision ▸
Thickness Outer); points deeper than `thickness_inner` behind an open surface are treated as having
crossed it from the other side and are pushed back along the face normal.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .geometry import is_closed, winding_numbers


@dataclass
class Collider:
    name: str
    faces: np.ndarray  # [F,3] int
    positions: np.ndarray  # [T,V,3] float (T == 1: static)
    thickness_outer: float = 0.02
    thickness_inner: float = 0.2
    friction: float = 0.0  # Coulomb coefficient (0: frictionless)
    damping: float = 0.0  # 0..1: share of the normal approach speed removed at contact (1: no bounce)
    closed: bool | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.faces = np.asarray(self.faces, dtype=np.int64).reshape(-1, 3)
        self.positions = np.asarray(self.positions, dtype=np.float64)
        if self.positions.ndim == 2:
            self.positions = self.positions[None]
        if self.closed is None:
            self.closed = is_closed_surface(self.faces)

    @property
    def frames(self) -> int:
        return len(self.positions)

    def at(self, frame: float) -> np.ndarray:
        """Vertex positions at a (possibly fractional) frame, linear between stored frames, held at the ends."""
        if self.frames == 1:
            return self.positions[0]
        f = float(np.clip(frame, 0, self.frames - 1))
        i = int(np.floor(f))
        j = min(i + 1, self.frames - 1)
        a = f - i
        return (1.0 - a) * self.positions[i] + a * self.positions[j]

    def velocity(self, frame: float, dt: float) -> np.ndarray:
        """Vertex velocities [V,3] (m/s) from the stored motion (zero for a static collider)."""
        if self.frames == 1:
            return np.zeros_like(self.positions[0])
        i = int(np.clip(np.floor(frame), 0, self.frames - 2))
        return (self.positions[i + 1] - self.positions[i]) / dt


is_closed_surface = is_closed      # every edge shared by exactly two triangles


def _closest_on_triangles(p, a, b, c):
    """Closest points on triangles (a, b, c) [P,F,3] to points p [P,1,3] (Ericson, Real-Time Collision Detection)."""
    ab, ac, ap = b - a, c - a, p - a
    d1 = np.einsum("...i,...i", ab, ap)
    d2 = np.einsum("...i,...i", ac, ap)
    bp = p - b
    d3 = np.einsum("...i,...i", ab, bp)
    d4 = np.einsum("...i,...i", ac, bp)
    cp = p - c
    d5 = np.einsum("...i,...i", ab, cp)
    d6 = np.einsum("...i,...i", ac, cp)
    va = d3 * d6 - d5 * d4
    vb = d5 * d2 - d1 * d6
    vc = d1 * d4 - d3 * d2
    denom = va + vb + vc
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(np.abs(denom) > 1e-300, vb / denom, 0.0)
        w = np.where(np.abs(denom) > 1e-300, vc / denom, 0.0)
        out = a + ab * v[..., None] + ac * w[..., None]  # inside the face
        # edge regions
        t_ab = np.clip(d1 / np.where(d1 - d3 == 0, 1e-300, d1 - d3), 0, 1)
        m = (vc <= 0) & (d1 >= 0) & (d3 <= 0)
        out = np.where(m[..., None], a + ab * t_ab[..., None], out)
        t_ac = np.clip(d2 / np.where(d2 - d6 == 0, 1e-300, d2 - d6), 0, 1)
        m = (vb <= 0) & (d2 >= 0) & (d6 <= 0)
        out = np.where(m[..., None], a + ac * t_ac[..., None], out)
        t_bc = np.clip((d4 - d3) / np.where((d4 - d3) + (d5 - d6) == 0, 1e-300, (d4 - d3) + (d5 - d6)), 0, 1)
        m = (va <= 0) & ((d4 - d3) >= 0) & ((d5 - d6) >= 0)
        out = np.where(m[..., None], b + (c - b) * t_bc[..., None], out)
    # vertex regions
    out = np.where(((d1 <= 0) & (d2 <= 0))[..., None], a, out)
    out = np.where(((d3 >= 0) & (d4 <= d3))[..., None], b, out)
    out = np.where(((d6 >= 0) & (d5 <= d6))[..., None], c, out)
    return out


def face_normals(verts: np.ndarray, faces: np.ndarray) -> np.ndarray:
    n = np.cross(verts[faces[:, 1]] - verts[faces[:, 0]], verts[faces[:, 2]] - verts[faces[:, 0]])
    return n / np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-300)


def closest_points(points, verts, faces, chunk: int = 128):
    """(closest [P,3], distance [P], face index [P]) of each point on the triangle mesh (brute force, chunked)."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    verts = np.asarray(verts, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    a, b, c = verts[faces[:, 0]][None], verts[faces[:, 1]][None], verts[faces[:, 2]][None]
    closest = np.empty_like(points)
    dist = np.empty(len(points))
    face = np.empty(len(points), dtype=np.int64)
    for s in range(0, len(points), chunk):
        p = points[s:s + chunk, None, :]
        q = _closest_on_triangles(p, a, b, c)
        d2 = np.einsum("pfi,pfi->pf", q - p, q - p)
        k = np.argmin(d2, axis=1)
        rows = np.arange(len(k))
        closest[s:s + chunk] = q[rows, k]
        dist[s:s + chunk] = np.sqrt(d2[rows, k])
        face[s:s + chunk] = k
    return closest, dist, face


def signed_distance(points, verts, faces, closed: bool | None = None):
    """(signed distance [P] (negative inside / behind), outward unit direction [P,3], closest [P,3]).

    The direction points from the surface towards where the point should go (away from the inside); at a
    point exactly on the surface it is the face normal.
    """
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    verts = np.asarray(verts, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    if closed is None:
        closed = is_closed_surface(faces)
    return _signed(points, verts, faces, closed)[:3]


def _signed(points, verts, faces, closed: bool):
    """signed_distance's (distance, direction, closest) and the index of the closest face [P]."""
    closest, dist, face = closest_points(points, verts, faces)
    fn = face_normals(verts, faces)[face]
    diff = points - closest
    if closed:
        inside = winding_numbers(points, verts, faces) > 0.5
    else:
        inside = np.einsum("pi,pi->p", diff, fn) < 0.0
    sign = np.where(inside, -1.0, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        direction = np.where(dist[:, None] > 1e-12, diff / np.maximum(dist, 1e-300)[:, None] * sign[:, None], fn)
    return sign * dist, direction, closest, face


def shell_contacts(points, collider: Collider, frame: float):
    """The points inside the collider's thickness shell at (fractional) `frame`, for the engines'
    penalty terms: (indices [A], signed distance [A], outward direction [A,3], closest point [A,3],
    its triangle's vertex indices [A,3]), or None when no point is. Points outside the collider's
    bounding box (grown by the shell) are skipped before any distance is computed."""
    verts = collider.at(frame)
    reach = collider.thickness_outer if collider.closed else max(collider.thickness_outer, collider.thickness_inner)
    lo, hi = verts.min(axis=0) - reach, verts.max(axis=0) + reach
    near = np.nonzero(np.all((points >= lo) & (points <= hi), axis=1))[0]
    if len(near) == 0:
        return None
    sd, direction, closest, face = _signed(points[near], verts, collider.faces, collider.closed)
    active = sd < collider.thickness_outer
    if not collider.closed:
        active &= sd > -collider.thickness_inner
    if not active.any():
        return None
    keep = np.nonzero(active)[0]
    return near[keep], sd[keep], direction[keep], closest[keep], collider.faces[face[keep]]


def barycentric(p, a, b, c):
    """Barycentric coordinates [P,3] of points p on triangles (a, b, c) (each [P,3])."""
    v0, v1, v2 = b - a, c - a, p - a
    d00 = np.einsum("pi,pi->p", v0, v0)
    d01 = np.einsum("pi,pi->p", v0, v1)
    d11 = np.einsum("pi,pi->p", v1, v1)
    d20 = np.einsum("pi,pi->p", v2, v0)
    d21 = np.einsum("pi,pi->p", v2, v1)
    den = d00 * d11 - d01 * d01
    den = np.where(np.abs(den) > 1e-300, den, 1.0)
    v = (d11 * d20 - d01 * d21) / den
    w = (d00 * d21 - d01 * d20) / den
    return np.stack([1.0 - v - w, v, w], axis=1)


def point_motion(closest, tri, verts, vertex_motion):
    """Motion [A,3] of the collider's closest points on triangles `tri` of `verts`, interpolated
    from per-vertex motion [V,3] (a displacement or a velocity)."""
    bary = barycentric(closest, verts[tri[:, 0]], verts[tri[:, 1]], verts[tri[:, 2]])
    return np.einsum("pj,pji->pi", bary, vertex_motion[tri])


def _contacts(points, collider: Collider, frame: float):
    verts = collider.at(frame)
    sd, direction, closest, _ = _signed(points, verts, collider.faces, collider.closed)
    if collider.closed:
        active = sd < collider.thickness_outer
    else:  # an open sheet: behind it by more than thickness_inner means the point is on the far side
        active = (sd < collider.thickness_outer) & (sd > -collider.thickness_inner)
    return sd, direction, active


def contact_penalty(points, collider: Collider, frame: float, stiffness: float, mass=None):
    """Penalty energy, gradient [P,3] and Gauss-Newton Hessian blocks [P,3,3] keeping points outside the
    collider's thickness shell: E = ½ k Σ m_i max(0, thickness − d_i)² (d signed). With `mass` the penalty
    is mass-weighted, so `stiffness` is an acceleration per metre of penetration (1/s²) for every material."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    m = np.ones(len(points)) if mass is None else np.asarray(mass, dtype=np.float64)
    sd, direction, active = _contacts(points, collider, frame)
    depth = np.where(active, collider.thickness_outer - sd, 0.0)
    energy = 0.5 * stiffness * float(np.sum(m * depth ** 2))
    grad = -(stiffness * m * depth)[:, None] * direction
    hess = (stiffness * m * active)[:, None, None] * np.einsum("pi,pj->pij", direction, direction)
    return energy, grad, hess


def resolve_contacts(points, velocities, collider: Collider, frame: float, dt: float):
    """(positions, velocities, contact mask) after pushing penetrating points to the thickness shell.

    The collider's own velocity is respected (a moving collider pushes points along); the relative normal
    velocity into the collider is removed (inelastic: no bounce) and the tangential relative velocity is
    reduced by μ·|Δv_n| (Coulomb friction, never reversed). `damping` is for penalty engines (contact
    damping) and is not used by this projection."""
    x = np.array(points, dtype=np.float64).reshape(-1, 3)
    v = np.array(velocities, dtype=np.float64).reshape(-1, 3)
    sd, direction, active = _contacts(x, collider, frame)
    if not active.any():
        return x, v, active
    idx = np.nonzero(active)[0]
    n = direction[idx]
    x[idx] += (collider.thickness_outer - sd[idx])[:, None] * n
    # collider velocity at the contact: velocity of the nearest collider vertex (cheap, exact when rigid-ish)
    cv = collider.velocity(frame, dt)
    if np.abs(cv).max() > 0.0:
        verts = collider.at(frame)
        near = np.argmin(((x[idx, None, :] - verts[None]) ** 2).sum(-1), axis=1)
        vc = cv[near]
    else:
        vc = np.zeros_like(n)
    rel = v[idx] - vc
    vn = np.einsum("pi,pi->p", rel, n)
    dvn = -np.minimum(vn, 0.0)  # approach speed removed (inelastic contact: no bounce)
    rel = rel + dvn[:, None] * n
    tang = rel - np.einsum("pi,pi->p", rel, n)[:, None] * n
    tn = np.linalg.norm(tang, axis=1)
    scale = np.where(tn > 1e-12, np.maximum(0.0, 1.0 - collider.friction * dvn / np.maximum(tn, 1e-12)), 1.0)
    rel = rel - tang * (1.0 - scale)[:, None]
    v[idx] = rel + vc
    return x, v, active


def collider_from_dict(d: dict) -> Collider:
    """A validated `neurok.scene/1` collider entry -> Collider."""
    positions = d["positions"] if "positions" in d else [d["vertices"]]
    return Collider(name=str(d.get("name", "collider")), faces=np.asarray(d["faces"]),
                    positions=np.asarray(positions, dtype=np.float64),
                    thickness_outer=float(d.get("thickness", 0.02)), thickness_inner=float(d.get("thickness_inner", 0.2)),
                    friction=float(d.get("friction", 0.0)), damping=float(d.get("damping", 0.0)))


def contact_planes(setup, x, reach, end, floor=True):
    """[(vertex indices, a point on the plane [A,3], outward normal [A,3], Coulomb coefficient)]:
    each vertex of x [N,3] within `reach` (metres) of the setup's floor or a collider's shell meets
    that one's tangent plane at its closest point over the substep ending at frame `end` (found
    once a substep, at its guess x; the sheet's and the solid's layers); `floor`: with the floor's."""
    planes = []
    height = setup.floor_z if floor else None
    if height is not None:
        near = np.nonzero(x[:, 2] < height + reach)[0]
        if len(near):
            normal = np.zeros((len(near), 3))
            normal[:, 2] = 1.0
            planes.append((near, np.full((len(near), 3), [0.0, 0.0, height]), normal, setup.floor_friction))
    for c in setup.colliders or []:
        verts = c.at(end)
        grow = c.thickness_outer + reach
        inside_box = np.nonzero(np.all((x >= verts.min(axis=0) - grow) & (x <= verts.max(axis=0) + grow), axis=1))[0]
        if not len(inside_box):
            continue
        sd, normal, closest = signed_distance(x[inside_box], verts, c.faces, c.closed)
        keep = sd < grow
        if keep.any():
            shell = closest[keep] + c.thickness_outer * normal[keep]
            planes.append((inside_box[keep], shell, normal[keep], c.friction))
    return planes
