"""neurok.show_physics: the sidebar's "All Settings" button: turn the Properties editor to the
Physics tab, where every NeuROK setting lives."""

import bpy


class NEUROK_OT_show_physics(bpy.types.Operator):
    """Show every NeuROK setting of this object: Properties ▸ Physics ▸ NeuROK"""
    bl_idname = "neurok.show_physics"
    bl_label = "All NeuROK Settings"
    bl_options = {'REGISTER'}

    def execute(self, context):
        screen = context.screen
        areas = [a for a in (screen.areas if screen is not None else []) if a.type == 'PROPERTIES']
        if not areas:
            self.report({'WARNING'}, "Open a Properties editor: NeuROK's settings are in its Physics tab.")
            return {'CANCELLED'}
        for area in areas:
            area.spaces.active.context = 'PHYSICS'
            area.tag_redraw()
        return {'FINISHED'}
