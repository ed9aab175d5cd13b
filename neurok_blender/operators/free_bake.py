"""neurok.free_bake: remove what NeuROK wrote on the object, and nothing else."""

import bpy
from bpy.props import BoolProperty, StringProperty

from .. import jobs, objects, records


class NEUROK_OT_free_bake(bpy.types.Operator):
    """Remove NeuROK's Mesh Cache modifier and cache file, its shape keys and any preview; your own shape keys
    and modifiers stay"""
    bl_idname = "neurok.free_bake"
    bl_label = "Free Bake"
    bl_options = {'REGISTER', 'UNDO'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})
    delete_file: BoolProperty(name="Delete Cache File", default=True,
                              description="Also delete the PC2 file NeuROK wrote")

    def execute(self, context):
        obj = bpy.data.objects.get(self.object_name) if self.object_name else context.active_object
        try:
            if obj is None or (not self.object_name and not obj.select_get()):
                raise objects.UserError("Select a mesh object first." if not self.object_name
                                       else f"There is no object named '{self.object_name}'.")
            if obj.type != 'MESH':
                raise objects.UserError(f"'{obj.name}' is not a mesh; NeuROK simulates mesh objects only.")
            if obj.mode == 'EDIT':
                raise objects.UserError(f"'{obj.name}' is in Edit Mode; switch to Object Mode first.")
        except objects.UserError as e:
            self.report({'ERROR'}, str(e))
            return {'CANCELLED'}
        job = jobs.JOBS.get(obj.name)
        if job is not None:
            job.cancel.set()
        changed = records.free_all(obj, delete_file=self.delete_file)
        self.report({'INFO'}, f"Freed the NeuROK bake of '{obj.name}'." if changed else f"'{obj.name}' had no NeuROK bake.")
        return {'FINISHED'}
