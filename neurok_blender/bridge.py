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
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import bpy
import numpy as np

from . import fields
from .engine_link import NeurokError, formats, learned_engine_status
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
    me = obj.data
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
    preset = settings.preset
    kind = escene.MATERIAL_PRESETS.get(preset, {}).get("kind", "solid")
    return {"preset": preset, "kind": kind, "stiffness": settings.stiffness, "density": settings.density,
            "poisson": settings.poisson, "damping": settings.damping, "air_damping": settings.air_damping,
            "bending": settings.bending}


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


def sample_objects(context, names, start: int, frames: int) -> dict[str, dict]:
    """World matrix [T,4,4] and field strength [T] of the named objects for each simulated frame.

    Animated objects (action, drivers, parent or constraints) are sampled with scene.frame_set over
    the range; the current frame is restored afterwards.
    """
    scene = context.scene
    objs = [bpy.data.objects[n] for n in names if n in bpy.data.objects]
    out = {ob.name: {"matrix": np.empty((frames, 4, 4)), "strength": np.zeros(frames)} for ob in objs}
    if not objs:
        return out
    animated = any(_maybe_animated(ob) for ob in objs)
    if not animated:
        for ob in objs:
            out[ob.name]["matrix"][:] = matrix_np(ob.matrix_world)
            out[ob.name]["strength"][:] = ob.field.strength if ob.field else 0.0
        return out
    current, sub = scene.frame_current, scene.frame_subframe
    try:
        for t in range(frames):
            scene.frame_set(start + t)
            for ob in objs:
                ob = bpy.data.objects[ob.name]
                out[ob.name]["matrix"][t] = matrix_np(ob.matrix_world)
                out[ob.name]["strength"][t] = ob.field.strength if ob.field else 0.0
    finally:
        scene.frame_set(current, subframe=sub)
    return out


# --------------------------------------------------------------------------- gathering inputs

@dataclass
class Inputs:
    """Everything a run needs, as plain data (a worker thread may use all of it)."""
    obj_name: str
    setup: object  # engine.core.scene.Setup, world space
    mesh: object  # engine.core.formats.Mesh, world space
    scene: dict  # neurok.scene/1 with weights resolved (world space)
    matrix: np.ndarray  # object -> world at gather time
    inverse: np.ndarray
    frame_start: int
    frames: int
    vertex_count: int
    topology: str
    engine: str
    model: str | None
    warnings: list = field(default_factory=list)
    export_notes: list = field(default_factory=list)

    def to_local(self, positions: np.ndarray) -> np.ndarray:
        return transform(np.asarray(positions, np.float64), self.inverse).astype(np.float32)


AXES = {'POS_X': (0, 1.0), 'POS_Y': (1, 1.0), 'POS_Z': (2, 1.0), 'NEG_X': (0, -1.0), 'NEG_Y': (1, -1.0), 'NEG_Z': (2, -1.0)}


def field_objects(context, obj) -> list:
    """Scene objects carrying a force field that could act on `obj` (enabled in the viewport)."""
    layer_objects = context.view_layer.objects
    out = []
    for ob in context.scene.objects:
        if ob == obj or ob.field is None or ob.field.type == 'NONE' or ob.hide_viewport:
            continue
        if ob.name not in layer_objects:
            continue
        out.append(ob)
    return out


def engine_choice(context) -> tuple[str, str | None]:
    s = context.scene.neurok
    if s.engine == 'REFERENCE':
        return "reference", None
    model = bpy.path.abspath(s.model_path) if s.model_path else ""
    problem = learned_engine_status(model)
    if problem:
        raise UserError(problem)
    return "neurok", (model or None)


def _label(item, i):
    return item.name or f"#{i + 1}"


def gather(context, obj, check_engine: bool = True) -> Inputs:
    """Turn `obj` and its settings into a world-space engine setup (raises UserError)."""
    check_object(obj)
    scene = context.scene
    settings = obj.neurok
    start, end = frame_range(scene)
    frames = end - start + 1
    if frames < 2:
        raise UserError(f"The frame range {start}-{end} needs at least two frames.")
    engine_name, model = engine_choice(context) if check_engine else ("reference", None)
    dt = scene_dt(scene)
    co, tris = mesh_arrays(obj)
    matrix = matrix_np(obj.matrix_world)
    if abs(np.linalg.det(matrix[:3, :3])) < 1e-12:
        raise UserError(f"'{obj.name}' has zero scale on some axis; fix its transform first.")
    inverse = np.linalg.inv(matrix)
    rest = transform(co, matrix)
    n = len(rest)
    warnings, notes = [], []

    forces = [(i, f) for i, f in enumerate(settings.forces) if f.enabled]
    for i, f in forces:
        if not f.vertex_group:
            raise UserError(f"Force '{_label(f, i)}' has no vertex group; pick where it acts.")
        if f.direction_mode == 'OBJECT' and f.direction_object is None:
            raise UserError(f"Force '{_label(f, i)}' takes its direction from an object, but none is set.")
    weights = vertex_group_weights(obj, [settings.pin_group] + [f.vertex_group for _, f in forces])

    field_obs = field_objects(context, obj) if settings.use_force_fields else []
    field_params = []
    for ob in field_obs:
        params, problems = fields.describe(ob)
        warnings.extend(problems)
        if params is not None:
            field_params.append(params)
    sampled_names = [p["name"] for p in field_params]
    if settings.pin_group and settings.pin_target is not None:
        sampled_names.append(settings.pin_target.name)
    sampled_names += [f.direction_object.name for _, f in forces if f.direction_mode == 'OBJECT']
    sampled = sample_objects(context, list(dict.fromkeys(sampled_names)), start, frames)

    # pins
    pins = []
    if settings.pin_group:
        w = weights[settings.pin_group]
        if not w.any():
            raise UserError(f"Pin group '{settings.pin_group}' has no weighted vertices.")
        pin = {"select": {"weights": w.tolist()}, "strength": float(settings.pin_strength)}
        if settings.pin_target is not None:
            loc = sampled[settings.pin_target.name]["matrix"][:, :3, 3]
            offsets = loc - loc[0]
            if np.abs(offsets).max() > 0.0:
                pin["target_offset"] = [[t, offsets[t].tolist()] for t in range(frames)]
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
            per_frame = dirs
        else:
            if f.profile == 'IMPULSE':
                profile = {"type": "impulse", "start": lo, "end": lo + f.duration}
            elif f.profile == 'SINE':
                profile = {"type": "sine", "start": lo, "end": f.frame_end - start, "frequency": float(f.frequency)}
            else:
                profile = {"type": "constant", "start": lo, "end": f.frame_end - start}
            accel0 = f.strength * dirs[0]
            per_frame = f.strength * dirs
        mult = np.array([escene.profile_value(profile, t, dt) for t in range(frames)])
        table += mult[:, None, None] * w[None, :, None] * per_frame[:, None, :]
        scene_forces.append({"select": {"weights": w.tolist()}, "accel": [float(x) for x in accel0], "profile": profile})

    # force fields (evaluated at rest positions, per frame)
    influence = float(settings.field_influence)
    for p in field_params:
        smp = sampled[p["name"]]
        for t in range(frames):
            table[t] += influence * fields.field_accel(rest, smp["matrix"][t], p, smp["strength"][t])
        static = fields.field_accel(rest, smp["matrix"][0], p, smp["strength"][0]) * influence
        for axis in range(3):
            for sign in (1.0, -1.0):
                wax = np.maximum(sign * static[:, axis], 0.0)
                if wax.max() > 0.0:
                    vec = [0.0, 0.0, 0.0]
                    vec[axis] = sign
                    scene_forces.append({"select": {"weights": wax.tolist()}, "accel": vec,
                                         "profile": {"type": "constant"}})
        varies = np.abs(smp["matrix"] - smp["matrix"][0]).max() > 1e-9 or np.ptp(smp["strength"]) > 0
        notes.append(f"field '{p['name']}' is written as static forces taken at the first frame"
                     + (" (it is animated, so the export is approximate)" if varies else ""))

    floor = {"z": float(scene.neurok.floor_height)} if scene.neurok.use_floor else None
    scene_dict = {
        "format": formats.SCENE_FORMAT, "frames": frames, "dt": dt, "gravity": scene_gravity(scene),
        "material": material_dict(settings), "pins": pins, "forces": scene_forces, "floor": floor,
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
    setup.meta = dict(setup.meta, object=obj.name, frame_start=start)
    return Inputs(obj_name=obj.name, setup=setup, mesh=mesh, scene=scene_dict, matrix=matrix, inverse=inverse,
                  frame_start=start, frames=frames, vertex_count=n, topology=topology_hash(obj.data),
                  engine=engine_name, model=model, warnings=warnings, export_notes=notes)


# --------------------------------------------------------------------------- cache files

def temp_cache_dir() -> Path:
    d = Path(tempfile.gettempdir()) / "neurok_cache"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cache_file_for(obj) -> tuple[str, str]:
    """(absolute path, path to store) of the PC2 cache for `obj`: next to the .blend, or in the temp folder."""
    name = bpy.path.clean_name(obj.name)
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


def _new_cache_modifier(obj, name: str, index: int):
    existing = obj.modifiers.get(name)
    if existing is not None and existing.type != 'MESH_CACHE':
        raise UserError(f"'{obj.name}' has a modifier called '{name}' that NeuROK did not make; rename it first.")
    mod = existing or obj.modifiers.new(name, 'MESH_CACHE')
    current = list(obj.modifiers).index(mod)
    if current != index:
        obj.modifiers.move(current, index)
    return obj.modifiers[name]


def write_cache(obj, local: np.ndarray, frame_start: int) -> str:
    """Write the PC2 next to the .blend and point the "NeuROK Cache" modifier (first in the stack) at it."""
    path, stored = cache_file_for(obj)
    formats.write_pc2(path, local, start_frame=frame_start, sample_rate=1.0)
    old = obj.neurok.bake.cache_path
    if old:
        old_abs = bpy.path.abspath(old)
        if os.path.normcase(os.path.abspath(old_abs)) != os.path.normcase(os.path.abspath(path)) and os.path.isfile(old_abs):
            os.unlink(old_abs)
    mod = _new_cache_modifier(obj, CACHE_MODIFIER, 0)
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


def remove_cache(obj, delete_file: bool = True) -> bool:
    mod = own_modifier(obj, CACHE_MODIFIER)
    changed = False
    path = obj.neurok.bake.cache_path or (mod.filepath if mod else "")
    if mod is not None:
        obj.modifiers.remove(mod)
        changed = True
    if delete_file and path:
        abs_path = bpy.path.abspath(path)
        if os.path.isfile(abs_path) and abs_path.endswith(".neurok.pc2"):
            os.unlink(abs_path)
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
    b.vertex_count = inputs.vertex_count
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
        name = bpy.path.clean_name(obj_name)
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
    index = 0 if cache is None else list(obj.modifiers).index(cache) + 1
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
