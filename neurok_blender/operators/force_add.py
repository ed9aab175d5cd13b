"""neurok.force_add: add a painted force to the active object."""

import bpy


class NEUROK_OT_force_add(bpy.types.Operator):
    """Add a painted force: a vertex group pushed with an acceleration over time"""
    bl_idname = "neurok.force_add"
    bl_label = "Add Force"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        return context.active_object is not None and context.active_object.type == 'MESH'

    def execute(self, context):
        obj = context.active_object
        s = obj.neurok
        item = s.forces.add()
        item.name = f"Force {len(s.forces)}"
        vg = obj.vertex_groups.active
        if vg is not None and vg.name != s.pin_group:
            item.vertex_group = vg.name
        item.frame_start = context.scene.frame_start
        item.frame_end = context.scene.frame_end
        s.active_force = len(s.forces) - 1
        return {'FINISHED'}
