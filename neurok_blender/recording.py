"""A simulation Blender already made, read as an engine sequence: what "Learn Material from Bake"
learns from. The source is the first Cloth, Soft Body or Mesh Cache modifier of the object; its
motion is read frame by frame from the evaluated mesh (world space, so gravity points where the
scene says), on the main thread. Blender's cloth numbers are converted to SI units
(`engine.training.importers`: its solver measures time in frames and scales gravity by 0.001);
for a soft body or a Mesh Cache the object's own NeuROK material and pin group are the starting
guess, refined by what is learned.
"""
from __future__ import annotations

import numpy as np

from . import mesh_data, scene_settings
from .engine_link import api
from .objects import UserError

SOURCES = ('CLOTH', 'SOFT_BODY', 'MESH_CACHE')
STILL = 1e-5     # a recording that moves less than this share of its size teaches nothing


def source_modifier(obj):
    """The modifier whose motion is learned from, or a one-line UserError."""
    for mod in obj.modifiers:
        if mod.type in SOURCES and mod.show_viewport:
            return mod
    raise UserError(f"'{obj.name}' has no simulation to learn from: give it a Cloth or Soft Body simulation "
                    "(baked or not), or a Mesh Cache modifier.")


def frame_range(context, mod) -> tuple[int, int]:
    if mod.type in ('CLOTH', 'SOFT_BODY'):
        cache = mod.point_cache
        return int(cache.frame_start), int(cache.frame_end)
    return scene_settings.frame_range(context.scene)


def read_frames(context, obj, start: int, end: int) -> np.ndarray:
    """World-space evaluated vertex positions [T,N,3] for frames start..end; the scene's current
    frame is restored afterwards."""
    scene = context.scene
    n = len(obj.data.vertices)
    keep = scene.frame_current
    frames = []
    try:
        for f in range(start, end + 1):
            scene.frame_set(f)
            ev = obj.evaluated_get(context.evaluated_depsgraph_get())
            me = ev.data
            if len(me.vertices) != n:
                raise UserError(f"'{obj.name}' has {len(me.vertices)} vertices at frame {f} but {n} at rest; "
                                "a material can only be learned from motion that keeps the mesh's vertices.")
            co = np.empty(n * 3, dtype=np.float32)
            me.vertices.foreach_get("co", co)
            frames.append(mesh_data.transform(co.reshape(n, 3).astype(np.float64), mesh_data.matrix_np(ev.matrix_world)))
    finally:
        scene.frame_set(keep)
    return np.stack(frames)


def _group_weights(obj, name: str) -> np.ndarray | None:
    if not name or obj.vertex_groups.get(name) is None:
        return None
    return mesh_data.vertex_group_weights(obj, [name])[name]


def _edge_and_area(obj, rest: np.ndarray, tris: np.ndarray) -> tuple[float, float]:
    """Mean length of the mesh's own edges (Blender's structural springs: a quad's diagonal is a
    shear spring, not one of them) and the area per vertex, in world space."""
    edges = np.empty(len(obj.data.edges) * 2, dtype=np.int32)
    obj.data.edges.foreach_get("vertices", edges)
    edges = edges.reshape(-1, 2)
    edge = float(np.linalg.norm(rest[edges[:, 0]] - rest[edges[:, 1]], axis=1).mean())
    area = 0.5 * float(np.linalg.norm(np.cross(rest[tris[:, 1]] - rest[tris[:, 0]],
                                               rest[tris[:, 2]] - rest[tris[:, 0]]), axis=1).sum())
    return edge, area / len(rest)


def physics(context, obj, mod, rest, tris) -> dict:
    """Material, gravity, pins and vertex mass of the recording, in SI units."""
    scene = context.scene
    fps = float(scene.render.fps) / float(scene.render.fps_base)
    if mod.type == 'CLOTH':
        s = mod.settings
        edge, area = _edge_and_area(obj, rest, tris)
        settings = {k: getattr(s, k) for k in ("mass", "air_damping", "tension_stiffness", "bending_stiffness",
                                              "tension_damping")}
        return {"material": api.blender_cloth_material(settings, fps, edge, area),
                "gravity": api.blender_cloth_gravity(list(scene.gravity), fps, s.effector_weights.gravity,
                                                     scene.use_gravity),
                "pins": _group_weights(obj, s.vertex_group_mass), "vertex_mass": float(s.mass),
                "blender": {"source": "cloth", "fps": fps, "settings": settings}}
    material = scene_settings.material_dict(obj.neurok)
    material.pop("preset", None)
    if mod.type == 'SOFT_BODY':
        s = mod.settings
        pins = _group_weights(obj, s.vertex_group_goal) if s.use_goal else None
    else:
        pins = _group_weights(obj, obj.neurok.pin_group)
    return {"material": material, "gravity": scene_settings.scene_gravity(scene), "pins": pins, "vertex_mass": None,
            "blender": {"source": mod.type.lower(), "fps": fps}}


def read_recording(context, obj):
    """The object's recorded motion as an engine `Sequence` (one sentence of UserError for bad input)."""
    if obj is None or obj.type != 'MESH':
        raise UserError("Select a mesh object with a simulation or a Mesh Cache to learn a material from.")
    mod = source_modifier(obj)
    start, end = frame_range(context, mod)
    if end - start + 1 < api.MIN_BAKE_FRAMES:
        raise UserError(f"'{obj.name}' has only {end - start + 1} frames of '{mod.name}'; "
                        f"a material needs at least {api.MIN_BAKE_FRAMES}.")
    rest_local, tris = mesh_data.mesh_arrays(obj)
    if len(tris) == 0:
        raise UserError(f"'{obj.name}' has no faces to learn a material on.")
    positions = read_frames(context, obj, start, end)
    rest = mesh_data.transform(rest_local, mesh_data.matrix_np(obj.matrix_world))
    size = float(np.linalg.norm(np.ptp(rest, axis=0))) or 1.0
    if float(np.abs(positions - positions[:1]).max()) < STILL * size:
        raise UserError(f"'{obj.name}' does not move in frames {start}–{end} of '{mod.name}'; "
                        "there is nothing to learn from (bake or play the simulation first).")
    info = physics(context, obj, mod, rest, tris)
    dt = 1.0 / info["blender"]["fps"]
    try:
        return api.sequence_from_point_cache(
            rest, tris, positions, dt, info["gravity"], info["material"], pin_weight=info["pins"],
            vertex_mass=info["vertex_mass"], meta={"split": "train", "source": f"Blender {mod.type.lower()} of '{obj.name}'",
                                                  "blender": info["blender"]}, where=f"'{obj.name}'")
    except api.NeurokError as e:
        raise UserError(" ".join(str(e).split())) from None
