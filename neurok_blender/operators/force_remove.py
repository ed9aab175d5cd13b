"""neurok.force_remove: remove the active painted force."""

import bpy

from .. import animation


class NEUROK_OT_force_remove(bpy.types.Operator):
    """Remove the selected painted force"""
    bl_idname = "neurok.force_remove"
    bl_label = "Remove Force"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = context.active_object
        return obj is not None and obj.type == 'MESH' and len(obj.neurok.forces) > 0

    def execute(self, context):
        obj = context.active_object
        s = obj.neurok
        i = min(s.active_force, len(s.forces) - 1)
        # keyed strengths are F-curves on "neurok.forces[i].strength": drop this one, shift the ones after it
        fc = animation.find_fcurve(obj, f"neurok.forces[{i}].strength")
        fcurves = animation.channelbag_fcurves(obj)
        if fc is not None and fcurves is not None:
            fcurves.remove(fc)
        for j in range(i + 1, len(s.forces)):
            fc = animation.find_fcurve(obj, f"neurok.forces[{j}].strength")
            if fc is not None:
                fc.data_path = f"neurok.forces[{j - 1}].strength"
        s.forces.remove(i)
        s.active_force = max(0, min(i, len(s.forces) - 1))
        return {'FINISHED'}
