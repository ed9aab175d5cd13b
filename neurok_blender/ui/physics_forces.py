"""Properties ▸ Physics ▸ NeuROK: what pushes the body: Painted Forces, Field Weights, Collisions."""
from __future__ import annotations

import bpy

from .. import animation, fields, gather
from ..properties import FIELD_WEIGHT_NAMES
from .common import ICONS, PhysicsSubPanel, mesh_object, wrapped


class NEUROK_UL_forces(bpy.types.UIList):
    def draw_item(self, context, layout, data, item, icon, active_data, active_propname, index):
        row = layout.row(align=True)
        row.prop(item, "enabled", text="")
        row.prop(item, "name", text="", emboss=False, icon='FORCE_FORCE')
        row.label(text=item.vertex_group or "(no group)")
        if item.profile == 'KEYFRAMED':
            row.label(text="keyed")
        else:
            row.label(text=f"{item.strength:g} m/s²")


def draw_profile(col, obj, f, index) -> None:
    """The force's time profile and the settings that profile reads."""
    col.prop(f, "profile")
    if f.profile == 'IMPULSE':
        col.prop(f, "frame_start")
        col.prop(f, "duration")
    elif f.profile == 'KEYFRAMED':
        fc = animation.find_fcurve(obj, f"neurok.forces[{index}].strength")
        wrapped(col, "Strength follows its keyframes." if fc else
                "Key the Strength above (I over it) at several frames.", icon='KEYINGSET' if fc else 'ERROR',
                alert=fc is None)
    else:
        sub = col.column(align=True)
        sub.prop(f, "frame_start")
        sub.prop(f, "frame_end")
        if f.profile == 'SINE':
            col.prop(f, "frequency")


def draw_force(layout, obj, f, index) -> None:
    col = layout.column()
    col.use_property_split = True
    col.prop_search(f, "vertex_group", obj, "vertex_groups")
    col.prop(f, "strength")
    col.prop(f, "direction_mode")
    if f.direction_mode == 'VECTOR':
        col.prop(f, "direction")
    else:
        col.prop(f, "direction_object")
        col.prop(f, "axis")
    draw_profile(col, obj, f, index)


class PHYSICS_PT_neurok_forces(PhysicsSubPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_forces"
    bl_label = "Painted Forces"

    def draw(self, context):
        obj = mesh_object(context)
        st = obj.neurok
        layout = self.layout
        row = layout.row()
        row.template_list("NEUROK_UL_forces", "", st, "forces", st, "active_force", rows=3)
        col = row.column(align=True)
        col.operator("neurok.force_add", text="", icon='ADD')
        col.operator("neurok.force_remove", text="", icon='REMOVE')
        if not st.forces or not 0 <= st.active_force < len(st.forces):
            layout.label(text="Paint a vertex group, then add a force.", icon='INFO')
            return
        draw_force(layout, obj, st.forces[st.active_force], st.active_force)


def draw_field_objects(layout, context, obj) -> None:
    """Each force field acting on the object, and why it is ignored (if it is)."""
    obs = gather.field_objects(context, obj)
    if not obs:
        layout.label(text="No force field objects act on this object.", icon='INFO')
    for ob in obs:
        params, problems = fields.describe(ob, obj.neurok.field_weights)
        row = layout.row()
        icon = 'FORCE_' + ob.field.type if ob.field.type in fields.SUPPORTED_TYPES else 'ERROR'
        if icon not in ICONS:
            icon = 'FORCE_FORCE'
        row.label(text=f"{ob.name}: {fields.type_name(ob.field.type)}", icon=icon)
        row.label(text=f"{ob.field.strength:g}" if params else "ignored")
        for p in problems:
            wrapped(layout, p, icon='ERROR', alert=params is None)


def draw_field_weights(layout, context, obj) -> None:
    st = obj.neurok
    layout.prop(st, "field_collection")
    layout.prop(st, "field_influence")
    col = layout.column(align=True)
    for name in ("gravity", "all", *FIELD_WEIGHT_NAMES):
        col.prop(st.field_weights, name)
    draw_field_objects(layout, context, obj)
    wrapped(layout.box(), fields.NOT_SUPPORTED_NOTE, icon='INFO')


def draw_collisions(layout, context, obj) -> None:
    layout.prop(obj.neurok, "collision_collection")
    obs = gather.collider_objects(context, obj)
    if not obs:
        wrapped(layout, "No collision objects: give an object Physics ▸ Collision.", icon='INFO')
    for ob in obs:
        layout.label(text=f"{ob.name}: thickness {ob.collision.thickness_outer:g} m", icon='MOD_PHYSICS')
    wrapped(layout.box(), "Collision objects are handed to the engines (scene key 'colliders'); the learned "
                          "engine feels them at its contact samples, the Reference engine at every vertex "
                          "(see docs/ADDON.md).", icon='INFO')


def toggled(toggle, draw_settings):
    """`draw_header` and `draw` of a sub-panel switched on and off by the checkbox of the object's setting
    `toggle` in its header. Plain functions rather than methods of a base class: the tests draw panels with a
    stand-in for `self`."""
    def draw_header(self, context):
        self.layout.prop(mesh_object(context).neurok, toggle, text="")

    def draw(self, context):
        obj = mesh_object(context)
        layout = self.layout
        layout.active = getattr(obj.neurok, toggle)
        layout.use_property_split = True
        draw_settings(layout, context, obj)

    return draw_header, draw


class PHYSICS_PT_neurok_fields(PhysicsSubPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_fields"
    bl_label = "Field Weights"
    bl_options = {'DEFAULT_CLOSED'}
    draw_header, draw = toggled("use_force_fields", draw_field_weights)


class PHYSICS_PT_neurok_collisions(PhysicsSubPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_collisions"
    bl_label = "Collisions"
    bl_options = {'DEFAULT_CLOSED'}
    draw_header, draw = toggled("use_colliders", draw_collisions)


classes = (PHYSICS_PT_neurok_forces, PHYSICS_PT_neurok_fields, PHYSICS_PT_neurok_collisions)
