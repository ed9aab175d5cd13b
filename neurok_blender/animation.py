"""F-curves (Blender 4.4+ slotted actions and older) and sampling objects over the frame range."""
from __future__ import annotations

import bpy
import numpy as np

from .mesh_data import matrix_np
from .objects import UserError


def maybe_animated(ob) -> bool:
    ad = ob.animation_data
    return bool((ad and (ad.action or len(ad.drivers) or len(ad.nla_tracks))) or ob.parent or len(ob.constraints))


def moves(ob) -> bool:
    """The object's world transform may change over time (animated transform, parent or constraints)."""
    ad = ob.animation_data
    paths = set()
    if ad is not None:
        paths = {fc.data_path for fc in (channelbag_fcurves(ob) or [])} | {fc.data_path for fc in ad.drivers}
        if len(ad.nla_tracks):
            return True
    transform = ("location", "rotation_euler", "rotation_quaternion", "rotation_axis_angle", "scale",
                 "delta_location", "delta_rotation_euler", "delta_rotation_quaternion", "delta_scale")
    return bool(paths & set(transform)) or ob.parent is not None or len(ob.constraints) > 0


def find_fcurve(id_data, data_path: str, index: int = 0):
    """The F-curve animating `data_path` on an ID (Blender 4.4+ slotted actions and older)."""
    ad = getattr(id_data, "animation_data", None)
    if ad is None or ad.action is None:
        return None
    action = ad.action
    try:
        from bpy_extras.anim_utils import action_get_channelbag_for_slot
    except ImportError:  # Blender 4.2/4.3
        return action.fcurves.find(data_path, index=index)
    slot = getattr(ad, "action_slot", None)
    if slot is None:
        return None
    bag = action_get_channelbag_for_slot(action, slot)
    return None if bag is None else bag.fcurves.find(data_path, index=index)


def channelbag_fcurves(id_data):
    ad = getattr(id_data, "animation_data", None)
    if ad is None or ad.action is None:
        return None
    try:
        from bpy_extras.anim_utils import action_get_channelbag_for_slot
    except ImportError:
        return ad.action.fcurves
    if getattr(ad, "action_slot", None) is None:
        return None
    bag = action_get_channelbag_for_slot(ad.action, ad.action_slot)
    return None if bag is None else bag.fcurves


def set_linear_keys(fcurve, frames, values) -> None:
    """Replace an F-curve's keys with (frame, value) pairs, linearly interpolated."""
    kps = fcurve.keyframe_points
    kps.clear()
    kps.add(len(frames))
    co = np.column_stack([np.asarray(frames, np.float32), np.asarray(values, np.float32)]).ravel()
    kps.foreach_set("co", co)
    for kp in kps:
        kp.interpolation = 'LINEAR'
        kp.handle_left_type = kp.handle_right_type = 'VECTOR'
    fcurve.extrapolation = 'CONSTANT'
    fcurve.update()


def ensure_fcurve(id_data, owner, data_path: str):
    """An F-curve for `data_path` on `id_data`, created through keyframe_insert (creates action and slot)."""
    fc = find_fcurve(id_data, data_path)
    if fc is None:
        id_data.keyframe_insert(data_path, frame=0.0)
        fc = find_fcurve(id_data, data_path)
    if fc is None:
        raise UserError(f"Could not create an animation curve for {data_path} on '{id_data.name}'.")
    return fc


def sample_frames(context, start: int, frames: int, objects=(), callback=None, always: bool = False) -> dict[str, dict]:
    """World matrix [T,4,4] and field strength [T] of the named objects for every simulated frame, and
    `callback(t)` called with the scene at each frame. Frames are visited with scene.frame_set only when
    something moves (or `always`); the current frame is restored afterwards."""
    scene = context.scene
    names = [n for n in dict.fromkeys(objects) if n in bpy.data.objects]
    out = {n: {"matrix": np.empty((frames, 4, 4)), "strength": np.zeros(frames)} for n in names}
    animated = always or any(maybe_animated(bpy.data.objects[n]) for n in names)
    if not animated:
        for n in names:
            ob = bpy.data.objects[n]
            out[n]["matrix"][:] = matrix_np(ob.matrix_world)
            out[n]["strength"][:] = ob.field.strength if ob.field else 0.0
        if callback is not None:  # nothing moves: the current frame looks like the first one
            callback(0)
        return out
    current, sub = scene.frame_current, scene.frame_subframe
    try:
        for t in range(frames):
            scene.frame_set(start + t)
            for n in names:
                ob = bpy.data.objects[n]
                out[n]["matrix"][t] = matrix_np(ob.matrix_world)
                out[n]["strength"][t] = ob.field.strength if ob.field else 0.0
            if callback is not None:
                callback(t)
    finally:
        scene.frame_set(current, subframe=sub)
    return out


def sample_objects(context, names, start: int, frames: int) -> dict[str, dict]:
    return sample_frames(context, start, frames, names)
