"""Glue between Blender data and the engine.

In:  a mesh object and its settings -> `Inputs` (a world-space `Setup` plus numpy arrays only), so
     a worker thread never touches bpy.
Out: engine frames (world space) -> object space -> a PC2 file played by a Mesh Cache modifier,
     or shape keys keyed over the timeline.

Everything NeuROK writes has a fixed name, so a re-bake or a free touches only its own things:
the modifiers "NeuROK Cache" and "NeuROK Preview", shape keys "NeuROK 0000".."NeuROK 9999"
(and "Basis" when NeuROK created it), their F-curves, and the cache file recorded on the object.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import bpy
import numpy as np

from . import fields
from .engine_link import ENGINE_PROBLEM, NeurokError, formats, learned_engine_status
from .engine_link import scene as escene

CACHE_MODIFIER = "NeuROK Cache"
PREVIEW_MODIFIER = "NeuROK Preview"
FRAME_KEY_FORMAT = "NeuROK {:04d}"
FRAME_KEY_RE = re.compile(r"^NeuROK \d{4,}$")
FRAME_KEY_PATH_RE = re.compile(r'^key_blocks\["NeuROK \d{4,}"\]\.value$')
POSE_KEY = "NeuROK Pose"
LONG_SHAPE_KEY_RANGE = 250
PC2_SAMPLES_OFFSET = 28  # byte offset of the sample count in a PC2 header


class UserError(NeurokError):
    """A problem the user can fix; the message is one sentence."""


# --------------------------------------------------------------------------- objects and meshes

def target_object(context, name: str = ""):
    """The object an operator works on: `name` if given, else the active, selected object."""
    if name:
        obj = bpy.data.objects.get(name)
        if obj is None:
            raise UserError(f"There is no object named '{name}'.")
    else:
        obj = getattr(context, "active_object", None)
        if obj is None or not obj.select_get():
            raise UserError("Select a mesh object first.")
    check_object(obj)
    return obj


def check_object(obj) -> None:
    if obj.type != 'MESH':
        raise UserError(f"'{obj.name}' is not a mesh; NeuROK simulates mesh objects only.")
    if obj.library is not None or obj.data.library is not None:
        raise UserError(f"'{obj.name}' is linked from another file; make it local first.")
    if obj.mode == 'EDIT':
        raise UserError(f"'{obj.name}' is in Edit Mode; switch to Object Mode first.")
    if len(obj.data.vertices) == 0:
        raise UserError(f"'{obj.name}' has no vertices to simulate.")
    if len(obj.data.polygons) == 0:
        raise UserError(f"'{obj.name}' has no faces; NeuROK needs a surface or a closed volume.")


def mesh_arrays(obj) -> tuple[np.ndarray, np.ndarray]:
    """(vertex positions [N,3] float64 object space, triangles [F,3] int64) of the undeformed mesh."""
    return mesh_data_arrays(obj.data)


def mesh_data_arrays(me) -> tuple[np.ndarray, np.ndarray]:
    """(vertex positions [N,3] float64, triangles [F,3] int64) of a Mesh datablock (an evaluated one too)."""
    co = np.empty(len(me.vertices) * 3, dtype=np.float32)
    me.vertices.foreach_get("co", co)
    me.calc_loop_triangles()
    tris = np.empty(len(me.loop_triangles) * 3, dtype=np.int32)
    me.loop_triangles.foreach_get("vertices", tris)
    return co.reshape(-1, 3).astype(np.float64), tris.reshape(-1, 3).astype(np.int64)


def topology_hash(me) -> str:
    """Vertex count and a CRC of the connectivity: cheap, and changes when vertices/edges/faces change."""
    loops = np.empty(len(me.loops), dtype=np.int32)
    me.loops.foreach_get("vertex_index", loops)
    totals = np.empty(len(me.polygons), dtype=np.int32)
    me.polygons.foreach_get("loop_total", totals)
    edges = np.empty(len(me.edges) * 2, dtype=np.int32)
    me.edges.foreach_get("vertices", edges)
    h = zlib.crc32(loops.tobytes())
    h = zlib.crc32(totals.tobytes(), h)
    h = zlib.crc32(edges.tobytes(), h)
    return f"{len(me.vertices)}:{h:08x}"


def matrix_np(matrix) -> np.ndarray:
    return np.array([list(row) for row in matrix], dtype=np.float64)


def transform(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Apply a 4×4 matrix to points [..., 3]."""
    return points @ matrix[:3, :3].T + matrix[:3, 3]


def vertex_group_weights(obj, names) -> dict[str, np.ndarray]:
    """Weights [N] of the named vertex groups (0 where a vertex is not in the group)."""
    names = [n for n in dict.fromkeys(names) if n]
    if not names:
        return {}
    n = len(obj.data.vertices)
    index = {}
    for name in names:
        vg = obj.vertex_groups.get(name)
        if vg is None:
            raise UserError(f"'{obj.name}' has no vertex group named '{name}'.")
        index[vg.index] = name
    out = {name: np.zeros(n) for name in names}
    for v in obj.data.vertices:
        for g in v.groups:
            name = index.get(g.group)
            if name is not None:
                out[name][v.index] = g.weight
    return out


def frame_range(scene) -> tuple[int, int]:
    s = scene.neurok
    if s.use_scene_range:
        return scene.frame_start, scene.frame_end
    return s.frame_start, s.frame_end


def scene_dt(scene) -> float:
    return float(scene.render.fps_base) / float(scene.render.fps)


def scene_gravity(scene) -> list[float]:
    if not scene.use_gravity:
        return [0.0, 0.0, 0.0]
    return [float(x) for x in scene.gravity]


def material_dict(settings) -> dict:
    """The scene's material: the preset's name when the sliders still match it, explicit values always."""
    cloth = settings.kind == 'CLOTH'
    out = {"kind": "cloth" if cloth else "solid", "stiffness": settings.stiffness,
           "density": settings.areal_density if cloth else settings.density,
           "poisson": settings.poisson, "damping": settings.damping, "air_damping": settings.air_damping,
           "bending": settings.bending}
    if settings.preset in escene.MATERIAL_PRESETS:
        out = {"preset": settings.preset, **out}
    return out


# --------------------------------------------------------------------------- animation sampling

def _maybe_animated(ob) -> bool:
    ad = ob.animation_data
    return bool((ad and (ad.action or len(ad.drivers) or len(ad.nla_tracks))) or ob.parent or len(ob.constraints))


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


def _channelbag_fcurves(id_data):
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


# --------------------------------------------------------------------------- the modifier stack

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


class _InputStack:
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
    stack at the current frame (call inside `_InputStack`)."""
    dg = context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(dg)
    me = ev.to_mesh()
    try:
        co, tris = mesh_data_arrays(me)
        weights = {}
        names = [g for g in dict.fromkeys(groups) if g]
        if names:
            index = {}
            for name in names:
                vg = obj.vertex_groups.get(name)
                if vg is None:
                    raise UserError(f"'{obj.name}' has no vertex group named '{name}'.")
                index[vg.index] = name
            weights = {name: np.zeros(len(me.vertices)) for name in names}
            for v in me.vertices:
                for g in v.groups:
                    name = index.get(g.group)
                    if name is not None:
                        weights[name][v.index] = g.weight
    finally:
        ev.to_mesh_clear()
    return co, tris, weights


def _moving(ob) -> bool:
    """The object's world transform may change over time (animated transform, parent or constraints)."""
    ad = ob.animation_data
    paths = set()
    if ad is not None:
        paths = {fc.data_path for fc in (_channelbag_fcurves(ob) or [])} | {fc.data_path for fc in ad.drivers}
        if len(ad.nla_tracks):
            return True
    transform = ("location", "rotation_euler", "rotation_quaternion", "rotation_axis_angle", "scale",
                 "delta_location", "delta_rotation_euler", "delta_rotation_quaternion", "delta_scale")
    return bool(paths & set(transform)) or ob.parent is not None or len(ob.constraints) > 0


def deforms_over_time(obj) -> bool:
    """What comes before NeuROK may change from frame to frame (so it is sampled every frame)."""
    key = obj.data.shape_keys
    if key is not None and key.animation_data is not None and (key.animation_data.action or len(key.animation_data.drivers)):
        return True
    ad = obj.animation_data
    if ad is not None and any(fc.data_path.startswith("modifiers[") for fc in (_channelbag_fcurves(obj) or [])):
        return True
    for mod in modifiers_before(obj):
        if not mod.show_viewport:
            continue
        other = getattr(mod, "object", None)
        if other is not None and (_maybe_animated(other) or other.type == 'ARMATURE'):
            return True
        if mod.type in ('WAVE', 'OCEAN', 'DYNAMIC_PAINT', 'CLOTH', 'SOFT_BODY', 'MESH_CACHE', 'MESH_SEQUENCE_CACHE'):
            return True
    return False


# --------------------------------------------------------------------------- collision objects and fields

def collider_objects(context, obj) -> list:
    """Mesh objects with Blender's Collision physics enabled (visible in the view layer), other than `obj`."""
    if not getattr(obj.neurok, "use_colliders", True):
        return []
    coll = getattr(obj.neurok, "collision_collection", None)
    pool = coll.all_objects if coll is not None else context.scene.objects
    layer = context.view_layer.objects
    out = []
    for ob in pool:
        if ob == obj or ob.type != 'MESH' or ob.hide_viewport or ob.name not in layer:
            continue
        col = getattr(ob, "collision", None)
        if col is not None and col.use:
            out.append(ob)
    return out


def field_objects(context, obj) -> list:
    """Objects carrying a force field that acts on `obj`: the Effector Collection's when one is set (like
    Cloth ▸ Field Weights ▸ Effector Collection), else the scene's; visible in the view layer."""
    coll = getattr(obj.neurok, "field_collection", None)
    pool = coll.all_objects if coll is not None else context.scene.objects
    layer_objects = context.view_layer.objects
    out = []
    for ob in pool:
        if ob == obj or ob.field is None or ob.field.type == 'NONE' or ob.hide_viewport:
            continue
        if ob.name not in layer_objects:
            continue
        out.append(ob)
    return out


def sample_frames(context, start: int, frames: int, objects=(), callback=None, always: bool = False) -> dict[str, dict]:
    """World matrix [T,4,4] and field strength [T] of the named objects for every simulated frame, and
    `callback(t)` called with the scene at each frame. Frames are visited with scene.frame_set only when
    something moves (or `always`); the current frame is restored afterwards."""
    scene = context.scene
    names = [n for n in dict.fromkeys(objects) if n in bpy.data.objects]
    out = {n: {"matrix": np.empty((frames, 4, 4)), "strength": np.zeros(frames)} for n in names}
    animated = always or any(_maybe_animated(bpy.data.objects[n]) for n in names)
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


# --------------------------------------------------------------------------- gathering inputs

@dataclass
class Inputs:
    """Everything a run needs, as plain data (a worker thread may use all of it)."""
    obj_name: str
    setup: object  # engine.core.scene.Setup, world space
    mesh: object  # engine.core.formats.Mesh, world space
    scene: dict  # neurok.scene/1 with weights resolved (world space)
    matrix: np.ndarray  # object -> world at the first frame
    inverse: np.ndarray  # world -> object: [4,4], or [T,4,4] when the object moves (one per frame)
    frame_start: int
    frames: int
    vertex_count: int  # simulated vertices (what comes before NeuROK in the stack)
    topology: str  # of obj.data
    engine: str
    model: str | None
    warnings: list = field(default_factory=list)
    export_notes: list = field(default_factory=list)
    obj_uid: int | None = None  # session uid: follows the object through renames
    data_vertices: int = 0  # len(obj.data.vertices)
    evaluated: bool = False  # the input came from the modifier stack / shape-key mix, not obj.data alone

    def to_local(self, positions: np.ndarray, frame: int | None = None) -> np.ndarray:
        """World -> object space; `positions` is one frame ([N,3], pass its index) or all frames ([T,N,3])."""
        x = np.asarray(positions, np.float64)
        inv = np.asarray(self.inverse)
        if inv.ndim == 2:
            return transform(x, inv).astype(np.float32)
        if x.ndim == 3:
            return np.stack([transform(x[t], inv[min(t, len(inv) - 1)]) for t in range(len(x))]).astype(np.float32)
        t = 0 if frame is None else min(int(frame), len(inv) - 1)
        return transform(x, inv[t]).astype(np.float32)


AXES = {'POS_X': (0, 1.0), 'POS_Y': (1, 1.0), 'POS_Z': (2, 1.0), 'NEG_X': (0, -1.0), 'NEG_Y': (1, -1.0), 'NEG_Z': (2, -1.0)}


def engine_choice(context) -> tuple[str, str | None]:
    s = context.scene.neurok
    if ENGINE_PROBLEM:  # both engines run inside the engine package, which needs torch and scipy
        raise UserError(ENGINE_PROBLEM)
    if s.engine == 'REFERENCE':
        return "reference", None
    model = bpy.path.abspath(s.model_path) if s.model_path else ""
    problem = learned_engine_status(model)
    if problem:
        raise UserError(problem)
    return "neurok", (model or None)


def _label(item, i):
    return item.name or f"#{i + 1}"


def _collider_arrays(context, ob) -> tuple[np.ndarray, np.ndarray]:
    """World-space evaluated vertices and triangles of a collision object at the current frame."""
    dg = context.evaluated_depsgraph_get()
    ev = ob.evaluated_get(dg)
    me = ev.to_mesh()
    try:
        co, tris = mesh_data_arrays(me)
    finally:
        ev.to_mesh_clear()
    return transform(co, matrix_np(ev.matrix_world)), tris


def gather(context, obj, check_engine: bool = True) -> Inputs:
    """Turn `obj` and its settings into a world-space engine setup (raises UserError).

    The simulated mesh is what comes before NeuROK's place in the modifier stack (with the shape-key mix),
    taken at the first simulated frame; when the object, its deforming modifiers or its shape keys are
    animated they are sampled every frame: pinned vertices follow them, and the result is stored in the
    object's space of each frame.
    """
    check_object(obj)
    scene = context.scene
    settings = obj.neurok
    start, end = frame_range(scene)
    frames = end - start + 1
    if frames < 2:
        raise UserError(f"The frame range {start}-{end} needs at least two frames.")
    engine_name, model = engine_choice(context) if check_engine else ("reference", None)
    dt = scene_dt(scene)
    warnings, notes = [], []

    forces = [(i, f) for i, f in enumerate(settings.forces) if f.enabled]
    for i, f in forces:
        if not f.vertex_group:
            raise UserError(f"Force '{_label(f, i)}' has no vertex group; pick where it acts.")
        if f.direction_mode == 'OBJECT' and f.direction_object is None:
            raise UserError(f"Force '{_label(f, i)}' takes its direction from an object, but none is set.")
    group_names = [settings.pin_group] + [f.vertex_group for _, f in forces]
    for name in group_names:
        if name and obj.vertex_groups.get(name) is None:
            raise UserError(f"'{obj.name}' has no vertex group named '{name}'.")

    # what NeuROK simulates: the stack before its place, at every frame when it moves
    evaluated = needs_evaluation(obj)
    moving = _moving(obj)
    per_frame = moving or (evaluated and deforms_over_time(obj))
    matrices = np.empty((frames, 4, 4))
    world_frames = [] if per_frame else None

    field_params, field_problems = [], []
    field_obs = field_objects(context, obj) if settings.use_force_fields else []
    for ob in field_obs:
        params, problems = fields.describe(ob, settings.field_weights)
        field_problems.extend(problems)
        if params is not None:
            field_params.append(params)
    warnings.extend(field_problems)
    col_obs = collider_objects(context, obj)
    sampled_names = [p["name"] for p in field_params] + [ob.name for ob in col_obs]
    if settings.pin_group and settings.pin_target is not None:
        sampled_names.append(settings.pin_target.name)
    sampled_names += [f.direction_object.name for _, f in forces if f.direction_mode == 'OBJECT']
    moving_colliders = [ob for ob in col_obs if _maybe_animated(ob) or (ob.neurok.bake.kind != 'NONE')]
    collider_frames = {ob.name: [] for ob in moving_colliders}
    first = {}

    def take(t):
        ob = bpy.data.objects[obj.name]
        matrices[t] = matrix_np(ob.matrix_world)
        if t == 0 or per_frame:
            if evaluated:
                co, tris, w = evaluated_input(context, ob, group_names)
            else:
                co, tris = mesh_arrays(ob)
                w = None
            if t == 0:
                first.update(co=co, tris=tris, weights=w)
            if per_frame:
                world_frames.append(transform(co, matrices[t]))
        for c in moving_colliders:
            collider_frames[c.name].append(_collider_arrays(context, bpy.data.objects[c.name]))
        if t == 0:
            for c in col_obs:
                if c.name not in collider_frames:
                    first.setdefault("colliders", {})[c.name] = _collider_arrays(context, bpy.data.objects[c.name])

    with _InputStack(obj):
        sampled = sample_frames(context, start, frames, sampled_names, take,
                                always=per_frame or bool(moving_colliders))
    co, tris = first["co"], first["tris"]
    if len(co) == 0 or len(tris) == 0:
        raise UserError(f"What comes before NeuROK in the modifier stack of '{obj.name}' has no faces to simulate.")
    if first["weights"] is None:
        weights = vertex_group_weights(obj, group_names)
    else:
        weights = first["weights"]
    if not per_frame and not moving_colliders and not any(_maybe_animated(bpy.data.objects[n]) for n in sampled_names
                                                         if n in bpy.data.objects):
        matrices[:] = matrices[0]  # visited once only
    matrix = matrices[0]
    if np.abs(np.linalg.det(matrices[:, :3, :3])).min() < 1e-12:
        raise UserError(f"'{obj.name}' has zero scale on some axis; fix its transform first.")
    inverse = np.linalg.inv(matrices) if moving else np.linalg.inv(matrix)
    rest = transform(co, matrix)
    n = len(rest)
    if per_frame and max(np.abs(w - world_frames[0]).max() for w in world_frames) < 1e-9:
        per_frame = False  # nothing actually moved

    # pins
    pins = []
    pin_targets = None
    if settings.pin_group:
        w = weights[settings.pin_group]
        if not w.any():
            raise UserError(f"Pin group '{settings.pin_group}' has no weighted vertices.")
        pin = {"select": {"weights": w.tolist()}, "strength": float(settings.pin_strength)}
        if settings.pin_target is not None:
            # the target's full transform (rotation and scale too) relative to the first frame, every frame
            pm = sampled[settings.pin_target.name]["matrix"]
            rel = pm @ np.linalg.inv(pm[0])
            if np.abs(rel - np.eye(4)).max() > 1e-12:
                pin_targets = np.stack([transform(rest, rel[t]) for t in range(frames)])
        elif per_frame:
            pin_targets = np.stack(world_frames)  # the pinned region follows the animated object / deformation
        if pin_targets is not None:
            mask = w > 0
            offsets = (pin_targets[:, mask] - rest[mask]).mean(axis=1)
            pin["target_offset"] = [[t, offsets[t].tolist()] for t in range(frames)]
            notes.append("pinned vertices follow a moving target; the export keeps only its mean offset per frame "
                         "(rotation is lost)")
        pins.append(pin)
    elif settings.pin_target is not None:
        warnings.append("Pin Target is set but there is no Pin Group, so it has no effect.")

    # painted forces
    table = None
    need_table = bool(field_params)
    scene_forces = []
    if forces or field_params:
        table = np.zeros((frames, n, 3))
    for i, f in forces:
        label = _label(f, i)
        w = weights[f.vertex_group]
        if not w.any():
            raise UserError(f"Vertex group '{f.vertex_group}' of force '{label}' has no weighted vertices.")
        if f.direction_mode == 'OBJECT':
            col, sign = AXES[f.axis]
            dirs = sign * sampled[f.direction_object.name]["matrix"][:, :3, col]
            if np.abs(dirs - dirs[0]).max() > 1e-9:
                need_table = True
                notes.append(f"force '{label}' points along '{f.direction_object.name}' as it is at the first frame")
        else:
            dirs = np.tile(np.asarray(f.direction, dtype=np.float64), (frames, 1))
        norms = np.linalg.norm(dirs, axis=1)
        if norms.min() < 1e-12:
            raise UserError(f"Force '{label}' has a zero-length direction.")
        dirs = dirs / norms[:, None]
        lo = f.frame_start - start
        if f.profile == 'KEYFRAMED':
            fc = find_fcurve(obj, f"neurok.forces[{i}].strength")
            if fc is None:
                raise UserError(f"Force '{label}' is Keyframed but its Strength has no keyframes; key it (I over the field) first.")
            keys = [[t, float(fc.evaluate(start + t))] for t in range(frames)]
            profile = {"type": "keyframes", "keys": keys}
            accel0 = dirs[0]
            per_frame_dir = dirs
        else:
            if f.profile == 'IMPULSE':
                profile = {"type": "impulse", "start": lo, "end": lo + f.duration}
            elif f.profile == 'SINE':
                profile = {"type": "sine", "start": lo, "end": f.frame_end - start, "frequency": float(f.frequency)}
            else:
                profile = {"type": "constant", "start": lo, "end": f.frame_end - start}
            accel0 = f.strength * dirs[0]
            per_frame_dir = f.strength * dirs
        mult = np.array([escene.profile_value(profile, t, dt) for t in range(frames)])
        table += mult[:, None, None] * w[None, :, None] * per_frame_dir[:, None, :]
        scene_forces.append({"select": {"weights": w.tolist()}, "accel": [float(x) for x in accel0], "profile": profile})

    # force fields: Effectors (per-step evaluation hook) and, for today's engines, a table at the rest surface
    influence = float(settings.field_influence)
    kind = material_dict(settings)["kind"]
    effectors = []
    field_table = np.zeros((frames, n, 3)) if field_params else None
    if field_params:
        from .engine_link import efields
        normals = efields.vertex_normals(rest, tris)
        for p in field_params:
            smp = sampled[p["name"]]
            e = fields.effector(p, smp["matrix"], smp["strength"], influence)
            effectors.append(e)
            for t in range(frames):
                field_table[t] += efields.accel(e, t, rest, None, normals, surface=kind == "cloth")
        table += field_table
        for axis in range(3):
            for sign in (1.0, -1.0):
                wax = np.maximum(sign * field_table[0][:, axis], 0.0)
                if wax.max() > 0.0:
                    vec = [0.0, 0.0, 0.0]
                    vec[axis] = sign
                    scene_forces.append({"select": {"weights": wax.tolist()}, "accel": vec,
                                         "profile": {"type": "constant"}})
        notes.append("force fields are written as static forces taken at the first frame")

    # colliders (Blender's Collision physics), world space, per frame when they move
    scene_colliders = []
    for ob in col_obs:
        c = ob.collision
        entry = {"name": ob.name, "thickness": float(c.thickness_outer), "thickness_inner": float(c.thickness_inner),
                 "friction": float(c.cloth_friction) / 10.0 if kind == "cloth" else float(c.friction_factor),
                 "damping": float(min(max(c.damping, 0.0), 1.0))}
        if ob.name in collider_frames:
            got = collider_frames[ob.name]
            if len({len(v) for v, _ in got}) != 1:
                warnings.append(f"Collision object '{ob.name}' changes its vertex count over time; it is used as at the first frame.")
                got = got[:1]
            entry["faces"] = got[0][1].tolist()
            if max(np.abs(v - got[0][0]).max() for v, _ in got) < 1e-9:
                entry["vertices"] = got[0][0].tolist()
            else:
                entry["positions"] = [v.tolist() for v, _ in got]
        else:
            v, f = first["colliders"][ob.name]
            entry["faces"], entry["vertices"] = f.tolist(), v.tolist()
        if entry["faces"]:
            scene_colliders.append(entry)
        else:
            warnings.append(f"Collision object '{ob.name}' has no faces; it is ignored.")

    gravity = [g * float(settings.field_weights.gravity) for g in scene_gravity(scene)]
    floor = {"z": float(scene.neurok.floor_height)} if scene.neurok.use_floor else None
    scene_dict = {
        "format": formats.SCENE_FORMAT, "frames": frames, "dt": dt, "gravity": gravity,
        "material": material_dict(settings), "pins": pins, "forces": scene_forces, "floor": floor,
        "colliders": scene_colliders,
        "initial": {"velocity": [float(x) for x in settings.initial_velocity]},
        "meta": {"source": "blender", "blender": bpy.app.version_string, "object": obj.name,
                 "space": "world", "frame_start": start, "notes": notes},
    }
    mesh = formats.Mesh(rest, tris, name=obj.name)
    try:
        setup = escene.setup_from_scene(mesh, scene_dict, where=f"'{obj.name}'")
    except NeurokError as e:
        raise UserError(str(e).rstrip(".") + ".") from None
    if need_table and table is not None:
        setup.accel_table = table
    if pin_targets is not None:
        setup.pin_targets = pin_targets
    # hooks for engines that evaluate fields per step on the deformed surface (engine.core.fields):
    setup.effectors = effectors
    setup.field_accel_rest = field_table  # the part of accel_table that came from fields (at rest)
    setup.meta = dict(setup.meta, object=obj.name, frame_start=start)
    return Inputs(obj_name=obj.name, setup=setup, mesh=mesh, scene=scene_dict, matrix=matrix, inverse=inverse,
                  frame_start=start, frames=frames, vertex_count=n, topology=topology_hash(obj.data),
                  engine=engine_name, model=model, warnings=warnings, export_notes=notes,
                  obj_uid=getattr(obj, "session_uid", None), data_vertices=len(obj.data.vertices), evaluated=evaluated)


# --------------------------------------------------------------------------- cache files

def file_stem(name: str) -> str:
    """A file-name-safe stem unique to an object name: "Cube.001" and "Cube_001" clean to the same text, so the
    exact name's CRC is appended (their caches must never share a file)."""
    return f"{bpy.path.clean_name(name)}-{zlib.crc32(name.encode('utf-8')):08x}"


def find_object(name: str, uid: int | None = None):
    """The object called `name`, or, when it was renamed meanwhile, the object with session uid `uid`."""
    obj = bpy.data.objects.get(name)
    if obj is not None and (uid is None or getattr(obj, "session_uid", uid) == uid):
        return obj
    if uid is not None:
        for ob in bpy.data.objects:
            if getattr(ob, "session_uid", None) == uid:
                return ob
    return None


def temp_cache_dir() -> Path:
    d = Path(tempfile.gettempdir()) / "neurok_cache"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cache_file_for(obj) -> tuple[str, str]:
    """(absolute path, path to store) of the PC2 cache for `obj`: next to the .blend, or in the temp folder."""
    name = file_stem(obj.name)
    blend = bpy.data.filepath
    if blend:
        path = os.path.join(os.path.dirname(blend), f"{Path(blend).stem}.{name}.neurok.pc2")
        return path, bpy.path.relpath(path)
    path = str(temp_cache_dir() / f"unsaved_{os.getpid()}_{name}.neurok.pc2")
    return path, path


def in_temp_cache(path: str) -> bool:
    try:
        return Path(path).resolve().parent == temp_cache_dir().resolve()
    except OSError:
        return False


def own_modifier(obj, name: str):
    mod = obj.modifiers.get(name)
    return mod if mod is not None and mod.type == 'MESH_CACHE' else None


def _new_cache_modifier(obj, name: str, index: int | None):
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
        mod = _new_cache_modifier(obj, CACHE_MODIFIER, None)
        mod.cache_format = 'PC2'
        mod.show_viewport = mod.show_render = False
    return mod


def write_cache(obj, local: np.ndarray, frame_start: int) -> str:
    """Write the PC2 next to the .blend and point the "NeuROK Cache" modifier (first in the stack) at it."""
    path, stored = cache_file_for(obj)
    formats.write_pc2(path, local, start_frame=frame_start, sample_rate=1.0)
    old = obj.neurok.bake.cache_path
    if old:
        old_abs = bpy.path.abspath(old)
        if (os.path.normcase(os.path.abspath(old_abs)) != os.path.normcase(os.path.abspath(path))
                and os.path.isfile(old_abs) and not cache_users(old_abs, skip=obj)):
            os.unlink(old_abs)
    mod = _new_cache_modifier(obj, CACHE_MODIFIER, None)
    mod.show_viewport = mod.show_render = True
    mod.cache_format = 'PC2'
    mod.filepath = stored
    mod.frame_start = float(frame_start)
    mod.frame_scale = 1.0
    mod.time_mode = 'FRAME'
    mod.play_mode = 'SCENE'
    mod.deform_mode = 'OVERWRITE'
    mod.interpolation = 'LINEAR'
    mod.forward_axis, mod.up_axis = 'POS_Y', 'POS_Z'
    mod.flip_axis = (False, False, False)
    mod.factor = 1.0
    obj.neurok.bake.cache_path = stored
    return path


def _norm(path: str) -> str:
    return os.path.normcase(os.path.abspath(bpy.path.abspath(path)))


def cache_users(path: str, skip=None) -> list:
    """Objects whose NeuROK cache modifier plays `path` (other than `skip`)."""
    target = _norm(path)
    out = []
    for ob in bpy.data.objects:
        if ob is skip or ob.type != 'MESH' or ob.library is not None:
            continue
        for name in (CACHE_MODIFIER, PREVIEW_MODIFIER):
            mod = own_modifier(ob, name)
            if mod is not None and mod.filepath and _norm(mod.filepath) == target:
                out.append(ob)
    return out


# Freed cache files are parked here (not deleted) so that Undo, which brings the modifier back, can bring
# the file back too (the undo_post handler calls sync_trash). Emptied when another file is loaded.
TRASH: dict[str, str] = {}  # normalized original path -> parked copy
RESTORED: set[str] = set()


def trash_dir() -> Path:
    d = temp_cache_dir() / f"trash_{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def trash_file(path: str) -> None:
    src = _norm(path)
    dst = trash_dir() / f"{len(TRASH)}_{zlib.crc32(src.encode('utf-8')):08x}_{os.path.basename(src)}"
    shutil.move(src, dst)
    TRASH[src] = str(dst)
    RESTORED.discard(src)


def sync_trash() -> list[str]:
    """After Undo/Redo: put back parked cache files that a NeuROK modifier plays again, and park again the
    files restored earlier that no modifier plays any more. Returns the restored paths."""
    wanted = set()
    for ob in bpy.data.objects:
        if ob.type != 'MESH' or ob.library is not None:
            continue
        mod = own_modifier(ob, CACHE_MODIFIER)
        if mod is not None and mod.filepath:
            wanted.add(_norm(mod.filepath))
    restored = []
    for path in wanted:
        parked = TRASH.get(path)
        if parked and not os.path.isfile(path) and os.path.isfile(parked):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            shutil.move(parked, path)
            del TRASH[path]
            RESTORED.add(path)
            restored.append(path)
    for path in list(RESTORED):
        if path not in wanted and os.path.isfile(path):
            trash_file(path)
    return restored


def empty_trash() -> None:
    for parked in TRASH.values():
        try:
            os.unlink(parked)
        except OSError:
            pass
    TRASH.clear()
    RESTORED.clear()


def remove_cache(obj, delete_file: bool = True) -> bool:
    """Remove "NeuROK Cache"; its file is parked in the trash (Undo brings both back), unless another object
    still plays the same file."""
    mod = own_modifier(obj, CACHE_MODIFIER)
    changed = False
    path = obj.neurok.bake.cache_path or (mod.filepath if mod else "")
    if mod is not None and obj.neurok.enabled:  # NeuROK physics keeps its place in the stack, switched off
        if mod.filepath or mod.show_viewport:
            changed = True
        mod.filepath = ""
        mod.show_viewport = mod.show_render = False
    elif mod is not None:
        obj.modifiers.remove(mod)
        changed = True
    if delete_file and path:
        abs_path = bpy.path.abspath(path)
        if os.path.isfile(abs_path) and abs_path.endswith(".neurok.pc2") and not cache_users(abs_path, skip=obj):
            trash_file(abs_path)
            changed = True
    obj.neurok.bake.cache_path = ""
    return changed


# --------------------------------------------------------------------------- shape keys

def own_frame_keys(obj) -> list:
    key = obj.data.shape_keys
    return [] if key is None else [kb for kb in key.key_blocks if FRAME_KEY_RE.match(kb.name)]


def _remove_own_curves(key, remove_eval_time: bool) -> None:
    fcurves = _channelbag_fcurves(key)
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
            fcurves = _channelbag_fcurves(key)
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


# --------------------------------------------------------------------------- bake records

def record_bake(obj, kind: str, inputs: Inputs, seconds: float, ood: dict | None) -> None:
    b = obj.neurok.bake
    b.kind = kind
    b.frame_start = inputs.frame_start
    b.frames = inputs.frames
    b.vertex_count = inputs.data_vertices
    b.topology = inputs.topology
    b.engine = inputs.engine
    b.seconds = seconds
    record_ood(obj, ood)


def record_ood(obj, ood: dict | None) -> None:
    b = obj.neurok.bake
    if ood:
        b.ood_score = float(ood.get("score", -1.0))
        b.ood_level = str(ood.get("level", ""))
        b.ood_message = str(ood.get("message", ""))
    else:
        b.ood_score, b.ood_level, b.ood_message = -1.0, "", ""


def clear_record(obj) -> None:
    b = obj.neurok.bake
    b.kind = 'NONE'
    b.frames = 0
    b.vertex_count = 0
    b.topology = ""
    b.engine = ""


def bake_problem(obj) -> str | None:
    """One sentence when the recorded bake no longer fits the mesh (topology changed, file missing)."""
    if obj is None or obj.type != 'MESH':
        return None
    b = obj.neurok.bake
    if b.kind == 'NONE':
        return None
    me = obj.data
    if len(me.vertices) != b.vertex_count or topology_hash(me) != b.topology:
        return (f"'{obj.name}' changed its topology since the bake ({b.vertex_count} → {len(me.vertices)} vertices); "
                "bake again or free the bake.")
    if b.kind == 'CACHE' and b.cache_path and not os.path.isfile(bpy.path.abspath(b.cache_path)):
        return f"The cache file of '{obj.name}' is missing ({b.cache_path}); bake again."
    return None


def free_all(obj, delete_file: bool = True) -> bool:
    changed = remove_preview(obj)
    changed |= remove_cache(obj, delete_file=delete_file)
    changed |= remove_shape_keys(obj)
    clear_record(obj)
    record_ood(obj, None)
    return changed


# --------------------------------------------------------------------------- preview (incremental PC2)

class PreviewCache:
    """A PC2 file that grows frame by frame while the Mesh Cache modifier "NeuROK Preview" plays it."""

    def __init__(self, obj_name: str, points: int, frame_start: int):
        name = file_stem(obj_name)
        self.path = str(temp_cache_dir() / f"preview_{os.getpid()}_{name}.neurok.pc2")
        self.points = points
        self.frame_start = frame_start
        self.samples = 0
        self.reset()

    def reset(self) -> None:
        import struct
        header = struct.pack("<12siiffi", formats.PC2_MAGIC, 1, self.points, float(self.frame_start), 1.0, 0)
        with open(self.path, "wb") as f:
            f.write(header)
        self.samples = 0

    def append(self, frames: list) -> None:
        import struct
        if not frames:
            return
        data = b"".join(np.ascontiguousarray(x, dtype="<f4").tobytes() for x in frames)
        with open(self.path, "r+b") as f:
            f.seek(0, os.SEEK_END)
            f.write(data)
            f.seek(PC2_SAMPLES_OFFSET)
            f.write(struct.pack("<i", self.samples + len(frames)))
        self.samples += len(frames)

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass


def show_preview(obj, path: str, frame_start: int, newest: int | None) -> None:
    """Point "NeuROK Preview" at `path`: following the newest frame while running (newest=int), or playing
    with the timeline once finished (newest=None)."""
    cache = own_modifier(obj, CACHE_MODIFIER)
    index = None if cache is None else list(obj.modifiers).index(cache) + 1
    mod = _new_cache_modifier(obj, PREVIEW_MODIFIER, index)
    if mod.filepath != path:
        mod.filepath = path
    mod.cache_format = 'PC2'
    mod.time_mode = 'FRAME'
    mod.deform_mode = 'OVERWRITE'
    mod.frame_start = float(frame_start)
    if newest is None:
        mod.play_mode = 'SCENE'
    else:
        mod.play_mode = 'CUSTOM'
        mod.eval_frame = float(newest)
    obj.update_tag()


def remove_preview(obj) -> bool:
    mod = own_modifier(obj, PREVIEW_MODIFIER)
    if mod is None:
        return False
    path = bpy.path.abspath(mod.filepath)
    obj.modifiers.remove(mod)
    if path and in_temp_cache(path) and os.path.isfile(path):
        try:
            os.unlink(path)
        except OSError:
            pass
    return True


# --------------------------------------------------------------------------- exports

def export_scene(inputs: Inputs, json_path: str) -> tuple[str, str]:
    """Write the scene JSON (weights resolved, world space) and the world-space mesh OBJ next to it."""
    json_path = os.path.abspath(json_path)
    if not json_path.lower().endswith(".json"):
        json_path += ".json"
    obj_path = os.path.splitext(json_path)[0] + ".obj"
    scene = dict(inputs.scene)
    scene["meta"] = dict(scene.get("meta", {}), mesh=os.path.basename(obj_path))
    formats.write_obj(obj_path, inputs.mesh)
    escene.write_scene(json_path, scene)
    return json_path, obj_path
