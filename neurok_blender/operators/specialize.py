"""neurok.specialize: fine-tune the learned model on this object (reference-simulated for a few minutes)."""

import os

import bpy
from bpy.props import FloatProperty, StringProperty

from .. import cache_files, jobs, scene_settings
from ..engine_link import api
from . import _common


def output_path(obj) -> tuple[str, str]:
    name = cache_files.file_stem(obj.name)
    return _common.beside_blend(f"{name}.neurok.ckpt", f"specialized_{os.getpid()}_{name}.neurok.ckpt")


class NEUROK_OT_specialize(_common.LearnedOnly, _common.JobOperator, bpy.types.Operator):
    """Fine-tune the learned model on this object: simulate it with the reference engine for a while and train
    on that; the result becomes this scene's model file"""
    bl_idname = "neurok.specialize"
    bl_label = "Specialize Model"
    bl_options = {'REGISTER', 'UNDO'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})
    minutes: FloatProperty(name="Minutes", default=0.0, min=0.0, options={'SKIP_SAVE'},
                           description="Training time (0: the NeuROK panel's Minutes setting)")

    job_kind = "specialize"
    cancelled_message = "Specialization cancelled; the model was not changed."
    why_learned = "Specialization fine-tunes the learned model"

    def execute(self, context):
        if self.refused(context):
            return {'CANCELLED'}
        obj = _common.target_or_report(self, context, self.object_name)
        if obj is None or _common.busy_or_report(self, obj.name):
            return {'CANCELLED'}
        inputs = _common.gather_or_report(self, context, obj, check_engine=False)
        if inputs is None:
            return {'CANCELLED'}
        minutes = self.minutes or context.scene.neurok.specialize_minutes
        path, stored = output_path(obj)
        self._stored = stored
        model = scene_settings.model_file(context) or None
        kind = inputs.setup.material.kind

        def task(job):
            def progress(fraction, message=""):
                if message:
                    job._emit("stage", str(message).capitalize())
                job._fraction(fraction)
            # the mesh in world space, what the bake simulates
            return api.specialize(inputs.mesh, minutes=float(minutes), out=path, model=model, kind=kind,
                                  quiet=True, progress=progress, cancel=job.cancel)

        return self.start_job(context, inputs, task=task, total=1000)

    def on_done(self, context, obj, job):
        s = context.scene.neurok
        result = str(job.result) if job.result else bpy.path.abspath(self._stored)
        s.model_path = bpy.path.relpath(result) if bpy.data.filepath else result
        s.engine = 'NEUROK'
        jobs.forget_engines()
        self.report({'INFO'}, f"Specialized the model on '{obj.name}' in {job.elapsed():.0f} s; it is now this scene's model.")
        return {'FINISHED'}
