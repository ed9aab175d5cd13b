"""Scenes: `neurok.scene/1` validation, material presets, selectors, force profiles, and the
resolved per-vertex `Setup` that both engines (learned and reference) run.

A scene is written in terms of the mesh (selectors, frame numbers); a `Setup` is the same thing
made concrete for one mesh: per-vertex pin weights, per-frame pin targets and accelerations.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .checks import check_mesh
from .colliders import Collider, collider_from_dict
from .errors import FormatError
from .formats import SCENE_FORMAT, Mesh, Sequence, atomic_write_text, brief

# Materials. Solids: stiffness = Young's modulus (Pa), density kg/m^3, poisson = Poisson ratio.
# Cloth: stiffness = membrane stretch stiffness (N/m), density = areal density (kg/m^2),
# bending = bending stiffness (N*m). damping = Rayleigh stiffness-proportional beta (s);
# air_damping = Rayleigh mass-proportional alpha (1/s).
MATERIAL_PRESETS = {
    "jelly":   {"kind": "solid", "stiffness": 3.0e3, "density": 1050.0, "poisson": 0.45, "damping": 0.01, "air_damping": 0.1},
    "rubber":  {"kind": "solid", "stiffness": 1.0e5, "density": 1100.0, "poisson": 0.45, "damping": 0.002, "air_damping": 0.1},
    "foam":    {"kind": "solid", "stiffness": 2.0e4, "density": 120.0, "poisson": 0.2, "damping": 0.02, "air_damping": 0.5},
    "plush":   {"kind": "solid", "stiffness": 8.0e3, "density": 200.0, "poisson": 0.3, "damping": 0.03, "air_damping": 0.5},
    "cloth":   {"kind": "cloth", "stiffness": 3.0e3, "density": 0.2, "bending": 2.0e-5, "poisson": 0.3, "damping": 0.005, "air_damping": 0.5},
    "leather": {"kind": "cloth", "stiffness": 2.0e4, "density": 0.8, "bending": 2.0e-3, "poisson": 0.3, "damping": 0.01, "air_damping": 0.3},
}
DEFAULT_MATERIAL = "rubber"
MATERIAL_KEYS = {"kind", "preset", "stiffness", "density", "poisson", "damping", "air_damping", "bending"}

SCENE_DEFAULTS = {"frames": 120, "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, -9.81]}
PROFILE_TYPES = ("constant", "impulse", "sine", "keyframes")


def _finite(value) -> bool:
    """A real number (not a bool) that is finite as a float (huge integers are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def resolve_material(material: dict | None, where: str = "material") -> dict:
    """Fill a material from its preset (or the kind's default) and check its numbers."""
    material = dict(material or {})
    unknown = set(material) - MATERIAL_KEYS
    if unknown:
        raise FormatError(f"{where}: unknown material key {brief(sorted(map(str, unknown))[0])}")
    preset = material.get("preset")
    if preset is None:
        preset = "cloth" if material.get("kind") == "cloth" else DEFAULT_MATERIAL
    if not isinstance(preset, str) or preset not in MATERIAL_PRESETS:
        raise FormatError(f"{where}: unknown material preset {brief(preset)} (one of {', '.join(MATERIAL_PRESETS)})")
    out = dict(MATERIAL_PRESETS[preset])
    out.update({k: v for k, v in material.items() if k != "preset"})
    out["preset"] = preset
    if out["kind"] not in ("solid", "cloth"):
        raise FormatError(f"{where}: 'kind' is {brief(out['kind'])}, expected 'solid' or 'cloth'")
    out.setdefault("bending", 1e-4)
    out.setdefault("air_damping", 0.0)
    for key in ("stiffness", "density", "poisson", "damping", "air_damping", "bending"):
        value = out[key]
        if not _finite(value):
            raise FormatError(f"{where}: '{key}' must be a number, got {brief(value)}")
        out[key] = float(value)
    if out["stiffness"] <= 0 or out["density"] <= 0:
        raise FormatError(f"{where}: 'stiffness' and 'density' must be positive")
    if not 0.0 <= out["poisson"] < 0.5:
        raise FormatError(f"{where}: 'poisson' must be in [0, 0.5), got {out['poisson']}")
    if out["damping"] < 0 or out["air_damping"] < 0 or out["bending"] < 0:
        raise FormatError(f"{where}: damping and bending must be non-negative")
    return out


# --------------------------------------------------------------------------- validation

def _vec3(where, value):
    if not (isinstance(value, (list, tuple)) and len(value) == 3 and all(_finite(x) for x in value)):
        raise FormatError(f"{where}: expected three finite numbers, got {brief(value)}")
    return [float(x) for x in value]


def _number(where, value, positive=False):
    if not _finite(value):
        raise FormatError(f"{where}: expected a number, got {brief(value)}")
    if positive and value <= 0:
        raise FormatError(f"{where}: must be positive, got {value}")
    return float(value)


def validate_selector(sel, where):
    if not isinstance(sel, dict) or len(sel) != 1:
        raise FormatError(f"{where}: a selector is one of {{'indices'|'weights'|'box'|'sphere'|'vertex_group': ...}}")
    (kind, value), = sel.items()
    if kind == "indices":
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
            raise FormatError(f"{where}.indices: expected a list of non-negative integers")
    elif kind == "weights":
        if not isinstance(value, list) or not all(_finite(w) and w >= 0 for w in value):
            raise FormatError(f"{where}.weights: expected a list of non-negative numbers, one per vertex")
    elif kind == "box":
        if not isinstance(value, dict) or set(value) != {"min", "max"}:
            raise FormatError(f"{where}.box: expected {{'min': [x,y,z], 'max': [x,y,z]}}")
        _vec3(f"{where}.box.min", value["min"]); _vec3(f"{where}.box.max", value["max"])
    elif kind == "sphere":
        if not isinstance(value, dict) or set(value) != {"center", "radius"}:
            raise FormatError(f"{where}.sphere: expected {{'center': [x,y,z], 'radius': r}}")
        _vec3(f"{where}.sphere.center", value["center"]); _number(f"{where}.sphere.radius", value["radius"], positive=True)
    elif kind == "vertex_group":
        if not isinstance(value, str) or not value:
            raise FormatError(f"{where}.vertex_group: expected a vertex group name")
    else:
        raise FormatError(f"{where}: unknown selector {brief(kind)} (indices, weights, box, sphere, vertex_group)")
    return sel


def validate_profile(profile, where):
    if profile is None:
        profile = {"type": "constant"}
    if not isinstance(profile, dict):
        raise FormatError(f"{where}: a profile must be an object like {{'type': 'constant'}}, got {brief(profile)}")
    profile = dict(profile)
    kind = profile.get("type", "constant")
    if not isinstance(kind, str) or kind not in PROFILE_TYPES:
        raise FormatError(f"{where}.type: {brief(kind)} is not one of {', '.join(PROFILE_TYPES)}")
    profile["type"] = kind
    for key in ("start", "end", "frequency"):
        if key in profile and profile[key] is not None:
            _number(f"{where}.{key}", profile[key], positive=(key == "frequency"))
    if kind == "keyframes":
        keys = profile.get("keys")
        if not isinstance(keys, list) or not keys or not all(isinstance(k, list) and len(k) == 2 for k in keys):
            raise FormatError(f"{where}.keys: expected [[frame, strength], ...]")
        for i, k in enumerate(keys):
            _number(f"{where}.keys[{i}][0]", k[0]); _number(f"{where}.keys[{i}][1]", k[1])
    return profile


def validate_scene(scene, where: str = "scene") -> dict:
    """Check a scene dict against `neurok.scene/1` and fill documented defaults."""
    if not isinstance(scene, dict):
        raise FormatError(f"{where}: a scene must be a JSON object")
    if scene.get("format") != SCENE_FORMAT:
        raise FormatError(f"{where}: 'format' is {brief(scene.get('format'))}, expected '{SCENE_FORMAT}'")
    out = copy.deepcopy(scene)
    for key, default in SCENE_DEFAULTS.items():
        out.setdefault(key, copy.deepcopy(default))
    frames = out["frames"]
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise FormatError(f"{where}: 'frames' must be a positive integer, got {brief(frames)}")
    out["dt"] = _number(f"{where}: 'dt'", out["dt"], positive=True)
    out["gravity"] = _vec3(f"{where}: 'gravity'", out["gravity"])
    if not isinstance(out.get("material", {}), dict):
        raise FormatError(f"{where}: 'material' must be an object")
    out["material"] = resolve_material(out.get("material"), f"{where}: material")
    pins = out.setdefault("pins", [])
    if not isinstance(pins, list):
        raise FormatError(f"{where}: 'pins' must be a list")
    for i, pin in enumerate(pins):
        if not isinstance(pin, dict) or "select" not in pin:
            raise FormatError(f"{where}: pins[{i}] needs a 'select'")
        validate_selector(pin["select"], f"{where}: pins[{i}].select")
        pin["strength"] = _number(f"{where}: pins[{i}].strength", pin.get("strength", 1.0), positive=True)
        if "target_offset" in pin:
            keys = pin["target_offset"]
            if not isinstance(keys, list) or not keys or not all(isinstance(k, (list, tuple)) and len(k) == 2 for k in keys):
                raise FormatError(f"{where}: pins[{i}].target_offset: expected [[frame, [dx, dy, dz]], ...], got {brief(keys)}")
            pin["target_offset"] = [[_number(f"{where}: pins[{i}].target_offset[{j}][0]", k[0]),
                                     _vec3(f"{where}: pins[{i}].target_offset[{j}][1]", k[1])] for j, k in enumerate(keys)]
    forces = out.setdefault("forces", [])
    if not isinstance(forces, list):
        raise FormatError(f"{where}: 'forces' must be a list")
    for i, force in enumerate(forces):
        if not isinstance(force, dict) or "select" not in force or "accel" not in force:
            raise FormatError(f"{where}: forces[{i}] needs 'select' and 'accel'")
        validate_selector(force["select"], f"{where}: forces[{i}].select")
        force["accel"] = _vec3(f"{where}: forces[{i}].accel", force["accel"])
        force["profile"] = validate_profile(force.get("profile"), f"{where}: forces[{i}].profile")
    floor = out.get("floor")
    if floor is not None:
        if not isinstance(floor, dict) or "z" not in floor:
            raise FormatError(f"{where}: 'floor' must be null or {{'z': height}}")
        floor["z"] = _number(f"{where}: floor.z", floor["z"])
    colliders = out.setdefault("colliders", [])
    if not isinstance(colliders, list):
        raise FormatError(f"{where}: 'colliders' must be a list")
    for i, col in enumerate(colliders):
        validate_collider(col, f"{where}: colliders[{i}]")
    initial = out.setdefault("initial", {})
    if not isinstance(initial, dict):
        raise FormatError(f"{where}: 'initial' must be an object")
    initial["velocity"] = _vec3(f"{where}: initial.velocity", initial.get("velocity", [0.0, 0.0, 0.0]))
    return out


def validate_collider(col, where: str) -> None:
    """A collider: {"name", "faces": [[i,j,k],...], "vertices": [[x,y,z],...] (static) or "positions":
    [[[x,y,z],...] per frame] (moving), "thickness", "thickness_inner", "friction", "damping"} (in place)."""
    if not isinstance(col, dict) or "faces" not in col or not ("vertices" in col or "positions" in col):
        raise FormatError(f"{where}: needs 'faces' and 'vertices' (static) or 'positions' (per frame)")
    try:
        faces = np.asarray(col["faces"], dtype=np.float64)
        pos = np.asarray(col["positions"] if "positions" in col else [col["vertices"]], dtype=np.float64)
    except (TypeError, ValueError):
        raise FormatError(f"{where}: faces/vertices must be numeric arrays") from None
    if faces.ndim != 2 or faces.shape[1] != 3 or len(faces) == 0 or np.any(faces != np.round(faces)):
        raise FormatError(f"{where}.faces: expected [[i, j, k], ...] integer triangles")
    if pos.ndim != 3 or pos.shape[2] != 3 or pos.shape[1] == 0 or not np.all(np.isfinite(pos)):
        raise FormatError(f"{where}: vertices must be finite [[x, y, z], ...] (positions: one such list per frame)")
    if faces.min() < 0 or faces.max() >= pos.shape[1]:
        raise FormatError(f"{where}.faces: index out of range (the collider has {pos.shape[1]} vertices)")
    for key, default in (("thickness", 0.02), ("thickness_inner", 0.2), ("friction", 0.0), ("damping", 0.0)):
        value = _number(f"{where}.{key}", col.get(key, default))
        if value < 0.0:
            raise FormatError(f"{where}.{key}: must be >= 0, got {brief(value)}")
        col[key] = value
    if col["damping"] > 1.0:
        raise FormatError(f"{where}.damping: must be between 0 and 1, got {brief(col['damping'])}")
    col.setdefault("name", f"collider {where}")


# --------------------------------------------------------------------------- selectors and profiles

def normalized_coordinates(rest: np.ndarray) -> np.ndarray:
    """Vertex positions mapped to 0..1 on each axis of the mesh's bounding box."""
    lo, hi = rest.min(axis=0), rest.max(axis=0)
    return (rest - lo) / np.maximum(hi - lo, 1e-12)


def select_weights(sel: dict, rest: np.ndarray, where: str = "selector", vertex_groups: dict | None = None) -> np.ndarray:
    """Turn a selector into one weight in [0, inf) per vertex."""
    n = len(rest)
    (kind, value), = sel.items()
    if kind == "indices":
        idx = np.asarray(value, dtype=np.int64)
        if idx.size and idx.max() >= n:
            raise FormatError(f"{where}: index {int(idx.max())} is out of range for a mesh of {n} vertices")
        w = np.zeros(n); w[idx] = 1.0
        return w
    if kind == "weights":
        if len(value) != n:
            raise FormatError(f"{where}: {len(value)} weights given for a mesh of {n} vertices")
        return np.asarray(value, dtype=np.float64)
    if kind == "box":
        u = normalized_coordinates(rest)
        lo, hi = np.asarray(value["min"]), np.asarray(value["max"])
        return np.all((u >= lo - 1e-9) & (u <= hi + 1e-9), axis=1).astype(np.float64)
    if kind == "sphere":
        u = normalized_coordinates(rest)
        d = np.linalg.norm(u - np.asarray(value["center"]), axis=1)
        return (d <= value["radius"]).astype(np.float64)
    if kind == "vertex_group":
        if not vertex_groups or value not in vertex_groups:
            raise FormatError(f"{where}: vertex group {brief(value)} is not available here (export the scene from Blender to resolve it)")
        w = np.asarray(vertex_groups[value], dtype=np.float64)
        if w.shape != (n,):
            raise FormatError(f"{where}: vertex group {brief(value)} has {w.size} weights for {n} vertices")
        return w
    raise FormatError(f"{where}: unknown selector '{kind}'")


def profile_value(profile: dict, frame: float, dt: float) -> float:
    """Strength multiplier of a force at `frame` (applied from frame to frame + 1)."""
    kind = profile.get("type", "constant")
    start = profile.get("start", 0) or 0
    end = profile.get("end")
    if kind == "keyframes":
        keys = sorted(profile["keys"])
        return float(np.interp(frame, [k[0] for k in keys], [k[1] for k in keys]))
    if frame < start or (end is not None and frame >= end):
        return 0.0
    if kind == "constant":
        return 1.0
    if kind == "impulse":
        # an impulse lasts one frame unless an end is given
        return 1.0 if end is not None or frame < start + 1 else 0.0
    if kind == "sine":
        frequency = profile.get("frequency")
        return math.sin(2.0 * math.pi * (1.0 if frequency is None else frequency) * (frame - start) * dt)
    raise FormatError(f"unknown profile '{kind}'")


# --------------------------------------------------------------------------- resolved setup

@dataclass
class Setup:
    """A simulation made concrete for one mesh; every array is per vertex, in metres and seconds.

    `frames` counts frame 0 (the initial state), so a run makes frames - 1 steps.
    """
    rest: np.ndarray
    faces: np.ndarray
    x0: np.ndarray
    v0: np.ndarray
    dt: float
    frames: int
    gravity: np.ndarray
    material: dict
    pin_weight: np.ndarray
    pin_targets: np.ndarray | None = None  # [T,N,3]; None: pins hold frame-0 positions
    accel_table: np.ndarray | None = None  # [T,N,3] explicit per-frame accelerations
    force_terms: list = field(default_factory=list)  # (weights [N], accel [3], profile)
    floor_z: float | None = None
    vertex_mass: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    colliders: list[Collider] = field(default_factory=list)  # collision meshes (engine.core.colliders)

    @property
    def num_vertices(self) -> int:
        return len(self.rest)

    def pin_target(self, frame: int) -> np.ndarray:
        if self.pin_targets is None:
            return self.x0
        return self.pin_targets[min(frame, len(self.pin_targets) - 1)]

    def external_accel(self, frame: int) -> np.ndarray:
        """Acceleration per vertex applied from `frame` to `frame + 1` (m/s^2)."""
        if self.accel_table is not None:
            return self.accel_table[min(frame, len(self.accel_table) - 1)]
        a = np.zeros((self.num_vertices, 3))
        for weights, accel, profile in self.force_terms:
            s = profile_value(profile, frame, self.dt)
            if s != 0.0:
                a += s * weights[:, None] * np.asarray(accel)[None, :]
        return a

    def accel_frames(self) -> np.ndarray:
        return np.stack([self.external_accel(t) for t in range(self.frames)]).astype(np.float32)

    def pin_target_frames(self) -> np.ndarray:
        return np.stack([self.pin_target(t) for t in range(self.frames)]).astype(np.float32)

    def to_sequence(self, positions: np.ndarray, meta: dict | None = None) -> Sequence:
        """Record this setup with its result as a `neurok.sequence/1`."""
        seq = Sequence(rest=self.rest.astype(np.float32), faces=self.faces.astype(np.int32),
                       positions=np.asarray(positions, np.float32), dt=self.dt,
                       gravity=np.asarray(self.gravity, np.float32), material=dict(self.material),
                       external_accel=self.accel_frames()[:len(positions)], velocity0=self.v0.astype(np.float32),
                       pin_weight=self.pin_weight.astype(np.float32), floor_z=self.floor_z,
                       meta=dict(self.meta, **(meta or {})))
        if self.pin_weight.any():
            seq.pin_target = self.pin_target_frames()[:len(positions)]  # a stopped run keeps fewer frames
        if self.vertex_mass is not None:
            seq.vertex_mass = self.vertex_mass.astype(np.float32)
        return seq


def setup_from_scene(mesh: Mesh, scene: dict, vertex_groups: dict | None = None, where: str = "scene") -> Setup:
    """Resolve a validated scene on a mesh (rest = the mesh's own coordinates, metres)."""
    scene = validate_scene(scene, where)
    warnings = check_mesh(mesh, getattr(mesh, "name", "mesh"))
    rest = np.asarray(mesh.vertices, dtype=np.float64)
    n = len(rest)
    pin_weight = np.zeros(n)
    pin_offsets = []
    for i, pin in enumerate(scene["pins"]):
        w = select_weights(pin["select"], rest, f"{where}: pins[{i}].select", vertex_groups)
        if not w.any():
            raise FormatError(f"{where}: pins[{i}] selects no vertex")
        pin_weight = np.maximum(pin_weight, pin["strength"] * w)
        if "target_offset" in pin:
            pin_offsets.append((w > 0, pin["target_offset"]))
    force_terms = []
    for i, force in enumerate(scene["forces"]):
        w = select_weights(force["select"], rest, f"{where}: forces[{i}].select", vertex_groups)
        if not w.any():
            raise FormatError(f"{where}: forces[{i}] selects no vertex")
        force_terms.append((w, np.asarray(force["accel"]), force["profile"]))
    frames = scene["frames"]
    pin_targets = None
    if pin_offsets:  # animated pins: keyed offsets [[frame, [dx,dy,dz]], ...], linear in between
        pin_targets = np.repeat(rest[None], frames, axis=0)
        for mask, keys in pin_offsets:
            keys = sorted(keys, key=lambda k: k[0])
            kf = [k[0] for k in keys]
            for t in range(frames):
                off = [np.interp(t, kf, [k[1][c] for k in keys]) for c in range(3)]
                pin_targets[t, mask] = rest[mask] + np.asarray(off)
    floor = scene.get("floor")
    return Setup(rest=rest, faces=np.asarray(mesh.faces), x0=rest.copy(),
                 v0=np.tile(np.asarray(scene["initial"]["velocity"]), (n, 1)),
                 dt=scene["dt"], frames=frames, gravity=np.asarray(scene["gravity"]),
                 material=scene["material"], pin_weight=pin_weight, pin_targets=pin_targets,
                 force_terms=force_terms, floor_z=None if floor is None else floor["z"],
                 meta={"scene": scene.get("meta", {}), "warnings": warnings},
                 colliders=[collider_from_dict(c) for c in scene["colliders"]])


def setup_from_sequence(seq: Sequence) -> Setup:
    """The setup recorded in a sequence: same start, forces, pins, material and frame count."""
    n = seq.num_vertices
    material = resolve_material({k: v for k, v in seq.material.items() if k in MATERIAL_KEYS})
    return Setup(rest=seq.rest.astype(np.float64), faces=np.asarray(seq.faces),
                 x0=seq.positions[0].astype(np.float64),
                 v0=np.zeros((n, 3)) if seq.velocity0 is None else seq.velocity0.astype(np.float64),
                 dt=seq.dt, frames=seq.frames, gravity=seq.gravity.astype(np.float64), material=material,
                 pin_weight=np.zeros(n) if seq.pin_weight is None else seq.pin_weight.astype(np.float64),
                 pin_targets=None if seq.pin_target is None else seq.pin_target.astype(np.float64),
                 accel_table=None if seq.external_accel is None else seq.external_accel.astype(np.float64),
                 floor_z=seq.floor_z,
                 vertex_mass=None if seq.vertex_mass is None else seq.vertex_mass.astype(np.float64),
                 meta=dict(seq.meta))


# --------------------------------------------------------------------------- scene files

def read_scene(path) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FormatError(f"{path}: no such scene file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise FormatError(f"{path}: cannot read scene file ({type(e).__name__})") from None
    try:
        scene = json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    except (ValueError, RecursionError) as e:  # e.g. integers with too many digits, deep nesting
        raise FormatError(f"{path}: not valid JSON ({type(e).__name__})") from None
    return validate_scene(scene, str(path))


def write_scene(path, scene: dict) -> None:
    atomic_write_text(path, json.dumps(scene, indent=2) + "\n")
