"""neurok.learn_material: learn a material preset from the selected object's own simulation (a Blender
cloth or soft body, or a Mesh Cache), so NeuROK moves like it; the result becomes this scene's model."""

import os
import re
from types import SimpleNamespace

import bpy
from bpy.props import FloatProperty, StringProperty

from .. import jobs, properties, recording, scene_settings
from ..engine_link import api
from ..objects import UserError
from . import _common


def default_name(obj) -> str:
    return (re.sub(r"[^a-z0-9_]+", "_", obj.name.lower()).strip("_") or "material") + "_learned"


class NEUROK_OT_learn_material(_common.LearnedOnly, _common.JobOperator, bpy.types.Operator):
    """Learn a material from this object's own simulation (Cloth, Soft Body or Mesh Cache): NeuROK fits its
    material to that motion and adds it to the Material list; the result becomes this scene's model file"""
    bl_idname = "neurok.learn_material"
    bl_label = "Learn Material from Bake"
    bl_options = {'REGISTER', 'UNDO'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})
    material_name: StringProperty(name="Name", options={'SKIP_SAVE'},
                                  description="Name of the learned material (letters, digits and underscores); "
                                              "an existing learned material of that name is refined")
    minutes: FloatProperty(name="Minutes", default=5.0, min=0.01, soft_max=60.0, options={'SKIP_SAVE'},
                           description="Training time")

    job_kind = "learn_material"
    cancelled_message = "Learning cancelled; the scene's model was not changed."
    why_learned = "Learning a material needs the learned engine"

    def execute(self, context):
        if self.refused(context):
            return {'CANCELLED'}
        obj = _common.target_or_report(self, context, self.object_name)
        if obj is None or _common.busy_or_report(self, obj.name):
            return {'CANCELLED'}
        name = self.material_name.strip() or default_name(obj)
        if not re.fullmatch(r"[A-Za-z0-9_]+", name) or name in scene_settings.escene.MATERIAL_PRESETS:
            self.report({'ERROR'}, f"'{name}' cannot name a learned material: use letters, digits and underscores, "
                                   "and not a built-in material's name.")
            return {'CANCELLED'}
        try:
            sequence = recording.read_recording(context, obj)
        except UserError as e:
            self.report({'ERROR'}, str(e))
            return {'CANCELLED'}
        path, stored = _common.beside_blend("materials.neurok.ckpt", f"materials_{os.getpid()}.neurok.ckpt")
        self._stored, self._name = stored, name
        model = scene_settings.model_file(context) or None
        minutes = float(self.minutes)

        def task(job):
            job._emit("stage", "Learning")
            return api.learn_material([sequence], name, minutes, path, model=model, cancel=job.cancel,
                                      progress=job._fraction)

        inputs = SimpleNamespace(obj_name=obj.name, frames=len(sequence.positions))
        return self.start_job(context, inputs, task=task, total=1000)

    def on_done(self, context, obj, job):
        s = context.scene.neurok
        s.model_path = self._stored
        s.engine = 'NEUROK'
        jobs.forget_engines()
        properties.refresh_learned_presets(context)
        obj.neurok.preset = self._name
        learned = job.result or {}
        said = ", ".join(f"{k[:-2].replace('_', ' ')} ×{v:.2f}" for k, v in learned.items() if k.endswith("_x"))
        self.report({'INFO'}, f"Learned material '{self._name}' from '{obj.name}' in {job.elapsed():.0f} s "
                              f"({said}); it is selected and saved in this scene's model.")
        return {'FINISHED'}
