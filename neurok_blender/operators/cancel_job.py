"""neurok.cancel: stop the preview, bake or specialization running on an object (same as Esc)."""

import bpy
from bpy.props import StringProperty

from .. import jobs


class NEUROK_OT_cancel(bpy.types.Operator):
    """Stop NeuROK's running preview, bake or specialization on this object (same as Esc); nothing is kept"""
    bl_idname = "neurok.cancel"
    bl_label = "Cancel"
    bl_options = {'REGISTER'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})

    def execute(self, context):
        name = self.object_name or (context.active_object.name if context.active_object else "")
        job = jobs.JOBS.get(name)
        if job is None:
            self.report({'WARNING'}, "Nothing is running on this object.")
            return {'CANCELLED'}
        job.cancel.set()
        return {'FINISHED'}
