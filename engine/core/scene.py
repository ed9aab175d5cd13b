"""Scenes: `neurok.scene/1` validation, material presets, selectors, and resolving a scene into the
per-vertex `Setup` (engine/core/setup.py) that both engines (learned and reference) run.

A scene is written in terms of the mesh (selectors, frame numbers); a `Setup` is the same thing
made concrete for one mesh: per-vertex pin weights, per-frame pin targets and accelerations.
`setup_from_arrays` is the one function that builds a Setup from arrays: `setup_from_scene` uses
it after resolving the scene's selectors, and so does the add-on's gather.
"""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np

from .checks import check_mesh, support_notes
from .colliders import Collider, collider_from_dict
from .errors import FormatError, NeurokError
from .fields import total_accel, vertex_normals
from .formats import SCENE_FORMAT, Mesh, Sequence, atomic_write_text, brief
from .material_params import MOONEY_RIVLIN, NEO_HOOKEAN, Material
from .physics import DEFAULT_SELF_DISTANCE, FLOOR_FRICTION, SELF_FRICTION
from .setup import DETAILS, Setup

# Material presets, in the units of `Material` (engine/core/material_params.py).
MATERIAL_PRESETS = {
    "jelly":   {"kind": "solid", "stiffness": 3.0e3, "density": 1050.0, "poisson": 0.45, "damping": 0.01, "air_damping": 0.1},
    "rubber":  {"kind": "solid", "stiffness": 1.0e5, "density": 1100.0, "poisson": 0.45, "damping": 0.002, "air_damping": 0.1},
    "foam":    {"kind": "solid", "stiffness": 2.0e4, "density": 120.0, "poisson": 0.2, "damping": 0.02, "air_damping": 0.5},
    "plush":   {"kind": "solid", "stiffness": 8.0e3, "density": 200.0, "poisson": 0.3, "damping": 0.03, "air_damping": 0.5},
    "cloth":   {"kind": "cloth", "stiffness": 3.0e3, "density": 0.2, "bending": 2.0e-5, "poisson": 0.3, "damping": 0.005, "air_damping": 0.5},
    "leather": {"kind": "cloth", "stiffness": 2.0e4, "density": 0.8, "bending": 2.0e-3, "poisson": 0.3, "damping": 0.01, "air_damping": 0.3},
}
DEFAULT_MATERIAL = "rubber"
MATERIAL_KEYS = {"kind", "preset", "stiffness", "density", "poisson", "damping", "air_damping", "bending", "law",
                 "i2_share"}
SOLID_LAWS = (NEO_HOOKEAN, MOONEY_RIVLIN)
DEFAULT_I2_SHARE = 0.7

SCENE_DEFAULTS = {"frames": 120, "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, -9.81], "detail": "medium"}
PROFILE_TYPES = ("constant", "impulse", "sine", "keyframes")


# Materials learned from data, stored in checkpoints (`learned/checkpoint.py` registers them when
# it loads one): name -> the material (SI numbers) the learned parameters refine. A scene may name
# them as presets; the reference simulator runs their numbers, the learned engine adds what it learned.
LEARNED_PRESETS: dict[str, dict] = {}
_preset_loaders = []


def register_learned_presets(table: dict) -> None:
    for name, material in table.items():
        if name not in MATERIAL_PRESETS:
            LEARNED_PRESETS[name] = {k: v for k, v in material.items() if k != "preset"}


def register_preset_loader(loader) -> None:
    """`loader()` -> a table for `register_learned_presets`, called once, the first time a scene
    names a preset that is not known yet (the API registers the bundled checkpoint's)."""
    _preset_loaders.append(loader)


def known_presets() -> dict:
    """Built-in and learned presets, name -> material."""
    while _preset_loaders:
        loader = _preset_loaders.pop(0)
        try:
            register_learned_presets(loader())
        except (NeurokError, OSError):   # a missing or unreadable bundled checkpoint: no learned presets
            pass
    return {**MATERIAL_PRESETS, **LEARNED_PRESETS}


def _finite(value) -> bool:
    """A real number (not a bool) that is finite as a float (huge integers are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def resolve_material(material: dict | Material | None, where: str = "material") -> Material:
    """The `Material` of a dict (a scene's, a file's, the sliders'): filled from its preset (or the
    kind's default) and checked. A `Material` is already resolved and comes back as it is."""
    if isinstance(material, Material):
        return material
    material = dict(material or {})
    unknown = set(material) - MATERIAL_KEYS
    if unknown:
        raise FormatError(f"{where}: unknown material key {brief(sorted(map(str, unknown))[0])}")
    preset = material.get("preset")
    if preset is None:
        preset = "cloth" if material.get("kind") == "cloth" else DEFAULT_MATERIAL
    presets = MATERIAL_PRESETS if isinstance(preset, str) and preset in MATERIAL_PRESETS else known_presets()
    if not isinstance(preset, str) or preset not in presets:
        raise FormatError(f"{where}: unknown material preset {brief(preset)} (one of {', '.join(known_presets())})")
    out = dict(presets[preset])
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
    return Material.from_dict(_resolve_law(out, where))


def _resolve_law(out: dict, where: str) -> dict:
    """The solid's constitutive law: neo-Hookean (the default, no key kept) or Mooney-Rivlin
    with the share `i2_share` of the shear modulus on the second invariant."""
    law = out.pop("law", NEO_HOOKEAN)
    if law not in SOLID_LAWS:
        raise FormatError(f"{where}: unknown 'law' {brief(law)} (one of {', '.join(SOLID_LAWS)})")
    if law == NEO_HOOKEAN:
        if "i2_share" in out:
            raise FormatError(f"{where}: 'i2_share' needs \"law\": \"mooney_rivlin\"")
        return out
    if out["kind"] != "solid":
        raise FormatError(f"{where}: 'law' is for solids; cloth has one law")
    share = out.get("i2_share", DEFAULT_I2_SHARE)
    if not _finite(share) or not 0.0 <= share <= 1.0:
        raise FormatError(f"{where}: 'i2_share' must be a number in [0, 1], got {brief(share)}")
    out["law"], out["i2_share"] = law, float(share)
    return out


# --------------------------------------------------------------------------- validation

def _vec3(where, value):
    if not (isinstance(value, (list, tuple)) and len(value) == 3 and all(_finite(x) for x in value)):
        raise FormatError(f"{where}: expected three finite numbers, got {brief(value)}")
    return [float(x) for x in value]


def _number(where, value, positive=False, non_negative=False):
    if not _finite(value):
        raise FormatError(f"{where}: expected a number, got {brief(value)}")
    if positive and value <= 0:
        raise FormatError(f"{where}: must be positive, got {value}")
    if non_negative and value < 0:
        raise FormatError(f"{where}: must not be negative, got {value}")
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
    out["detail"] = check_detail(out["detail"], where)
    if not isinstance(out.get("material", {}), dict):
        raise FormatError(f"{where}: 'material' must be an object")
    out["material"] = resolve_material(out.get("material"), f"{where}: material").to_dict()
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
            raise FormatError(f"{where}: 'floor' must be null or {{'z': height, 'friction': mu}}")
        floor["z"] = _number(f"{where}: floor.z", floor["z"])
        floor["friction"] = _number(f"{where}: floor.friction", floor.get("friction", FLOOR_FRICTION), non_negative=True)
    colliders = out.setdefault("colliders", [])
    if not isinstance(colliders, list):
        raise FormatError(f"{where}: 'colliders' must be a list")
    for i, col in enumerate(colliders):
        validate_collider(col, f"{where}: colliders[{i}]")
    initial = out.setdefault("initial", {})
    if not isinstance(initial, dict):
        raise FormatError(f"{where}: 'initial' must be an object")
    initial["velocity"] = _vec3(f"{where}: initial.velocity", initial.get("velocity", [0.0, 0.0, 0.0]))
    if "self_collision" in out:         # only when given: a scene without it keeps its digest
        distance, friction = self_collision_setting(out["self_collision"], where)
        out["self_collision"] = None if distance is None else {"distance": distance, "friction": friction}
    return out


def self_collision_setting(value, where: str) -> tuple[float | None, float]:
    """The scene key "self_collision" (a cloth's self-contact): true (Blender's default distance
    and our default friction between the layers), {"distance": metres, "friction": mu} (either
    may be left out), or false / null (off) -> (the thickness in metres or None, mu)."""
    if value is None or value is False:
        return None, SELF_FRICTION
    if value is True:
        value = {}
    if not isinstance(value, dict) or not set(value) <= {"distance", "friction"}:
        raise FormatError(f"{where}: 'self_collision' must be true, false or {{'distance': metres, 'friction': mu}}, "
                          f"got {brief(value)}")
    return (_number(f"{where}: self_collision.distance", value.get("distance", DEFAULT_SELF_DISTANCE), positive=True),
            _number(f"{where}: self_collision.friction", value.get("friction", SELF_FRICTION), non_negative=True))


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


# --------------------------------------------------------------------------- resolved setup

def setup_from_scene(mesh: Mesh, scene: dict, vertex_groups: dict | None = None, where: str = "scene") -> Setup:
    """Resolve a validated scene on a mesh (rest = the mesh's own coordinates, metres)."""
    scene = validate_scene(scene, where)
    warnings = check_mesh(mesh, getattr(mesh, "name", "mesh"))  # before the selectors, which read the mesh
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
    distance, self_friction = self_collision_setting(scene.get("self_collision"), where)
    return setup_from_arrays(mesh, frames=frames, dt=scene["dt"], gravity=scene["gravity"], material=scene["material"],
                             pin_weight=pin_weight, pin_targets=pin_targets, force_terms=force_terms,
                             floor_z=None if floor is None else floor["z"],
                             floor_friction=FLOOR_FRICTION if floor is None else floor["friction"], velocity=scene["initial"]["velocity"],
                             colliders=[collider_from_dict(c) for c in scene["colliders"]],
                             meta={"scene": scene.get("meta", {})}, mesh_warnings=warnings, where=where,
                             detail=scene["detail"], self_collision=distance, self_friction=self_friction)


def setup_from_arrays(mesh: Mesh, *, frames: int, dt: float, gravity, material: dict, pin_weight=None,
                      pin_targets=None, force_terms=(), accel_table=None, floor_z: float | None = None,
                      floor_friction: float = FLOOR_FRICTION,
                      velocity=(0.0, 0.0, 0.0), colliders=(), effectors=(), detail: str = "medium",
                      self_collision: float | None = None, self_friction: float = SELF_FRICTION, meta: dict | None = None,
                      mesh_warnings: list | None = None, where: str = "setup") -> Setup:
    """A Setup from per-vertex arrays (world space, metres and seconds); the material is filled from
    its preset and checked, shapes checked, and the mesh checked unless its `mesh_warnings` are
    given (they go to `meta["warnings"]`)."""
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise FormatError(f"{where}: 'frames' must be a positive integer, got {brief(frames)}")
    warnings = check_mesh(mesh, getattr(mesh, "name", "mesh")) if mesh_warnings is None else mesh_warnings
    rest = np.asarray(mesh.vertices, dtype=np.float64)
    n = len(rest)
    pin_weight = np.zeros(n) if pin_weight is None else np.asarray(pin_weight, dtype=np.float64)
    _check_shape(where, "pin_weight", pin_weight, (n,))
    for name, table in (("pin_targets", pin_targets), ("accel_table", accel_table)):
        if table is not None:
            _check_shape(where, name, table, (frames, n, 3))
    return with_notes(Setup(rest=rest, faces=np.asarray(mesh.faces), x0=rest.copy(),
                 v0=np.tile(np.asarray(_vec3(f"{where}: initial velocity", list(velocity))), (n, 1)),
                 dt=_number(f"{where}: 'dt'", dt, positive=True), frames=frames,
                 gravity=np.asarray(_vec3(f"{where}: 'gravity'", list(gravity))),
                 material=resolve_material(material, f"{where}: material"), pin_weight=pin_weight,
                 pin_targets=pin_targets, accel_table=accel_table, force_terms=list(force_terms),
                 floor_z=None if floor_z is None else _number(f"{where}: floor z", floor_z),
                 floor_friction=_number(f"{where}: floor friction", floor_friction, non_negative=True),
                 meta=dict(meta or {}, warnings=warnings), colliders=list(colliders), effectors=list(effectors),
                 detail=check_detail(detail, where),
                 self_collision=None if self_collision is None else _number(f"{where}: self_collision", self_collision,
                                                                            positive=True),
                 self_friction=_number(f"{where}: self_friction", self_friction, non_negative=True)))


def with_notes(setup: Setup) -> Setup:
    """The setup with `meta["notes"]`: what the user should know about it though it runs
    (`checks.support_notes`); the command line prints them and the add-on shows them."""
    setup.meta["notes"] = support_notes(setup)
    return setup


def check_detail(detail, where: str) -> str:
    if detail not in DETAILS:
        raise FormatError(f"{where}: 'detail' must be one of {', '.join(DETAILS)}, got {brief(detail)}")
    return detail


def _check_shape(where: str, name: str, array, shape: tuple) -> None:
    if np.shape(array) != shape:
        raise FormatError(f"{where}: '{name}' has shape {np.shape(array)}, expected {shape}")


def setup_from_sequence(seq: Sequence) -> Setup:
    """The setup recorded in a sequence: same start, forces, pins, material and frame count."""
    n = seq.num_vertices
    material = resolve_material({k: v for k, v in seq.material.items() if k in MATERIAL_KEYS})
    return with_notes(Setup(rest=seq.rest.astype(np.float64), faces=np.asarray(seq.faces),
                 x0=seq.positions[0].astype(np.float64),
                 v0=np.zeros((n, 3)) if seq.velocity0 is None else seq.velocity0.astype(np.float64),
                 dt=seq.dt, frames=seq.frames, gravity=seq.gravity.astype(np.float64), material=material,
                 pin_weight=np.zeros(n) if seq.pin_weight is None else seq.pin_weight.astype(np.float64),
                 pin_targets=None if seq.pin_target is None else seq.pin_target.astype(np.float64),
                 accel_table=None if seq.external_accel is None else seq.external_accel.astype(np.float64),
                 floor_z=seq.floor_z, floor_friction=FLOOR_FRICTION if seq.floor_friction is None else seq.floor_friction,
                 vertex_mass=None if seq.vertex_mass is None else seq.vertex_mass.astype(np.float64),
                 self_collision=seq.meta.get("self_collision"),
                 # recorded before the layers had friction: frictionless, as it was made
                 self_friction=seq.meta.get("self_friction", 0.0), meta=dict(seq.meta)))


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


# --------------------------------------------------------------------------- setup -> scene (export)

def scene_from_setup(setup: Setup, material: dict | None = None, pin_strength: float = 1.0,
                     meta: dict | None = None) -> dict:
    """A `neurok.scene/1` dict that `setup_from_scene` turns back into (nearly) this setup, for export.

    What the format cannot hold is approximated and said in `meta["notes"]` by the caller: moving pin
    targets become their mean offset per frame (rotation is lost), a per-frame force table is written
    as its force terms, and force fields become static per-axis forces taken on the rest surface at
    the first frame."""
    scene = {"format": SCENE_FORMAT, "frames": setup.frames, "dt": setup.dt,
             "gravity": [float(g) for g in setup.gravity], "material": dict(material) if material else setup.material.to_dict(),
             "pins": _export_pins(setup, pin_strength), "forces": _export_forces(setup),
             "floor": None if setup.floor_z is None else {"z": float(setup.floor_z),
                                                          "friction": float(setup.floor_friction)},
             "colliders": [_export_collider(c) for c in setup.colliders],
             "initial": {"velocity": [float(x) for x in setup.v0[0]] if len(setup.v0) else [0.0, 0.0, 0.0]},
             "detail": setup.detail}
    if setup.self_collision:
        scene["self_collision"] = {"distance": float(setup.self_collision), "friction": float(setup.self_friction)}
    if meta is not None:
        scene["meta"] = meta
    return scene


def _export_pins(setup: Setup, strength: float) -> list:
    if not setup.pin_weight.any():
        return []
    pin = {"select": {"weights": (setup.pin_weight / strength).tolist()}, "strength": float(strength)}
    if setup.pin_targets is not None:
        mask = setup.pin_weight > 0
        offsets = (setup.pin_targets[:, mask] - setup.rest[mask]).mean(axis=1)
        pin["target_offset"] = [[t, offsets[t].tolist()] for t in range(len(offsets))]
    return [pin]


def _export_forces(setup: Setup) -> list:
    forces = [{"select": {"weights": np.asarray(w).tolist()}, "accel": [float(x) for x in accel], "profile": profile}
              for w, accel, profile in setup.force_terms]
    if setup.effectors:
        normals = vertex_normals(setup.rest, setup.faces)
        at_rest = total_accel(setup.effectors, 0, setup.rest, None, normals,
                              surface=setup.material.kind == "cloth")
        for axis in range(3):
            for sign in (1.0, -1.0):
                weights = np.maximum(sign * at_rest[:, axis], 0.0)
                if weights.max() > 0.0:
                    accel = [0.0, 0.0, 0.0]
                    accel[axis] = sign
                    forces.append({"select": {"weights": weights.tolist()}, "accel": accel, "profile": {"type": "constant"}})
    return forces


def _export_collider(c: Collider) -> dict:
    out = {"name": c.name, "thickness": float(c.thickness_outer), "thickness_inner": float(c.thickness_inner),
           "friction": float(c.friction), "damping": float(c.damping), "faces": np.asarray(c.faces).tolist()}
    if c.frames == 1:
        out["vertices"] = c.positions[0].tolist()
    else:
        out["positions"] = c.positions.tolist()
    return out
