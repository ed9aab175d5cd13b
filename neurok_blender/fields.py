"""Blender force fields -> engine effectors (the evaluation itself is `engine.core.fields`, pure numpy).

Blender has no Python call that samples the combined effector field at a point, so `describe()` reads
an object's `FieldSettings` into plain parameters, and `effector()` combines them with the field
object's world matrix and strength sampled every frame and with the simulated object's Field Weights
(type weight × All × Field Influence) into an `engine.core.fields.Effector`. Engines evaluate effectors
per step on the deformed surface (positions, normals, velocities): both engines replace the per-frame
table evaluated on the rest surface (`setup.field_accel_rest`) by it; the table stays for the scene export.

Supported: Force, Wind, Vortex, Turbulence, Drag, Harmonic, Charge; shapes Point and Plane (others as
Point); falloff Sphere, Tube and Cone with Min/Max distance, Z Direction, Noise, Flow, Seed, Size,
Harmonic Damping. Not supported (said in the panel and when simulating, never silently): Magnetic,
Lennard-Jones, Texture, Curve Guide, Boid and Fluid Flow fields; Absorption; Gravitation falloff; 2D.
"""
from __future__ import annotations

from .engine_link import efields

SUPPORTED_TYPES = efields.SUPPORTED_TYPES
NOT_SUPPORTED_NOTE = ("Fields act like Blender's: Force, Wind, Vortex, Turbulence, Drag, Harmonic and Charge, with "
                      "Sphere/Tube/Cone falloff, Effector Collection and Field Weights. Not supported: Magnetic, "
                      "Lennard-Jones, Texture, Curve Guide, Boid and Fluid Flow fields, Absorption, Gravitation "
                      "falloff and 2D. Both engines evaluate fields on the deformed surface every step.")

_TYPE_NAMES = {"WIND": "Wind", "FORCE": "Force", "VORTEX": "Vortex", "TURBULENCE": "Turbulence", "DRAG": "Drag",
               "HARMONIC": "Harmonic", "CHARGE": "Charge", "LENNARDJ": "Lennard-Jones", "MAGNET": "Magnetic",
               "TEXTURE": "Texture", "GUIDE": "Curve Guide", "BOID": "Boid", "FLUID_FLOW": "Fluid Flow"}
# FieldSettings.type -> EffectorWeights attribute (Blender's names)
WEIGHT_NAMES = {"FORCE": "force", "WIND": "wind", "VORTEX": "vortex", "TURBULENCE": "turbulence", "DRAG": "drag",
                "HARMONIC": "harmonic", "CHARGE": "charge"}


def type_name(kind: str) -> str:
    return _TYPE_NAMES.get(kind, kind.title())


def describe(ob, weights=None) -> tuple[dict | None, list[str]]:
    """(parameters, problems) for an object's force field; parameters is None when it does not act.

    `weights` is the simulated object's Field Weights (NeurokFieldWeights); a weight of 0 switches a type off.
    `problems` are one-sentence notes about settings NeuROK does not follow.
    """
    f = ob.field
    if f is None or f.type == 'NONE':
        return None, []
    kind = type_name(f.type)
    if f.type not in SUPPORTED_TYPES:
        return None, [f"'{ob.name}' is a {kind} field, which NeuROK does not support; it is ignored."]
    weight = 1.0
    if weights is not None:
        weight = float(weights.all) * float(getattr(weights, WEIGHT_NAMES[f.type]))
        if weight == 0.0:
            return None, []
    problems = []
    if f.shape not in ("POINT", "PLANE"):
        problems.append(f"'{ob.name}' uses field shape {f.shape.title()}; NeuROK uses Point instead.")
    if getattr(f, "use_absorption", False):
        problems.append(f"'{ob.name}' uses Absorption, which NeuROK ignores.")
    if getattr(f, "use_gravity_falloff", False):
        problems.append(f"'{ob.name}' uses Gravitation falloff, which NeuROK ignores.")
    if getattr(f, "use_2d_force", False):
        problems.append(f"'{ob.name}' uses 2D force, which NeuROK ignores.")
    params = {
        "name": ob.name, "type": f.type, "shape": "PLANE" if f.shape == "PLANE" else "POINT",
        "strength": float(f.strength), "flow": float(getattr(f, "flow", 0.0)), "noise": float(getattr(f, "noise", 0.0)),
        "seed": int(getattr(f, "seed", 0)), "size": float(getattr(f, "size", 1.0)) or 1.0,
        "falloff_type": f.falloff_type, "power": float(f.falloff_power),
        "use_min": bool(f.use_min_distance), "min": float(f.distance_min),
        "use_max": bool(f.use_max_distance), "max": float(f.distance_max),
        "radial_power": float(getattr(f, "radial_falloff", 0.0)),
        "use_radial_min": bool(getattr(f, "use_radial_min", False)), "radial_min": float(getattr(f, "radial_min", 0.0)),
        "use_radial_max": bool(getattr(f, "use_radial_max", False)), "radial_max": float(getattr(f, "radial_max", 0.0)),
        "z_direction": f.z_direction, "harmonic_damping": float(getattr(f, "harmonic_damping", 0.0)),
        "weight": weight,
    }
    return params, problems


def effector(params: dict, matrices, strengths, influence: float = 1.0):
    """An engine Effector from `describe()` parameters and the field object's per-frame matrices/strengths."""
    p = dict(params)
    p.pop("strength", None)
    p["weight"] = p.get("weight", 1.0) * influence
    return efields.Effector(matrix=matrices, strength=strengths, **p)


def field_accel(points, matrix, p: dict, strength: float | None = None):
    """Acceleration [N,3] (m/s²) of one field at world points for one world matrix (no surface, no velocity)."""
    import numpy as np
    e = effector({"name": "field", **p}, np.asarray(matrix)[None], [p["strength"] if strength is None else strength])
    return efields.accel(e, 0, points)
