"""neurok.export_scene: write the object's setup as a neurok.scene/1 JSON plus the mesh as an OBJ next to it."""

import os

import bpy
from bpy.props import StringProperty
from bpy_extras.io_utils import ExportHelper

from .. import export
from ..engine_link import NeurokError
from . import _common


class NEUROK_OT_export_scene(bpy.types.Operator, ExportHelper):
    """Export this object's NeuROK setup as a neurok.scene/1 JSON (vertex groups resolved to weights, world
    space) and its mesh as an OBJ next to it, to run with the `neurok simulate` command"""
    bl_idname = "neurok.export_scene"
    bl_label = "Export NeuROK Scene"
    bl_options = {'REGISTER'}

    filename_ext = ".json"
    filter_glob: StringProperty(default="*.json", options={'HIDDEN'})
    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})

    def invoke(self, context, event):
        obj = context.active_object
        if obj is not None:
            base = os.path.dirname(bpy.data.filepath) if bpy.data.filepath else os.path.expanduser("~")
            self.filepath = os.path.join(base, bpy.path.clean_name(obj.name) + ".neurok.json")
        return ExportHelper.invoke(self, context, event)

    def execute(self, context):
        obj = _common.target_or_report(self, context, self.object_name)
        if obj is None:
            return {'CANCELLED'}
        if not self.filepath:
            self.report({'ERROR'}, "Choose a file to export to.")
            return {'CANCELLED'}
        inputs = _common.gather_or_report(self, context, obj, check_engine=False)
        if inputs is None:
            return {'CANCELLED'}
        try:
            json_path, obj_path = export.export_scene(inputs, bpy.path.abspath(self.filepath))
        except (NeurokError, OSError) as e:
            self.report({'ERROR'}, f"Could not write the scene: {e}".rstrip(".") + ".")
            return {'CANCELLED'}
        for note in inputs.export_notes:
            self.report({'WARNING'}, f"In the exported scene, {note}.")
        self.report({'INFO'}, f"Wrote {os.path.basename(json_path)} and {os.path.basename(obj_path)}.")
        return {'FINISHED'}
