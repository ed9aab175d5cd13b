"""What a bake records on the object (engine, frames, topology, out-of-distribution score), and freeing it."""
from __future__ import annotations

import os

import bpy

from .cache_files import remove_cache
from .inputs import Inputs
from .mesh_data import topology_hash
from .preview_cache import remove_preview
from .shape_keys import remove_shape_keys


def record_bake(obj, kind: str, inputs: Inputs, seconds: float, ood: dict | None) -> None:
    b = obj.neurok.bake
    b.kind = kind
    b.frame_start = inputs.frame_start
    b.frames = inputs.frames
    b.vertex_count = inputs.data_vertices
    b.topology = inputs.topology
    b.engine = inputs.engine
    b.seconds = seconds
    b.note = "; ".join(inputs.setup.meta.get("notes", []))
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
    b.note = ""


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
