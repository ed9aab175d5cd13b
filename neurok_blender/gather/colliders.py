"""Collision objects: meshes with Blender's Collision physics -> engine `Collider`s (world space, per
frame when they move), with Thickness Outer/Inner, Friction and Damping read as Blender's cloth does."""
from __future__ import annotations

import numpy as np

from ..animation import maybe_animated
from ..engine_link import ecolliders


def collider_objects(context, obj) -> list:
    """Mesh objects with Blender's Collision physics enabled (visible in the view layer), other than `obj`."""
    if not obj.neurok.use_colliders:
        return []
    coll = obj.neurok.collision_collection
    pool = coll.all_objects if coll is not None else context.scene.objects
    layer = context.view_layer.objects
    out = []
    for ob in pool:
        if ob == obj or ob.type != 'MESH' or ob.hide_viewport or ob.name not in layer:
            continue
        col = getattr(ob, "collision", None)  # None on objects without physics settings
        if col is not None and col.use:
            out.append(ob)
    return out


def moving_colliders(col_obs) -> list:
    """The collision objects that may move or deform: sampled every frame."""
    return [ob for ob in col_obs if maybe_animated(ob) or (ob.neurok.bake.kind != 'NONE')]


def gather_colliders(col_obs, body, kind: str, warnings: list) -> list:
    out = []
    for ob in col_obs:
        faces, positions = _collider_geometry(ob, body, warnings)
        if len(faces) == 0:
            warnings.append(f"Collision object '{ob.name}' has no faces; it is ignored.")
            continue
        c = ob.collision
        out.append(ecolliders.Collider(
            name=ob.name, faces=faces, positions=positions, thickness_outer=float(c.thickness_outer),
            thickness_inner=float(c.thickness_inner),
            friction=float(c.cloth_friction) / 10.0 if kind == "cloth" else float(c.friction_factor),
            damping=float(min(max(c.damping, 0.0), 1.0))))
    return out


def _collider_geometry(ob, body, warnings: list):
    """(triangles [F,3], world positions [T,V,3]; T == 1 when it does not move)."""
    if ob.name not in body.collider_frames:
        v, f = body.static_colliders[ob.name]
        return f, np.asarray([v], dtype=np.float64)
    got = body.collider_frames[ob.name]
    if len({len(v) for v, _ in got}) != 1:
        warnings.append(f"Collision object '{ob.name}' changes its vertex count over time; it is used as at the first frame.")
        got = got[:1]
    if max(np.abs(v - got[0][0]).max() for v, _ in got) < 1e-9:
        return got[0][1], np.asarray([got[0][0]], dtype=np.float64)
    return got[0][1], np.asarray([v for v, _ in got], dtype=np.float64)
