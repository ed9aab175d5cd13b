"""Gather: a mesh object and its physics settings -> `Inputs` (a world-space engine `Setup`, arrays only).

One module per concept, each with its `gather_*` function (glTF-Blender-IO's layout):

    body.py       the simulated mesh (what comes before NeuROK in the stack), sampled over the frames
    pins.py       Pin Group, Pin Strength and Pin Target -> pin weights and per-frame pin targets
    forces.py     painted forces (vertex group, direction, profile) -> force terms
    effectors.py  force-field objects -> engine `Effector`s (the engines evaluate them, every step)
    colliders.py  objects with Collision physics -> engine `Collider`s

The parts meet in one engine function, `engine.core.scene.setup_from_arrays`. The scene JSON is
made only for export (`export.py`).
"""
from __future__ import annotations

from ..engine_link import NeurokError, formats
from ..engine_link import scene as escene
from ..inputs import Inputs
from ..mesh_data import topology_hash
from ..objects import UserError, check_object
from ..scene_settings import choose_engine, frame_range, material_dict, scene_dt, scene_gravity
from .body import sample_body
from .colliders import collider_objects, gather_colliders
from .effectors import field_objects, gather_effectors, gather_field_params
from .forces import check_forces, enabled_forces, gather_forces
from .pins import gather_pins

__all__ = ["collider_objects", "field_objects", "gather"]


def gather(context, obj, check_engine: bool = True) -> Inputs:
    """Turn `obj` and its settings into a world-space engine setup (raises UserError).

    The simulated mesh is what comes before NeuROK's place in the modifier stack (with the shape-key mix),
    taken at the first simulated frame; when the object, its deforming modifiers or its shape keys are
    animated they are sampled every frame: pinned vertices follow them, and the result is stored in the
    object's space of each frame.
    """
    check_object(obj)
    scene, settings = context.scene, obj.neurok
    start, end = frame_range(scene)
    frames = end - start + 1
    if frames < 2:
        raise UserError(f"The frame range {start}-{end} needs at least two frames.")
    engine_name, model = choose_engine(context) if check_engine else ("reference", None)
    dt = scene_dt(scene)
    warnings, notes = [], []

    forces = enabled_forces(settings)
    check_forces(forces)
    groups = [settings.pin_group] + [f.vertex_group for _, f in forces]
    for name in groups:
        if name and obj.vertex_groups.get(name) is None:
            raise UserError(f"'{obj.name}' has no vertex group named '{name}'.")
    field_params = gather_field_params(context, obj, warnings)
    col_obs = collider_objects(context, obj)
    followed = [p["name"] for p in field_params] + [ob.name for ob in col_obs]
    if settings.pin_group and settings.pin_target is not None:
        followed.append(settings.pin_target.name)
    followed += [f.direction_object.name for _, f in forces if f.direction_mode == 'OBJECT']

    body = sample_body(context, obj, start, frames, groups, followed, col_obs)
    pin_weight, pin_targets = gather_pins(settings, body, frames, warnings, notes)
    force_terms, table = gather_forces(obj, forces, body, start, frames, dt, notes)
    effectors = gather_effectors(field_params, body.sampled, float(settings.field_influence))
    if effectors:
        notes.append("force fields are written as static forces taken at the first frame")
    material = material_dict(settings)
    colliders = gather_colliders(col_obs, body, material["kind"], warnings)
    mesh = formats.Mesh(body.rest, body.tris, name=obj.name)
    try:
        setup = escene.setup_from_arrays(
            mesh, frames=frames, dt=dt, gravity=[g * float(settings.field_weights.gravity) for g in scene_gravity(scene)],
            material=material, pin_weight=pin_weight, pin_targets=pin_targets, force_terms=force_terms,
            accel_table=table, floor_z=float(scene.neurok.floor_height) if scene.neurok.use_floor else None,
            floor_friction=float(scene.neurok.floor_friction),
            velocity=[float(x) for x in settings.initial_velocity], colliders=colliders, effectors=effectors,
            detail=settings.detail.lower(), self_collision=_self_collision(settings, material),
            self_friction=float(settings.self_friction),
            meta={"source": "blender", "object": obj.name, "frame_start": start}, where=f"'{obj.name}'")
    except NeurokError as e:
        raise UserError(str(e).rstrip(".") + ".") from None
    warnings += [f"'{obj.name}': {note}." for note in setup.meta.get("notes", [])]
    return Inputs(obj_name=obj.name, setup=setup, mesh=mesh, material=material,
                  pin_strength=float(settings.pin_strength), matrix=body.matrix, inverse=body.inverse,
                  frame_start=start, frames=frames, vertex_count=len(body.rest), topology=topology_hash(obj.data),
                  engine=engine_name, model=model, warnings=warnings, export_notes=notes,
                  obj_uid=getattr(obj, "session_uid", None), data_vertices=len(obj.data.vertices),
                  evaluated=body.evaluated)


def _self_collision(settings, material: dict) -> float | None:
    """A cloth's self-collision distance in metres, or None (off, or a solid: its lattice has its own)."""
    return float(settings.self_distance) if material["kind"] == "cloth" and settings.self_collision else None
