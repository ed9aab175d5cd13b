"""Properties ▸ Physics ▸ NeuROK: the top panel, and the body's Material and Shape (pins)."""
from __future__ import annotations

import bpy

from ..engine_link import cloth_detail_note
from .common import PhysicsPanel, PhysicsSubPanel, mesh_object, split_layout
from .run import draw_engine, draw_run


class PHYSICS_PT_neurok(PhysicsPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok"
    bl_label = "NeuROK"

    def draw(self, context):
        draw_engine(self.layout, context)
        draw_run(self.layout, context, mesh_object(context))


def draw_material(layout, st, vertices: int = 0) -> None:
    row = layout.row(align=True)
    row.prop(st, "preset")
    row.menu("NEUROK_MT_material_presets", text="", icon='PRESET')
    row.operator("neurok.material_preset_add", text="", icon='ADD')
    if st.preset == 'CUSTOM':
        layout.label(text="Custom: the sliders differ from every built-in preset.", icon='INFO')
    layout.prop(st, "kind")
    layout.prop(st, "detail")
    cloth = st.kind == 'CLOTH'
    note = cloth and cloth_detail_note(st.detail.lower(), vertices)
    if note:
        layout.label(text=note, icon='INFO')
    col = layout.column(align=True)
    col.prop(st, "stiffness", text="Stiffness (N/m)" if cloth else "Stiffness (Pa)")
    col.prop(st, "stiffness_log", text="Log₁₀ Stiffness", slider=True)
    if cloth:
        col.prop(st, "areal_density", text="Density (kg/m²)")
    else:
        col.prop(st, "density", text="Density (kg/m³)")
    col.prop(st, "poisson")
    col = layout.column(align=True)
    col.prop(st, "damping")
    col.prop(st, "air_damping")
    if cloth:
        layout.prop(st, "bending")
        row = layout.row(align=True)
        row.prop(st, "self_collision")
        sub = row.row(align=True)
        sub.active = st.self_collision
        sub.prop(st, "self_distance")
        sub.prop(st, "self_friction")


class PHYSICS_PT_neurok_material(PhysicsSubPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_material"
    bl_label = "Material"

    def draw(self, context):
        obj = mesh_object(context)
        draw_material(split_layout(self.layout), obj.neurok, len(obj.data.vertices))


class PHYSICS_PT_neurok_pins(PhysicsSubPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_pins"
    bl_label = "Shape"

    def draw(self, context):
        obj = mesh_object(context)
        st = obj.neurok
        layout = split_layout(self.layout)
        layout.prop_search(st, "pin_group", obj, "vertex_groups", text="Pin Group")
        col = layout.column()
        col.active = bool(st.pin_group)
        col.prop(st, "pin_strength")
        col.prop(st, "pin_target")


classes = (PHYSICS_PT_neurok, PHYSICS_PT_neurok_material, PHYSICS_PT_neurok_pins)
