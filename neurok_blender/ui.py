"""The NeuROK tab of the 3D viewport sidebar (N panel)."""
from __future__ import annotations

import textwrap

import bpy

from . import bridge, fields, jobs
from .engine_link import learned_engine_status
from .engine_link import scene as escene
from .operators.sample_pose import unavailable_reason as pose_unavailable
from .operators.specialize import unavailable_reason as specialize_unavailable

OOD_WORDS = {
    "ok": ("CHECKMARK", "Within what the model has seen: the motion should be trustworthy."),
    "caution": ("INFO", "Somewhat unusual for the model: check the motion before relying on it."),
    "out_of_range": ("ERROR", "Far from what the model was trained on: the motion may be wrong. "
                              "Try the Reference engine or Specialize."),
}


# `placeholder` text in fields exists from Blender 4.1 on (pass it only where it does)
_PLACEHOLDER = "placeholder" in bpy.types.UILayout.bl_rna.functions["prop"].parameters


def wrapped(layout, text: str, icon: str = 'NONE', width: int = 42, alert: bool = False) -> None:
    col = layout.column(align=True)
    col.alert = alert
    for i, line in enumerate(textwrap.wrap(text, width) or [""]):
        col.label(text=line, icon=icon if i == 0 else 'BLANK1' if icon != 'NONE' else 'NONE')


def mesh_object(context):
    obj = context.active_object
    return obj if obj is not None and obj.type == 'MESH' else None


class NeurokPanel:
    bl_space_type = 'VIEW_3D'
    bl_region_type = 'UI'
    bl_category = "NeuROK"


class NeurokSubPanel(NeurokPanel):
    bl_parent_id = "VIEW3D_PT_neurok"

    @classmethod
    def poll(cls, context):
        return mesh_object(context) is not None


class VIEW3D_PT_neurok(NeurokPanel, bpy.types.Panel):
    bl_idname = "VIEW3D_PT_neurok"
    bl_label = "NeuROK"

    def draw(self, context):
        layout = self.layout
        s = context.scene.neurok
        col = layout.column()
        col.prop(s, "engine", text="Engine")
        if s.engine == 'NEUROK':
            if _PLACEHOLDER:
                col.prop(s, "model_path", text="Model", placeholder="Bundled model")
            else:
                col.prop(s, "model_path", text="Model")
            problem = learned_engine_status(bpy.path.abspath(s.model_path) if s.model_path else "")
            if problem:
                wrapped(col, problem, icon='ERROR', alert=True)
        obj = mesh_object(context)
        if obj is None:
            layout.label(text="Select a mesh object to simulate.", icon='INFO')
            return
        job = jobs.JOBS.get(obj.name)
        box = layout.box()
        if job is not None:
            row = box.row(align=True)
            row.progress(factor=job.factor(), type='BAR', text=f"{job.kind.title()}: {job.progress_text()}")
            op = row.operator("neurok.cancel", text="", icon='X')
            op.object_name = obj.name
        row = box.row(align=True)
        previewing = job is not None and job.kind == "preview"
        row.operator("neurok.preview", text="Stop Preview (Esc)" if previewing else "Preview",
                     icon='PAUSE' if previewing else 'PLAY', depress=previewing)
        row = box.row(align=True)
        row.operator("neurok.bake_cache", text="Bake Cache", icon='FILE_CACHE')
        row.operator("neurok.bake_shape_keys", text="Bake Shape Keys", icon='SHAPEKEY_DATA')
        box.operator("neurok.free_bake", text="Free Bake", icon='TRASH')
        bake = obj.neurok.bake
        if bake.kind != 'NONE':
            kind = "Mesh Cache" if bake.kind == 'CACHE' else "Shape Keys"
            box.label(text=f"Baked: {kind}, {bake.frames} frames from {bake.frame_start} "
                           f"({bake.engine}, {bake.seconds:.1f} s)", icon='CHECKMARK')
        problem = bridge.bake_problem(obj)
        if problem:
            wrapped(box, problem, icon='ERROR', alert=True)
        if bake.ood_level:
            icon, words = OOD_WORDS.get(bake.ood_level, ('INFO', bake.ood_level))
            wrapped(box, f"Model fit {bake.ood_score:.2f}: {words}", icon=icon, alert=bake.ood_level == "out_of_range")
            if bake.ood_message:
                wrapped(box, bake.ood_message)
        elif s.engine == 'REFERENCE':
            box.label(text="Reference engine: exact, no model-fit check.", icon='INFO')


class VIEW3D_PT_neurok_material(NeurokSubPanel, bpy.types.Panel):
    bl_idname = "VIEW3D_PT_neurok_material"
    bl_label = "Material"

    def draw(self, context):
        st = mesh_object(context).neurok
        layout = self.layout
        layout.use_property_split = True
        layout.use_property_decorate = False
        layout.prop(st, "preset")
        cloth = escene.MATERIAL_PRESETS.get(st.preset, {}).get("kind") == "cloth"
        col = layout.column(align=True)
        col.prop(st, "stiffness", text="Stiffness (N/m)" if cloth else "Stiffness (Pa)")
        col.prop(st, "density", text="Density (kg/m²)" if cloth else "Density (kg/m³)")
        col.prop(st, "poisson")
        col = layout.column(align=True)
        col.prop(st, "damping")
        col.prop(st, "air_damping")
        if cloth:
            layout.prop(st, "bending")


class VIEW3D_PT_neurok_pins(NeurokSubPanel, bpy.types.Panel):
    bl_idname = "VIEW3D_PT_neurok_pins"
    bl_label = "Pins"

    def draw(self, context):
        obj = mesh_object(context)
        st = obj.neurok
        layout = self.layout
        layout.use_property_split = True
        layout.use_property_decorate = False
        layout.prop_search(st, "pin_group", obj, "vertex_groups", text="Pin Group")
        col = layout.column()
        col.active = bool(st.pin_group)
        col.prop(st, "pin_strength")
        col.prop(st, "pin_target")


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


class VIEW3D_PT_neurok_forces(NeurokSubPanel, bpy.types.Panel):
    bl_idname = "VIEW3D_PT_neurok_forces"
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
        f = st.forces[st.active_force]
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
        col.prop(f, "profile")
        if f.profile == 'IMPULSE':
            col.prop(f, "frame_start")
            col.prop(f, "duration")
        elif f.profile == 'KEYFRAMED':
            fc = bridge.find_fcurve(obj, f"neurok.forces[{st.active_force}].strength")
            wrapped(col, "Strength follows its keyframes." if fc else
                    "Key the Strength above (I over it) at several frames.", icon='KEYINGSET' if fc else 'ERROR',
                    alert=fc is None)
        else:
            sub = col.column(align=True)
            sub.prop(f, "frame_start")
            sub.prop(f, "frame_end")
            if f.profile == 'SINE':
                col.prop(f, "frequency")


class VIEW3D_PT_neurok_fields(NeurokSubPanel, bpy.types.Panel):
    bl_idname = "VIEW3D_PT_neurok_fields"
    bl_label = "Force Fields"
    bl_options = {'DEFAULT_CLOSED'}

    def draw_header(self, context):
        self.layout.prop(mesh_object(context).neurok, "use_force_fields", text="")

    def draw(self, context):
        obj = mesh_object(context)
        st = obj.neurok
        layout = self.layout
        layout.active = st.use_force_fields
        layout.prop(st, "field_influence")
        obs = bridge.field_objects(context, obj)
        if not obs:
            layout.label(text="No force field objects in the scene.", icon='INFO')
        for ob in obs:
            params, problems = fields.describe(ob)
            row = layout.row()
            icon = 'FORCE_WIND' if ob.field.type == 'WIND' else 'FORCE_FORCE' if ob.field.type == 'FORCE' else 'ERROR'
            row.label(text=f"{ob.name}: {ob.field.type.title()}", icon=icon)
            row.label(text=f"{ob.field.strength:g}" if params else "ignored")
            for p in problems:
                wrapped(layout, p, icon='ERROR', alert=params is None)
        wrapped(layout.box(), fields.NOT_SUPPORTED_NOTE, icon='INFO')


class VIEW3D_PT_neurok_scene(NeurokSubPanel, bpy.types.Panel):
    bl_idname = "VIEW3D_PT_neurok_scene"
    bl_label = "Scene"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        scene = context.scene
        s = scene.neurok
        layout = self.layout
        layout.use_property_split = True
        layout.use_property_decorate = False
        row = layout.row(heading="Floor")
        row.prop(s, "use_floor", text="")
        sub = row.row()
        sub.active = s.use_floor
        sub.prop(s, "floor_height", text="")
        layout.prop(s, "use_scene_range")
        col = layout.column(align=True)
        if s.use_scene_range:
            col.label(text=f"Frames {scene.frame_start}–{scene.frame_end} at {scene.render.fps / scene.render.fps_base:g} fps")
        else:
            col.prop(s, "frame_start")
            col.prop(s, "frame_end")
        g = bridge.scene_gravity(scene)
        layout.label(text=("Gravity: off (Scene > Gravity)" if not scene.use_gravity else
                           f"Gravity: ({g[0]:g}, {g[1]:g}, {g[2]:g}) m/s² from Scene"), icon='WORLD')
        layout.prop(mesh_object(context).neurok, "initial_velocity")
        layout.prop(s, "shape_key_mode")


class VIEW3D_PT_neurok_tools(NeurokSubPanel, bpy.types.Panel):
    bl_idname = "VIEW3D_PT_neurok_tools"
    bl_label = "Tools"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        layout = self.layout
        s = context.scene.neurok
        col = layout.column(align=True)
        row = col.row(align=True)
        row.operator("neurok.specialize", icon='EXPERIMENTAL')
        row.prop(s, "specialize_minutes")
        reason = specialize_unavailable(context)
        if reason:
            wrapped(col, reason, icon='INFO')
        col = layout.column(align=True)
        col.operator("neurok.sample_pose", icon='SHAPEKEY_DATA')
        reason = pose_unavailable(context)
        if reason:
            wrapped(col, reason, icon='INFO')
        layout.operator("neurok.export_scene", icon='EXPORT')


classes = (NEUROK_UL_forces, VIEW3D_PT_neurok, VIEW3D_PT_neurok_material, VIEW3D_PT_neurok_pins,
           VIEW3D_PT_neurok_forces, VIEW3D_PT_neurok_fields, VIEW3D_PT_neurok_scene, VIEW3D_PT_neurok_tools)
