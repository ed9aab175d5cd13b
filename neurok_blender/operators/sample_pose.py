"""neurok.sample_pose: draw a plausible deformation from the learned prior and store it as a shape key."""

import bpy
import numpy as np
from bpy.props import IntProperty, StringProperty

from .. import jobs, preferences, stack
from ..engine_link import NeurokError, missing_module_sentence
from . import _common


class NEUROK_OT_sample_pose(_common.LearnedOnly, bpy.types.Operator):
    """Generate a plausible deformation of this object from the learned model's prior and store it as the
    shape key "NeuROK Pose" (value 1); run again with another seed for another pose"""
    bl_idname = "neurok.sample_pose"
    bl_label = "Sample Pose"
    bl_options = {'REGISTER', 'UNDO'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})
    seed: IntProperty(name="Seed", default=0, min=0, description="Different seeds give different poses")

    def execute(self, context):
        if self.refused(context):
            return {'CANCELLED'}
        obj = _common.target_or_report(self, context, self.object_name)
        if obj is None:
            return {'CANCELLED'}
        key = obj.data.shape_keys
        if key is not None and not key.use_relative:
            self.report({'ERROR'}, f"'{obj.name}' plays absolute shape keys; free the shape-key bake before sampling a pose.")
            return {'CANCELLED'}
        inputs = _common.gather_or_report(self, context, obj)
        if inputs is None:
            return {'CANCELLED'}
        try:
            engine = jobs.get_engine("neurok", inputs.model, preferences.device(context))
            pose = np.asarray(engine.sample_pose(inputs.setup, self.seed), dtype=np.float64)
        except NeurokError as e:
            self.report({'ERROR'}, str(e))
            return {'CANCELLED'}
        except ImportError as e:  # the engine's own dependencies (torch) are missing: one sentence, no traceback
            self.report({'ERROR'}, missing_module_sentence(e, "Sampling a pose failed"))
            return {'CANCELLED'}
        except Exception as e:  # an engine bug: one sentence in the UI, the traceback in the console
            import traceback
            traceback.print_exc()
            self.report({'ERROR'}, f"Sampling a pose failed ({type(e).__name__}: {e}).")
            return {'CANCELLED'}
        if inputs.vertex_count != inputs.data_vertices:
            self.report({'ERROR'}, f"'{obj.name}' changes its vertex count in the modifier stack; a pose shape key needs the mesh's own vertices.")
            return {'CANCELLED'}
        if pose.shape != (inputs.vertex_count, 3) or not np.all(np.isfinite(pose)):
            self.report({'ERROR'}, "The engine returned an unusable pose; nothing was changed.")
            return {'CANCELLED'}
        local = inputs.to_local(pose)
        if obj.data.shape_keys is None:
            obj.shape_key_add(name="Basis", from_mix=False)
        kb = obj.data.shape_keys.key_blocks.get(stack.POSE_KEY) or obj.shape_key_add(name=stack.POSE_KEY, from_mix=False)
        kb.data.foreach_set("co", local.ravel())
        kb.value = 1.0
        obj.data.update()
        self.report({'INFO'}, f"Stored a sampled pose (seed {self.seed}) as the shape key '{stack.POSE_KEY}'.")
        return {'FINISHED'}
