"""The 3D viewport sidebar (N panel ▸ NeuROK): one compact panel, no sub-panels."""
from __future__ import annotations

import bpy

from .common import mesh_object, wrapped
from .run import draw_engine, draw_run


class VIEW3D_PT_neurok(bpy.types.Panel):
    """The compact view in the sidebar: engine, the object's material at a glance, and the buttons. Every
    setting lives in Properties ▸ Physics ▸ NeuROK, where Blender's other physics types live."""
    bl_space_type = 'VIEW_3D'
    bl_region_type = 'UI'
    bl_category = "NeuROK"
    bl_idname = "VIEW3D_PT_neurok"
    bl_label = "NeuROK"

    def draw(self, context):
        layout = self.layout
        draw_engine(layout, context)
        obj = mesh_object(context)
        if obj is None:
            layout.label(text="Select a mesh object to simulate.", icon='INFO')
            return
        if not obj.neurok.enabled:
            layout.operator("neurok.physics_add", text="Add NeuROK Physics", icon='MOD_SOFT')
            wrapped(layout, "Its settings then live in Properties ▸ Physics ▸ NeuROK, like Cloth's.", icon='INFO')
            return
        draw_glance(layout, obj)
        draw_run(layout, context, obj)
        layout.operator("neurok.show_physics", text="All Settings", icon='PHYSICS')


def draw_glance(layout, obj) -> None:
    """The object's material, pins and forces at a glance."""
    st = obj.neurok
    col = layout.column(align=True)
    row = col.row(align=True)
    row.prop(st, "preset", text="")
    row.prop(st, "kind", text="")
    col.prop(st, "stiffness_log", text="Log₁₀ Stiffness", slider=True)
    col.prop_search(st, "pin_group", obj, "vertex_groups", text="Pins")
    if st.forces:
        col.label(text=f"{sum(f.enabled for f in st.forces)} of {len(st.forces)} painted forces on", icon='FORCE_FORCE')
