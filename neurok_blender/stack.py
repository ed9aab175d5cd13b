"""The modifier stack: NeuROK's place in it, its own modifiers and shape keys, and what comes before it.

Everything NeuROK writes has a fixed name, so a re-bake or a free touches only its own things:
the modifiers "NeuROK Cache" and "NeuROK Preview", shape keys "NeuROK 0000".."NeuROK 9999"
(and "Basis" when NeuROK created it), their F-curves, and the cache file recorded on the object.
"""
from __future__ import annotations

import re

import numpy as np

from .animation import channelbag_fcurves, maybe_animated
from .mesh_data import mesh_data_arrays, vertex_group_weights
from .objects import UserError


CACHE_MODIFIER = "NeuROK Cache"
PREVIEW_MODIFIER = "NeuROK Preview"
FRAME_KEY_FORMAT = "NeuROK {:04d}"
FRAME_KEY_RE = re.compile(r"^NeuROK \d{4,}$")
FRAME_KEY_PATH_RE = re.compile(r'^key_blocks\["NeuROK \d{4,}"\]\.value$')
POSE_KEY = "NeuROK Pose"


def own_place(obj) -> int | None:
    """Index of "NeuROK Cache" in the stack (NeuROK's place, like a Cloth modifier's), or None."""
    for i, mod in enumerate(obj.modifiers):
        if mod.name == CACHE_MODIFIER and mod.type == 'MESH_CACHE':
            return i
    return None


def modifiers_before(obj) -> list:
    """The user's modifiers NeuROK simulates on top of: all of them before NeuROK's place (all, without one)."""
    place = own_place(obj)
    mods = list(obj.modifiers) if place is None else list(obj.modifiers)[:place]
    return [m for m in mods if m.name not in (CACHE_MODIFIER, PREVIEW_MODIFIER)]


def stack_key(obj) -> tuple:
    """The modifier stack as a preview input."""
    return tuple((m.name, m.type, m.show_viewport) for m in obj.modifiers if m.name != PREVIEW_MODIFIER)


def own_modifier(obj, name: str):
    mod = obj.modifiers.get(name)
    return mod if mod is not None and mod.type == 'MESH_CACHE' else None


def new_cache_modifier(obj, name: str, index: int | None):
    """NeuROK's Mesh Cache modifier `name`: kept where it is in the stack, or created at `index` (None: the end
    of the stack, where Blender puts a new physics modifier)."""
    existing = obj.modifiers.get(name)
    if existing is not None and existing.type != 'MESH_CACHE':
        raise UserError(f"'{obj.name}' has a modifier called '{name}' that NeuROK did not make; rename it first.")
    if existing is not None:
        return existing
    mod = obj.modifiers.new(name, 'MESH_CACHE')
    if index is not None:
        current = list(obj.modifiers).index(mod)
        if current != index:
            obj.modifiers.move(current, index)
    return obj.modifiers[name]


def ensure_place(obj):
    """NeuROK's place in the stack: "NeuROK Cache", created at the end and switched off until a bake fills it."""
    mod = own_modifier(obj, CACHE_MODIFIER)
    if mod is None:
        mod = new_cache_modifier(obj, CACHE_MODIFIER, None)
        mod.cache_format = 'PC2'
        mod.show_viewport = mod.show_render = False
    return mod


def own_frame_keys(obj) -> list:
    key = obj.data.shape_keys
    return [] if key is None else [kb for kb in key.key_blocks if FRAME_KEY_RE.match(kb.name)]


class InputStack:
    """Context manager: evaluate only what comes before NeuROK in the stack (NeuROK's own modifiers, what
    follows them, and NeuROK's own shape keys switched off), then put everything back."""

    def __init__(self, obj):
        self.obj = obj
        self.saved = []
        self.key_saved = []

    def __enter__(self):
        obj = self.obj
        place = own_place(obj)
        for i, mod in enumerate(obj.modifiers):
            after = place is not None and i >= place
            if (after or mod.name in (CACHE_MODIFIER, PREVIEW_MODIFIER)) and mod.show_viewport:
                self.saved.append((mod.name, mod.show_viewport))
                mod.show_viewport = False
        key = obj.data.shape_keys
        if key is not None:
            ours = own_frame_keys(obj)
            if ours and not key.use_relative:
                self.key_saved.append(("use_relative", False))
                key.use_relative = True
            for kb in ours:
                if not kb.mute:
                    self.key_saved.append((kb.name, False))
                    kb.mute = True
        return self

    def __exit__(self, *exc):
        obj = self.obj
        for name, value in self.saved:
            mod = obj.modifiers.get(name)
            if mod is not None:
                mod.show_viewport = value
        key = obj.data.shape_keys
        for name, value in reversed(self.key_saved):
            if key is None:
                break
            if name == "use_relative":
                key.use_relative = value
            elif name in key.key_blocks:
                key.key_blocks[name].mute = value
        return False


def needs_evaluation(obj) -> bool:
    """Whether the simulated input differs from obj.data: enabled modifiers before NeuROK, or shape keys."""
    key = obj.data.shape_keys
    user_keys = key is not None and any(not FRAME_KEY_RE.match(kb.name) for kb in key.key_blocks[1:])
    return user_keys or any(m.show_viewport for m in modifiers_before(obj))


def evaluated_input(context, obj, groups=()) -> tuple[np.ndarray, np.ndarray, dict]:
    """(object-space positions [N,3], triangles [F,3], {group: weights [N]}) of what comes before NeuROK in the
    stack at the current frame (call inside `InputStack`)."""
    dg = context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(dg)
    me = ev.to_mesh()
    try:
        co, tris = mesh_data_arrays(me)
        weights = vertex_group_weights(obj, groups, mesh=me)
    finally:
        ev.to_mesh_clear()
    return co, tris, weights


def deforms_over_time(obj) -> bool:
    """What comes before NeuROK may change from frame to frame (so it is sampled every frame)."""
    key = obj.data.shape_keys
    if key is not None and key.animation_data is not None and (key.animation_data.action or len(key.animation_data.drivers)):
        return True
    ad = obj.animation_data
    if ad is not None and any(fc.data_path.startswith("modifiers[") for fc in (channelbag_fcurves(obj) or [])):
        return True
    for mod in modifiers_before(obj):
        if not mod.show_viewport:
            continue
        other = getattr(mod, "object", None)
        if other is not None and (maybe_animated(other) or other.type == 'ARMATURE'):
            return True
        if mod.type in ('WAVE', 'OCEAN', 'DYNAMIC_PAINT', 'CLOTH', 'SOFT_BODY', 'MESH_CACHE', 'MESH_SEQUENCE_CACHE'):
            return True
    return False
