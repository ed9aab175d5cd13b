"""Blender-style force fields evaluated on a moving surface (pure numpy, engine independent).

Blender has no Python call that samples its effectors at a point, so an `Effector` carries a field's
settings (read from `object.field` by the add-on) and its world matrix and strength per frame, and
`accel()` evaluates it at given positions, normals and velocities — meant to be called every step on
the deformed surface. Accelerations are in m/s² (NeuROK reads a field's Strength as an acceleration,
mass independent, like gravity).

Supported types (as in Blender's effect.cc, with the differences stated):

* FORCE      along (p − o)/|p − o| × strength (positive pushes away)
* CHARGE     like FORCE (every simulated point carries charge +1)
* WIND       along the object's local +Z × strength; on a surface (`normals` given, `surface=True`) only
             the part along the face normal acts, n (n·w) — a sheet edge-on to the wind feels nothing,
             as with Blender's cloth. With Flow > 0 the wind becomes an air stream: the acceleration
             is flow × (wind − v) (relative velocity), along the normal on a surface.
* DRAG       −(strength·v + flow·|v|·v) (Linear = strength, Quadratic = flow); on a surface only the
             normal component of v is damped (air resistance of a sheet)
* VORTEX     around the object's local Z: strength × (z × (p − o))/|…|
* HARMONIC   spring to the field origin: −strength (p − o) − harmonic_damping v
* TURBULENCE a smooth pseudo-random vector field of cell size `size` (seeded), × strength; the same
             parameters as Blender, not the same noise pattern
* Noise (FORCE/WIND): a turbulence of amplitude `noise` added on top

Shapes: POINT (distance to the origin) and PLANE (distance to the XY plane; direction along its normal);
other shapes use POINT. Falloff: SPHERE, TUBE (radial + axial), CONE (angle), with Min/Max distance and
power, and Z Direction (Both/+Z/−Z). Not supported (reported by `unsupported_settings`): Magnetic,
Lennard-Jones, Texture, Curve Guide, Boid, Fluid Flow types; Absorption; Gravitation falloff; 2D.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SUPPORTED_TYPES = ("FORCE", "CHARGE", "WIND", "DRAG", "VORTEX", "HARMONIC", "TURBULENCE")
UNSUPPORTED_TYPES = ("MAGNET", "LENNARDJ", "TEXTURE", "GUIDE", "BOID", "FLUID_FLOW")


@dataclass
class Effector:
    name: str
    type: str
    matrix: np.ndarray  # [T,4,4] world matrix per frame (T == 1: static)
    strength: np.ndarray  # [T]
    shape: str = "POINT"
    flow: float = 0.0
    noise: float = 0.0
    seed: int = 0
    size: float = 1.0
    falloff_type: str = "SPHERE"
    power: float = 0.0
    use_min: bool = False
    min: float = 0.0
    use_max: bool = False
    max: float = 0.0
    radial_power: float = 0.0
    use_radial_min: bool = False
    radial_min: float = 0.0
    use_radial_max: bool = False
    radial_max: float = 0.0
    z_direction: str = "BOTH"
    harmonic_damping: float = 0.0
    weight: float = 1.0  # Field Weights (type weight × All) of the simulated object
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.matrix = np.asarray(self.matrix, dtype=np.float64).reshape(-1, 4, 4)
        self.strength = np.atleast_1d(np.asarray(self.strength, dtype=np.float64))

    def at(self, frame: int):
        i = int(np.clip(frame, 0, len(self.matrix) - 1))
        j = int(np.clip(frame, 0, len(self.strength) - 1))
        return self.matrix[i], float(self.strength[j])


def _hash3(ix, iy, iz, seed, comp):
    h = (ix * 73856093) ^ (iy * 19349663) ^ (iz * 83492791) ^ ((seed + 1) * 2654435761) ^ (comp * 97531)
    h = (h ^ (h >> 13)) * 1274126177
    h = h ^ (h >> 16)
    return ((h & 0xFFFFFF).astype(np.float64) / float(0xFFFFFF)) * 2.0 - 1.0


def noise_vector(points: np.ndarray, size: float, seed: int) -> np.ndarray:
    """Smooth value noise: three independent components in [-1, 1], trilinear between lattice points."""
    p = np.asarray(points, dtype=np.float64) / max(size, 1e-9)
    base = np.floor(p).astype(np.int64)
    frac = p - base
    s = frac * frac * (3.0 - 2.0 * frac)
    out = np.zeros_like(p)
    for dx in (0, 1):
        for dy in (0, 1):
            for dz in (0, 1):
                w = (s[:, 0] if dx else 1 - s[:, 0]) * (s[:, 1] if dy else 1 - s[:, 1]) * (s[:, 2] if dz else 1 - s[:, 2])
                for c in range(3):
                    out[:, c] += w * _hash3(base[:, 0] + dx, base[:, 1] + dy, base[:, 2] + dz, seed, c)
    return out


def falloff(e: Effector, rel: np.ndarray, nor: np.ndarray) -> np.ndarray:
    """Blender's falloff factor at offsets `rel` [N,3] from the field origin, field axis `nor`."""
    height = rel @ nor
    if e.shape == "PLANE":
        dist = np.abs(height)
    else:
        dist = np.linalg.norm(rel, axis=1)

    def along(d, use_min, dmin, use_max, dmax, power):
        out = np.power(1.0 + np.maximum(d - (dmin if use_min else 0.0), 0.0), -power)
        if use_min:
            out = np.where(d < dmin, 1.0, out)
        if use_max:
            out = np.where(d > dmax, 0.0, out)
        return out

    if e.falloff_type == "TUBE":
        radial = np.linalg.norm(rel - height[:, None] * nor[None], axis=1)
        fo = along(np.abs(height), e.use_min, e.min, e.use_max, e.max, e.power)
        fo = fo * along(radial, e.use_radial_min, e.radial_min, e.use_radial_max, e.radial_max, e.radial_power)
    elif e.falloff_type == "CONE":
        d = np.linalg.norm(rel, axis=1)
        angle = np.degrees(np.arccos(np.clip(np.abs(height) / np.maximum(d, 1e-12), -1.0, 1.0)))
        fo = along(d, e.use_min, e.min, e.use_max, e.max, e.power)
        fo = fo * along(angle, e.use_radial_min, e.radial_min, e.use_radial_max, e.radial_max, e.radial_power)
    else:
        fo = along(dist, e.use_min, e.min, e.use_max, e.max, e.power)
    if e.z_direction == "POSITIVE":
        fo = np.where(height < 0.0, 0.0, fo)
    elif e.z_direction == "NEGATIVE":
        fo = np.where(height > 0.0, 0.0, fo)
    return fo


def accel(e: Effector, frame: int, points, velocities=None, normals=None, surface: bool = False) -> np.ndarray:
    """Acceleration [N,3] (m/s²) of one effector at `frame` on points (with velocities and unit normals)."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    v = np.zeros_like(points) if velocities is None else np.asarray(velocities, dtype=np.float64).reshape(-1, 3)
    n = None if normals is None else np.asarray(normals, dtype=np.float64).reshape(-1, 3)
    on_surface = surface and n is not None
    m, strength = e.at(frame)
    origin = m[:3, 3]
    nor = m[:3, 2] / max(np.linalg.norm(m[:3, 2]), 1e-12)
    rel = points - origin
    fo = falloff(e, rel, nor) * e.weight
    t = e.type
    if t in ("FORCE", "CHARGE"):
        vec = (rel @ nor)[:, None] * nor[None] if e.shape == "PLANE" else rel
        d = np.linalg.norm(vec, axis=1)
        unit = np.where(d[:, None] > 1e-12, vec / np.maximum(d, 1e-12)[:, None], 0.0)
        a = (strength * fo)[:, None] * unit
    elif t == "WIND":
        w = strength * nor[None, :] * fo[:, None]
        if e.flow > 0.0:
            w = e.flow * (w - v)
        if on_surface:
            w = n * np.einsum("pi,pi->p", n, w)[:, None]
        a = w
    elif t == "DRAG":
        vv = n * np.einsum("pi,pi->p", n, v)[:, None] if on_surface else v
        speed = np.linalg.norm(vv, axis=1, keepdims=True)
        a = -(strength * vv + e.flow * speed * vv) * fo[:, None]
    elif t == "VORTEX":
        c = np.cross(nor[None, :], rel)
        d = np.linalg.norm(c, axis=1)
        a = (strength * fo)[:, None] * np.where(d[:, None] > 1e-12, c / np.maximum(d, 1e-12)[:, None], 0.0)
    elif t == "HARMONIC":
        a = (-strength * rel - e.harmonic_damping * v) * fo[:, None]
    elif t == "TURBULENCE":
        a = (strength * fo)[:, None] * noise_vector(points, e.size, e.seed)
    else:
        return np.zeros_like(points)
    if e.noise > 0.0 and t in ("FORCE", "WIND"):
        a = a + (e.noise * fo)[:, None] * noise_vector(points + 0.5 * frame * e.size, e.size, e.seed)
    return a


def total_accel(effectors, frame: int, points, velocities=None, normals=None, surface: bool = False) -> np.ndarray:
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    out = np.zeros_like(points)
    for e in effectors:
        out += accel(e, frame, points, velocities, normals, surface)
    return out


def vertex_normals(positions: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Area-weighted unit vertex normals of a triangle mesh (for evaluating fields on the deformed surface)."""
    x = np.asarray(positions, dtype=np.float64)
    f = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    fn = np.cross(x[f[:, 1]] - x[f[:, 0]], x[f[:, 2]] - x[f[:, 0]])
    vn = np.zeros_like(x)
    for k in range(3):
        np.add.at(vn, f[:, k], fn)
    return vn / np.maximum(np.linalg.norm(vn, axis=1, keepdims=True), 1e-300)
