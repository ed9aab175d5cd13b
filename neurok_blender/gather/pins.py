"""Pins: the Pin Group (a vertex group) read as per-vertex pin weights × Pin Strength, and where the
pinned vertices are held every frame: a Pin Target object's motion, the animated object or deforming
stack they belong to, or (neither) where they start."""
from __future__ import annotations

import numpy as np

from ..mesh_data import transform
from ..objects import UserError


def gather_pins(settings, body, frames: int, warnings: list, notes: list):
    """(pin weights [N] or None, pin targets [T,N,3] or None)."""
    if not settings.pin_group:
        if settings.pin_target is not None:
            warnings.append("Pin Target is set but there is no Pin Group, so it has no effect.")
        return None, None
    w = body.weights[settings.pin_group]
    if not w.any():
        raise UserError(f"Pin group '{settings.pin_group}' has no weighted vertices.")
    pin_weight = np.maximum(np.zeros(len(w)), float(settings.pin_strength) * w)
    targets = _pin_targets(settings, body, frames)
    if targets is not None:
        notes.append("pinned vertices follow a moving target; the export keeps only its mean offset per frame "
                     "(rotation is lost)")
    return pin_weight, targets


def _pin_targets(settings, body, frames: int):
    if settings.pin_target is not None:
        # the target's full transform (rotation and scale too) relative to the first frame, every frame
        pm = body.sampled[settings.pin_target.name]["matrix"]
        rel = pm @ np.linalg.inv(pm[0])
        if np.abs(rel - np.eye(4)).max() > 1e-12:
            return np.stack([transform(body.rest, rel[t]) for t in range(frames)])
        return None
    if body.world_frames is not None:
        return np.stack(body.world_frames)  # the pinned region follows the animated object / deformation
    return None
