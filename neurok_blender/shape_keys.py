"""Bake to shape keys: one key per frame, keyed over the timeline (absolute or relative), and their removal."""
from __future__ import annotations

import bpy
import numpy as np

from .animation import channelbag_fcurves, ensure_fcurve, set_linear_keys
from .objects import UserError
from .stack import FRAME_KEY_FORMAT, FRAME_KEY_PATH_RE, own_frame_keys


LONG_SHAPE_KEY_RANGE = 250


def _remove_own_curves(key, remove_eval_time: bool) -> None:
    fcurves = channelbag_fcurves(key)
    if fcurves is None:
        return
    for fc in list(fcurves):
        if FRAME_KEY_PATH_RE.match(fc.data_path) or (remove_eval_time and fc.data_path == "eval_time"):
            fcurves.remove(fc)


def remove_shape_keys(obj) -> bool:
    """Remove NeuROK's frame keys, their curves, and the Basis/action NeuROK created; user keys stay."""
    bake = obj.neurok.bake
    key = obj.data.shape_keys
    if key is None:
        bake.owns_basis = False
        return False
    ours = own_frame_keys(obj)
    absolute = bake.shape_key_mode == 'ABSOLUTE' or (ours and not key.use_relative)
    _remove_own_curves(key, remove_eval_time=bool(absolute))
    for kb in ours:
        obj.shape_key_remove(kb)
    key = obj.data.shape_keys
    if key is not None:
        ad = key.animation_data
        if ad is not None and ad.action is not None and bake.action_name and ad.action.name == bake.action_name:
            fcurves = channelbag_fcurves(key)
            if fcurves is None or len(fcurves) == 0:
                action = ad.action
                ad.action = None
                if action.users == 0:
                    bpy.data.actions.remove(action)
        if absolute:
            key.use_relative = True
            key.eval_time = 0.0
        if bake.owns_basis and len(key.key_blocks) == 1:
            obj.shape_key_clear()
    bake.owns_basis = False
    bake.action_name = ""
    bake.shape_key_mode = ""
    return bool(ours)


def write_shape_keys(obj, local: np.ndarray, frame_start: int, mode: str) -> tuple[str, list[str]]:
    """Key every frame as a shape key. Returns (mode used, warnings)."""
    warnings = []
    frames = len(local)
    if frames > LONG_SHAPE_KEY_RANGE:
        warnings.append(f"{frames} frames as shape keys make a heavy file and slow playback; "
                        "Bake to Mesh Cache suits long ranges better.")
    remove_shape_keys(obj)
    bake = obj.neurok.bake
    key = obj.data.shape_keys
    if key is not None and not key.use_relative:
        raise UserError(f"'{obj.name}' uses absolute shape keys of its own; bake to a Mesh Cache instead.")
    if key is not None and len(key.key_blocks) > 1 and mode == 'ABSOLUTE':
        mode = 'RELATIVE'
        warnings.append(f"'{obj.name}' has shape keys of its own, so NeuROK keyed relative shape keys "
                        "(absolute keys would change how yours work).")
    if key is None:
        obj.shape_key_add(name="Basis", from_mix=False)
        bake.owns_basis = True
        key = obj.data.shape_keys
    had_action = key.animation_data is not None and key.animation_data.action is not None
    names = []
    for t in range(frames):
        kb = obj.shape_key_add(name=FRAME_KEY_FORMAT.format(t), from_mix=False)
        kb.data.foreach_set("co", np.ascontiguousarray(local[t], dtype=np.float32).ravel())
        kb.interpolation = 'KEY_LINEAR'
        kb.value = 0.0
        names.append(kb.name)
    key = obj.data.shape_keys
    scene_frames = np.arange(frames, dtype=np.float64) + frame_start
    if mode == 'ABSOLUTE':
        key.use_relative = False
        positions = [key.key_blocks[nm].frame for nm in names]
        fc = ensure_fcurve(key, obj, "eval_time")
        set_linear_keys(fc, scene_frames, positions)
    else:
        for t, nm in enumerate(names):
            fc = ensure_fcurve(key, obj, f'key_blocks["{nm}"].value')
            fr, val = [], []
            if t > 0:
                fr.append(scene_frames[t] - 1); val.append(0.0)
            fr.append(scene_frames[t]); val.append(1.0)
            if t < frames - 1:
                fr.append(scene_frames[t] + 1); val.append(0.0)
            set_linear_keys(fc, fr, val)
    if not had_action and key.animation_data is not None and key.animation_data.action is not None:
        bake.action_name = key.animation_data.action.name
    bake.shape_key_mode = mode
    return mode, warnings
