"""Export: an object's setup as a `neurok.scene/1` JSON with the world-space mesh as an OBJ next to it."""
from __future__ import annotations

import os

from .engine_link import formats
from .engine_link import scene as escene
from .inputs import Inputs


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
