"""Painted forces: each enabled force's vertex group, direction (fixed, or an object's axis), strength
and profile (constant, impulse, sine, keyframed strength) -> engine force terms (weights, acceleration
at the first frame, profile). A direction object that turns over time needs the per-frame table."""
from __future__ import annotations

import numpy as np

from ..animation import find_fcurve
from ..engine_link import profile_value
from ..objects import UserError

AXES = {'POS_X': (0, 1.0), 'POS_Y': (1, 1.0), 'POS_Z': (2, 1.0), 'NEG_X': (0, -1.0), 'NEG_Y': (1, -1.0), 'NEG_Z': (2, -1.0)}


def item_label(item, i):
    return item.name or f"#{i + 1}"


def enabled_forces(settings) -> list:
    """(index, force) of the enabled painted forces."""
    return [(i, f) for i, f in enumerate(settings.forces) if f.enabled]


def check_forces(forces) -> None:
    for i, f in forces:
        if not f.vertex_group:
            raise UserError(f"Force '{item_label(f, i)}' has no vertex group; pick where it acts.")
        if f.direction_mode == 'OBJECT' and f.direction_object is None:
            raise UserError(f"Force '{item_label(f, i)}' takes its direction from an object, but none is set.")


def gather_forces(obj, forces, body, start: int, frames: int, dt: float, notes: list):
    """(force terms [(weights [N], accel [3], profile)], per-frame table [T,N,3] or None)."""
    terms, table_parts, turning = [], [], False
    for i, f in forces:
        label = item_label(f, i)
        w = body.weights[f.vertex_group]
        if not w.any():
            raise UserError(f"Vertex group '{f.vertex_group}' of force '{label}' has no weighted vertices.")
        dirs = _directions(f, body, frames)
        if f.direction_mode == 'OBJECT' and np.abs(dirs - dirs[0]).max() > 1e-9:
            turning = True
            notes.append(f"force '{label}' points along '{f.direction_object.name}' as it is at the first frame")
        norms = np.linalg.norm(dirs, axis=1)
        if norms.min() < 1e-12:
            raise UserError(f"Force '{label}' has a zero-length direction.")
        dirs = dirs / norms[:, None]
        profile, strength = _profile(obj, f, i, label, start, frames)
        terms.append((w, np.asarray([float(x) for x in strength * dirs[0]]), profile))
        table_parts.append((profile, w, strength * dirs))
    if not turning:
        return terms, None
    table = np.zeros((frames, len(body.rest), 3))
    for profile, w, per_frame_dir in table_parts:
        mult = np.array([profile_value(profile, t, dt) for t in range(frames)])
        table += mult[:, None, None] * w[None, :, None] * per_frame_dir[:, None, :]
    return terms, table


def _directions(f, body, frames: int) -> np.ndarray:
    """Direction [T,3] of a force at every frame, not yet normalised."""
    if f.direction_mode == 'OBJECT':
        col, sign = AXES[f.axis]
        return sign * body.sampled[f.direction_object.name]["matrix"][:, :3, col]
    return np.tile(np.asarray(f.direction, dtype=np.float64), (frames, 1))


def _profile(obj, f, i: int, label: str, start: int, frames: int) -> tuple[dict, float]:
    """(profile, strength that multiplies the direction): a keyframed force carries its strength in the profile."""
    lo = f.frame_start - start
    if f.profile == 'KEYFRAMED':
        fc = find_fcurve(obj, f"neurok.forces[{i}].strength")
        if fc is None:
            raise UserError(f"Force '{label}' is Keyframed but its Strength has no keyframes; key it (I over the field) first.")
        return {"type": "keyframes", "keys": [[t, float(fc.evaluate(start + t))] for t in range(frames)]}, 1.0
    if f.profile == 'IMPULSE':
        return {"type": "impulse", "start": lo, "end": lo + f.duration}, f.strength
    if f.profile == 'SINE':
        return {"type": "sine", "start": lo, "end": f.frame_end - start, "frequency": float(f.frequency)}, f.strength
    return {"type": "constant", "start": lo, "end": f.frame_end - start}, f.strength
