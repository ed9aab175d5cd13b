"""Export: an object's setup as a `neurok.scene/1` JSON with the world-space mesh as an OBJ next to it.

The scene dict exists only here; a run uses the `Setup` that gather built from arrays."""
from __future__ import annotations

import os

import bpy

from .engine_link import formats
from .engine_link import scene as escene
from .inputs import Inputs


def scene_dict(inputs: Inputs) -> dict:
    """The scene (weights resolved, world space) with what the format cannot hold said in meta.notes."""
    setup = inputs.setup
    meta = {"source": "blender", "blender": bpy.app.version_string, "object": inputs.obj_name, "space": "world",
            "frame_start": inputs.frame_start, "notes": list(inputs.export_notes)}
    return escene.scene_from_setup(setup, material=inputs.material, pin_strength=inputs.pin_strength, meta=meta)


def export_scene(inputs: Inputs, json_path: str) -> tuple[str, str]:
    """Write the scene JSON and the world-space mesh OBJ next to it."""
    json_path = os.path.abspath(json_path)
    if not json_path.lower().endswith(".json"):
        json_path += ".json"
    obj_path = os.path.splitext(json_path)[0] + ".obj"
    scene = scene_dict(inputs)
    scene["meta"]["mesh"] = os.path.basename(obj_path)
    formats.write_obj(obj_path, inputs.mesh)
    escene.write_scene(json_path, scene)
    return json_path, obj_path
