"""Blender force fields (Wind, Force) evaluated as per-vertex accelerations.

Blender has no Python call that samples the combined effector field at a point, so the supported
field types are evaluated here the way Blender's effector code does it (effect.cc):

* Force: along (p - o)/|p - o| × strength × falloff  (positive strength pushes away)
* Wind:  along the field object's local +Z × strength × falloff
* distance: |p - o| for shape Point; distance to the object's XY plane for shape Plane
* falloff Sphere: 0 beyond Max Distance (if used), 1 inside Min Distance (if used),
  otherwise (1 + d - min)^-power
* Z Direction Positive / Negative: no effect on the other side of the object's XY plane

NeuROK reads a field's Strength as an acceleration in m/s² (mass independent, like gravity),
scaled by the object's Field Influence. Fields are evaluated at each vertex's rest position
(the frame-0 pose in world space) every frame, with the field object's animated transform and
strength. Everything here is plain numpy; `describe()` only reads attributes of `object.field`.
"""
from __future__ import annotations

import numpy as np

SUPPORTED_TYPES = ("WIND", "FORCE")
SUPPORTED_SHAPES = ("POINT", "PLANE")
NOT_SUPPORTED_NOTE = ("Only Wind and Force fields with Sphere falloff and Point/Plane shape are used. Not supported: "
                      "Vortex, Turbulence, Drag, Harmonic, Charge, Lennard-Jones, Magnetic, Texture, Guide, Boid and "
                      "Fluid fields; Tube/Cone falloff; Noise, Flow, Absorption, Gravitation and 2D options; fields act "
                      "on rest positions, not the moving surface.")

_TYPE_NAMES = {"WIND": "Wind", "FORCE": "Force", "VORTEX": "Vortex", "TURBULENCE": "Turbulence", "DRAG": "Drag",
               "HARMONIC": "Harmonic", "CHARGE": "Charge", "LENNARDJ": "Lennard-Jones", "MAGNET": "Magnetic",
               "TEXTURE": "Texture", "GUIDE": "Curve Guide", "BOID": "Boid", "FLUID_FLOW": "Fluid Flow"}


def describe(ob) -> tuple[dict | None, list[str]]:
    """(parameters, problems) for an object's force field; parameters is None when it is not used at all.

    `problems` are one-sentence notes about settings NeuROK does not follow (shown in the panel and
    reported when simulating) instead of ignoring them silently.
    """
    f = ob.field
    if f is None or f.type == 'NONE':
        return None, []
    kind = _TYPE_NAMES.get(f.type, f.type.title())
    if f.type not in SUPPORTED_TYPES:
        return None, [f"'{ob.name}' is a {kind} field, which NeuROK does not support; it is ignored."]
    problems = []
    if f.shape not in SUPPORTED_SHAPES:
        return None, [f"'{ob.name}' uses field shape {f.shape.title()}, which NeuROK does not support; it is ignored."]
    if f.falloff_type != 'SPHERE':
        problems.append(f"'{ob.name}' uses {f.falloff_type.title()} falloff; NeuROK uses Sphere falloff instead.")
    if getattr(f, "noise", 0.0) > 0.0:
        problems.append(f"'{ob.name}' has Noise, which NeuROK ignores.")
    if getattr(f, "use_absorption", False):
        problems.append(f"'{ob.name}' uses Absorption, which NeuROK ignores.")
    if getattr(f, "use_gravity_falloff", False):
        problems.append(f"'{ob.name}' uses Gravitation falloff, which NeuROK ignores.")
    if getattr(f, "use_2d_force", False):
        problems.append(f"'{ob.name}' uses 2D force, which NeuROK ignores.")
    params = {
        "name": ob.name, "type": f.type, "shape": f.shape, "strength": float(f.strength),
        "power": float(f.falloff_power), "use_min": bool(f.use_min_distance), "min": float(f.distance_min),
        "use_max": bool(f.use_max_distance), "max": float(f.distance_max), "z_direction": f.z_direction,
    }
    return params, problems


def falloff(dist: np.ndarray, p: dict) -> np.ndarray:
    dist = np.asarray(dist, dtype=np.float64)
    dmin = p["min"] if p["use_min"] else 0.0
    out = np.power(1.0 + np.maximum(dist - dmin, 0.0), -p["power"])
    if p["use_min"]:
        out = np.where(dist < dmin, 1.0, out)
    if p["use_max"]:
        out = np.where(dist > p["max"], 0.0, out)
    return out


def field_accel(points: np.ndarray, matrix: np.ndarray, p: dict, strength: float | None = None) -> np.ndarray:
    """Acceleration [N,3] (m/s²) of one field at world points [N,3]; `matrix` is the field object's world matrix."""
    points = np.asarray(points, dtype=np.float64)
    m = np.asarray(matrix, dtype=np.float64)
    origin = m[:3, 3]
    nor = m[:3, 2]
    nor = nor / max(np.linalg.norm(nor), 1e-12)
    strength = p["strength"] if strength is None else strength
    rel = points - origin
    height = rel @ nor
    vec = height[:, None] * nor[None, :] if p["shape"] == "PLANE" else rel
    dist = np.linalg.norm(vec, axis=1)
    fo = falloff(dist, p)
    if p["z_direction"] == "POSITIVE":
        fo = np.where(height < 0.0, 0.0, fo)
    elif p["z_direction"] == "NEGATIVE":
        fo = np.where(height > 0.0, 0.0, fo)
    if p["type"] == "WIND":
        return (strength * fo)[:, None] * nor[None, :]
    unit = vec / np.maximum(dist, 1e-12)[:, None]
    unit[dist < 1e-12] = 0.0
    return (strength * fo)[:, None] * unit
