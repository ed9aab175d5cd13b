"""neurok.bake_cache: simulate the frame range and play it with a Mesh Cache (PC2) modifier."""

import bpy
from bpy.props import StringProperty

from .. import cache_files, preview_cache, records, shape_keys
from . import _common


class NEUROK_OT_bake_cache(_common.JobOperator, bpy.types.Operator):
    """Simulate the frame range and write it to a PC2 file next to the .blend, played by a Mesh Cache modifier"""
    bl_idname = "neurok.bake_cache"
    bl_label = "Bake to Mesh Cache"
    bl_options = {'REGISTER', 'UNDO'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'},
                                description="Object to bake (default: the active object)")

    job_kind = "bake"
    keeps_partial = True  # Keep Frames Before a Stop: the good frames become a shorter cache

    def execute(self, context):
        obj = _common.target_or_report(self, context, self.object_name)
        if obj is None or _common.busy_or_report(self, obj.name):
            return {'CANCELLED'}
        inputs = _common.gather_or_report(self, context, obj)
        if inputs is None:
            return {'CANCELLED'}
        return self.start_job(context, inputs)

    def on_done(self, context, obj, job):
        inputs = job.inputs
        local = inputs.to_local(job.result)
        cache_files.write_cache(obj, local, inputs.frame_start)  # the file first: if it fails, nothing else changed
        preview_cache.remove_preview(obj)
        if obj.neurok.bake.kind == 'SHAPE_KEYS':
            shape_keys.remove_shape_keys(obj)
        records.record_bake(obj, 'CACHE', inputs, job.elapsed(), job.ood)
        obj.neurok.bake.frames = len(local)  # fewer than asked when a stop kept only the frames before it
        self.report({'INFO'}, f"Baked {len(local)} frames of '{obj.name}' in {job.elapsed():.1f} s.")
        return {'FINISHED'}
