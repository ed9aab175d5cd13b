"""Properties ▸ Physics ▸ NeuROK: Cache (frame range, file), Bake, the Scene settings, Tools."""
from __future__ import annotations

import bpy

from .. import scene_settings, stack
from ..operators.sample_pose import NEUROK_OT_sample_pose
from ..operators.specialize import NEUROK_OT_specialize
from .common import PhysicsPanel, PhysicsSubPanel, mesh_object, split_layout, wrapped
from .run import draw_together


def draw_frame_range(layout, scene, labels=None, fps=False) -> None:
    """Scene range or own Start/End; `labels` renames the two fields (the property names otherwise)."""
    s = scene.neurok
    layout.prop(s, "use_scene_range")
    col = layout.column(align=True)
    if s.use_scene_range:
        rate = f" at {scene.render.fps / scene.render.fps_base:g} fps" if fps else ""
        col.label(text=f"Frames {scene.frame_start}–{scene.frame_end}{rate}")
    else:
        for name, label in zip(("frame_start", "frame_end"), labels or ("", "")):
            if label:
                col.prop(s, name, text=label)
            else:
                col.prop(s, name)


class PHYSICS_PT_neurok_cache(PhysicsSubPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_cache"
    bl_label = "Cache"

    def draw(self, context):
        obj = mesh_object(context)
        layout = split_layout(self.layout)
        draw_frame_range(layout, context.scene, labels=("Simulation Start", "End"))
        b = obj.neurok.bake
        if b.kind == 'CACHE':
            layout.prop(b, "cache_path", text="File")
        place = stack.own_place(obj)
        before = [m.name for m in stack.modifiers_before(obj) if m.show_viewport]
        wrapped(layout, ("Simulates " + (", ".join(before) if before else "the mesh") +
                         (" (the modifiers above 'NeuROK Cache' in the stack)" if place is not None else "")),
                icon='MODIFIER')


class PHYSICS_PT_neurok_bake(PhysicsPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_bake"
    bl_parent_id = "PHYSICS_PT_neurok_cache"
    bl_label = "Bake"

    def draw(self, context):
        layout = self.layout
        row = layout.row(align=True)
        row.operator("neurok.bake_cache", text="Bake", icon='FILE_CACHE')
        row.operator("neurok.free_bake", text="Delete Bake", icon='TRASH')
        layout.operator("neurok.bake_shape_keys", text="Bake to Shape Keys", icon='SHAPEKEY_DATA')
        draw_together(layout, context)
        layout.prop(context.scene.neurok, "shape_key_mode")
        layout.prop(context.scene.neurok, "keep_frames_before_stop")


class PHYSICS_PT_neurok_settings(PhysicsSubPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_settings"
    bl_label = "Scene"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        scene = context.scene
        s = scene.neurok
        layout = split_layout(self.layout)
        row = layout.row(heading="Floor")
        row.prop(s, "use_floor", text="")
        sub = row.row()
        sub.active = s.use_floor
        sub.prop(s, "floor_height", text="")
        sub.prop(s, "floor_friction")
        draw_frame_range(layout, scene, fps=True)
        g = scene_settings.scene_gravity(scene)
        layout.label(text=("Gravity: off (Scene > Gravity)" if not scene.use_gravity else
                           f"Gravity: ({g[0]:g}, {g[1]:g}, {g[2]:g}) m/s² from Scene"), icon='WORLD')
        layout.prop(mesh_object(context).neurok, "initial_velocity")
        layout.prop(s, "shape_key_mode")


class PHYSICS_PT_neurok_tools(PhysicsSubPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_tools"
    bl_label = "Tools"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        layout = self.layout
        col = layout.column(align=True)
        row = col.row(align=True)
        row.operator("neurok.specialize", icon='EXPERIMENTAL')
        row.prop(context.scene.neurok, "specialize_minutes")
        reason = NEUROK_OT_specialize.unavailable_reason(context)
        if reason:
            wrapped(col, reason, icon='INFO')
        layout.operator("neurok.learn_material", icon='MATERIAL')
        col = layout.column(align=True)
        col.operator("neurok.sample_pose", icon='SHAPEKEY_DATA')
        reason = NEUROK_OT_sample_pose.unavailable_reason(context)
        if reason:
            wrapped(col, reason, icon='INFO')
        layout.operator("neurok.export_scene", icon='EXPORT')


classes = (PHYSICS_PT_neurok_cache, PHYSICS_PT_neurok_bake, PHYSICS_PT_neurok_settings, PHYSICS_PT_neurok_tools)
