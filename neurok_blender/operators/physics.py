"""neurok.physics_add / neurok.physics_remove: the "NeuROK" button of Properties ▸ Physics, and
neurok.material_preset_add: save the material sliders as a user preset (Blender's preset system)."""

import bpy
from bl_operators.presets import AddPresetBase
from bpy.props import StringProperty

from .. import jobs, objects, records, stack


def _target(op, context):
    name = getattr(op, "object_name", "")
    obj = bpy.data.objects.get(name) if name else context.object
    if obj is None or obj.type != 'MESH':
        op.report({'ERROR'}, "Select a mesh object first.")
        return None
    if obj.library is not None:
        op.report({'ERROR'}, f"'{obj.name}' is linked from another file; make it local first.")
        return None
    return obj


class NEUROK_OT_physics_add(bpy.types.Operator):
    """Enable NeuROK physics on this object: its settings appear in Properties ▸ Physics and the modifier
    'NeuROK Cache' takes its place at the end of the stack (it simulates what comes before it)"""
    bl_idname = "neurok.physics_add"
    bl_label = "Enable NeuROK Physics"
    bl_options = {'REGISTER', 'UNDO'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})

    def execute(self, context):
        obj = _target(self, context)
        if obj is None:
            return {'CANCELLED'}
        try:
            stack.ensure_place(obj)
        except objects.UserError as e:
            self.report({'ERROR'}, str(e))
            return {'CANCELLED'}
        obj.neurok.enabled = True
        return {'FINISHED'}


class NEUROK_OT_physics_remove(bpy.types.Operator):
    """Disable NeuROK physics on this object: removes its bake, preview and the 'NeuROK Cache' modifier (your
    settings stay, so enabling it again brings them back)"""
    bl_idname = "neurok.physics_remove"
    bl_label = "Disable NeuROK Physics"
    bl_options = {'REGISTER', 'UNDO'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})

    def execute(self, context):
        obj = _target(self, context)
        if obj is None:
            return {'CANCELLED'}
        job = jobs.JOBS.get(obj.name)
        if job is not None:
            job.cancel.set()
            jobs.JOBS.pop(obj.name, None)
        records.free_all(obj)
        mod = stack.own_modifier(obj, stack.CACHE_MODIFIER)
        if mod is not None:
            obj.modifiers.remove(mod)
        obj.neurok.enabled = False
        return {'FINISHED'}


class NEUROK_OT_material_preset_add(AddPresetBase, bpy.types.Operator):
    """Save the NeuROK material sliders as a preset of your own (NeuROK Material Presets menu)"""
    bl_idname = "neurok.material_preset_add"
    bl_label = "Add NeuROK Material Preset"
    preset_menu = "NEUROK_MT_material_presets"
    preset_subdir = "neurok/material"
    preset_defines = ["settings = bpy.context.object.neurok"]
    preset_values = ["settings.kind", "settings.stiffness", "settings.density", "settings.areal_density",
                     "settings.poisson", "settings.damping", "settings.air_damping", "settings.bending"]
