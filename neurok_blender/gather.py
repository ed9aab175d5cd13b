"""Gather: a mesh object and its physics settings -> `Inputs` (a world-space engine `Setup`)."""
from __future__ import annotations

import bpy
import numpy as np

from . import fields
from .animation import find_fcurve, maybe_animated, moves, sample_frames
from .engine_link import NeurokError, formats
from .engine_link import scene as escene
from .inputs import Inputs
from .mesh_data import evaluated_world_arrays, matrix_np, mesh_arrays, topology_hash, transform, vertex_group_weights
from .objects import UserError, check_object
from .scene_settings import engine_choice, frame_range, material_dict, scene_dt, scene_gravity
from .stack import InputStack, deforms_over_time, evaluated_input, needs_evaluation


AXES = {'POS_X': (0, 1.0), 'POS_Y': (1, 1.0), 'POS_Z': (2, 1.0), 'NEG_X': (0, -1.0), 'NEG_Y': (1, -1.0), 'NEG_Z': (2, -1.0)}


def item_label(item, i):
    return item.name or f"#{i + 1}"


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
            raise UserError(f"Force '{item_label(f, i)}' has no vertex group; pick where it acts.")
        if f.direction_mode == 'OBJECT' and f.direction_object is None:
            raise UserError(f"Force '{item_label(f, i)}' takes its direction from an object, but none is set.")
    group_names = [settings.pin_group] + [f.vertex_group for _, f in forces]
    for name in group_names:
        if name and obj.vertex_groups.get(name) is None:
            raise UserError(f"'{obj.name}' has no vertex group named '{name}'.")

    # what NeuROK simulates: the stack before its place, at every frame when it moves
    evaluated = needs_evaluation(obj)
    moving = moves(obj)
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
    moving_colliders = [ob for ob in col_obs if maybe_animated(ob) or (ob.neurok.bake.kind != 'NONE')]
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
            collider_frames[c.name].append(evaluated_world_arrays(context, bpy.data.objects[c.name]))
        if t == 0:
            for c in col_obs:
                if c.name not in collider_frames:
                    first.setdefault("colliders", {})[c.name] = evaluated_world_arrays(context, bpy.data.objects[c.name])

    with InputStack(obj):
        sampled = sample_frames(context, start, frames, sampled_names, take,
                                always=per_frame or bool(moving_colliders))
    co, tris = first["co"], first["tris"]
    if len(co) == 0 or len(tris) == 0:
        raise UserError(f"What comes before NeuROK in the modifier stack of '{obj.name}' has no faces to simulate.")
    if first["weights"] is None:
        weights = vertex_group_weights(obj, group_names)
    else:
        weights = first["weights"]
    if not per_frame and not moving_colliders and not any(maybe_animated(bpy.data.objects[n]) for n in sampled_names
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
        label = item_label(f, i)
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
