"""NeuROK's user interface: Properties ▸ Physics ▸ NeuROK (every setting, in sub-panels like Cloth's),
a compact view in the 3D viewport sidebar (N panel ▸ NeuROK), the status bar's progress, and the
Object ▸ NeuROK menu. The sidebar's sub-panel classes are the templates of the Physics sub-panels
(`_physics`); only the Physics copies are registered."""
from __future__ import annotations

import textwrap

import bpy

from . import animation, fields, gather, jobs, records, scene_settings, stack
from .engine_link import ENGINE_PROBLEM, learned_engine_status
from .properties import FIELD_WEIGHT_NAMES

ICONS = set(bpy.types.UILayout.bl_rna.functions["label"].parameters["icon"].enum_items.keys())
from .engine_link import scene as escene
from .operators.bake_together import together_objects
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


def draw_engine(layout, context) -> None:
    """The engine choice, and before any click why it cannot run (if it cannot)."""
    s = context.scene.neurok
    col = layout.column()
    if ENGINE_PROBLEM:  # neither engine can run in this Blender
        wrapped(col, ENGINE_PROBLEM, icon='ERROR', alert=True)
    col.prop(s, "engine", text="Engine")
    if s.engine == 'NEUROK' and not ENGINE_PROBLEM:
        if _PLACEHOLDER:
            col.prop(s, "model_path", text="Model", placeholder="Bundled model")
        else:
            col.prop(s, "model_path", text="Model")
        problem = learned_engine_status(bpy.path.abspath(s.model_path) if s.model_path else "")
        if problem:
            wrapped(col, problem, icon='ERROR', alert=True)


def draw_run(layout, context, obj) -> None:
    """Progress, Preview, the bakes, and what the last bake was."""
    s = context.scene.neurok
    job = jobs.JOBS.get(obj.name)
    box = layout.box()
    if job is not None:
        row = box.row(align=True)
        row.progress(factor=job.factor(), type='BAR', text=f"{job.kind.title()}: {job.progress_text()}")
        op = row.operator("neurok.cancel", text="", icon='X')
        op.object_name = obj.name
    row = box.row(align=True)
    previewing = job is not None and job.kind == "preview"
    row.operator("neurok.preview", text="Stop Preview" if previewing else "Preview",
                 icon='PAUSE' if previewing else 'PLAY', depress=previewing)
    row = box.row(align=True)
    row.operator("neurok.bake_cache", text="Bake Cache", icon='FILE_CACHE')
    row.operator("neurok.bake_shape_keys", text="Bake Shape Keys", icon='SHAPEKEY_DATA')
    draw_together(box, context)
    box.operator("neurok.free_bake", text="Free Bake", icon='TRASH')
    box.prop(s, "keep_frames_before_stop")
    bake = obj.neurok.bake
    if bake.kind != 'NONE':
        kind = "Mesh Cache" if bake.kind == 'CACHE' else "Shape Keys"
        box.label(text=f"Baked: {kind}, {bake.frames} frames from {bake.frame_start} "
                       f"({bake.engine}, {bake.seconds:.1f} s)", icon='CHECKMARK')
    problem = records.bake_problem(obj)
    if problem:
        wrapped(box, problem, icon='ERROR', alert=True)
    if bake.ood_level:
        icon, words = OOD_WORDS.get(bake.ood_level, ('INFO', bake.ood_level))
        wrapped(box, f"Model fit {bake.ood_score:.2f}: {words}", icon=icon, alert=bake.ood_level == "out_of_range")
        if bake.ood_message:
            wrapped(box, bake.ood_message)
    elif s.engine == 'REFERENCE':
        box.label(text="Reference engine: exact, no model-fit check.", icon='INFO')


def draw_together(layout, context) -> None:
    """With two or more NeuROK objects selected: bake them as one simulation (they collide)."""
    count = len(together_objects(context))
    if count >= 2:
        layout.operator("neurok.bake_together", text=f"Bake {count} Selected Together", icon='MOD_PHYSICS')


class VIEW3D_PT_neurok(NeurokPanel, bpy.types.Panel):
    """The compact view in the sidebar: engine, the object's material at a glance, and the buttons. Every
    setting lives in Properties ▸ Physics ▸ NeuROK, where Blender's other physics types live."""
    bl_idname = "VIEW3D_PT_neurok"
    bl_label = "NeuROK"

    def draw(self, context):
        layout = self.layout
        draw_engine(layout, context)
        obj = mesh_object(context)
        if obj is None:
            layout.label(text="Select a mesh object to simulate.", icon='INFO')
            return
        st = obj.neurok
        if not st.enabled:
            layout.operator("neurok.physics_add", text="Add NeuROK Physics", icon='MOD_SOFT')
            wrapped(layout, "Its settings then live in Properties ▸ Physics ▸ NeuROK, like Cloth's.", icon='INFO')
            return
        col = layout.column(align=True)
        row = col.row(align=True)
        row.prop(st, "preset", text="")
        row.prop(st, "kind", text="")
        col.prop(st, "stiffness_log", text="Log₁₀ Stiffness", slider=True)
        col.prop_search(st, "pin_group", obj, "vertex_groups", text="Pins")
        if st.forces:
            col.label(text=f"{sum(f.enabled for f in st.forces)} of {len(st.forces)} painted forces on", icon='FORCE_FORCE')
        draw_run(layout, context, obj)
        layout.operator("neurok.show_physics", text="All Settings", icon='PHYSICS')


def draw_material(layout, st) -> None:
    row = layout.row(align=True)
    row.prop(st, "preset")
    row.menu("NEUROK_MT_material_presets", text="", icon='PRESET')
    row.operator("neurok.material_preset_add", text="", icon='ADD')
    if st.preset == 'CUSTOM':
        layout.label(text="Custom: the sliders differ from every built-in preset.", icon='INFO')
    layout.prop(st, "kind")
    cloth = st.kind == 'CLOTH'
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


class VIEW3D_PT_neurok_material(NeurokSubPanel, bpy.types.Panel):
    bl_idname = "VIEW3D_PT_neurok_material"
    bl_label = "Material"

    def draw(self, context):
        st = mesh_object(context).neurok
        layout = self.layout
        layout.use_property_split = True
        layout.use_property_decorate = False
        draw_material(layout, st)


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
            fc = animation.find_fcurve(obj, f"neurok.forces[{st.active_force}].strength")
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
        layout.use_property_split = True
        layout.prop(st, "field_collection")
        layout.prop(st, "field_influence")
        col = layout.column(align=True)
        w = st.field_weights
        col.prop(w, "gravity")
        col.prop(w, "all")
        for name in FIELD_WEIGHT_NAMES:
            col.prop(w, name)
        obs = gather.field_objects(context, obj)
        if not obs:
            layout.label(text="No force field objects act on this object.", icon='INFO')
        for ob in obs:
            params, problems = fields.describe(ob, st.field_weights)
            row = layout.row()
            icon = 'FORCE_' + ob.field.type if ob.field.type in fields.SUPPORTED_TYPES else 'ERROR'
            if icon not in ICONS:
                icon = 'FORCE_FORCE'
            row.label(text=f"{ob.name}: {fields.type_name(ob.field.type)}", icon=icon)
            row.label(text=f"{ob.field.strength:g}" if params else "ignored")
            for p in problems:
                wrapped(layout, p, icon='ERROR', alert=params is None)
        wrapped(layout.box(), fields.NOT_SUPPORTED_NOTE, icon='INFO')


class VIEW3D_PT_neurok_collisions(NeurokSubPanel, bpy.types.Panel):
    bl_idname = "VIEW3D_PT_neurok_collisions"
    bl_label = "Collisions"
    bl_options = {'DEFAULT_CLOSED'}

    def draw_header(self, context):
        self.layout.prop(mesh_object(context).neurok, "use_colliders", text="")

    def draw(self, context):
        obj = mesh_object(context)
        st = obj.neurok
        layout = self.layout
        layout.active = st.use_colliders
        layout.use_property_split = True
        layout.prop(st, "collision_collection")
        obs = gather.collider_objects(context, obj)
        if not obs:
            wrapped(layout, "No collision objects: give an object Physics ▸ Collision.", icon='INFO')
        for ob in obs:
            c = ob.collision
            layout.label(text=f"{ob.name}: thickness {c.thickness_outer:g} m", icon='MOD_PHYSICS')
        wrapped(layout.box(), "Collision objects are handed to the engines (scene key 'colliders'); the learned "
                              "engine feels them at its contact samples, the Reference engine at every vertex "
                              "(see docs/ADDON.md).", icon='INFO')


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
        g = scene_settings.scene_gravity(scene)
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


# --------------------------------------------------------------------------- Properties ▸ Physics

class PhysicsPanel:
    bl_space_type = 'PROPERTIES'
    bl_region_type = 'WINDOW'
    bl_context = "physics"

    @classmethod
    def poll(cls, context):
        obj = mesh_object(context)
        return obj is not None and obj.neurok.enabled


def _physics(cls, label=None, options=None):
    """The same panel, in Properties ▸ Physics under "NeuROK" (where Cloth and Soft Body live)."""
    name = cls.__name__.replace("VIEW3D_PT_", "PHYSICS_PT_")
    ns = {"bl_idname": name, "bl_parent_id": "PHYSICS_PT_neurok", "bl_label": label or cls.bl_label,
          "poll": PhysicsPanel.__dict__["poll"], "__module__": __name__}
    if options is not None:
        ns["bl_options"] = options
    return type(name, (PhysicsPanel, cls), ns)


class PHYSICS_PT_neurok(PhysicsPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok"
    bl_label = "NeuROK"

    def draw(self, context):
        draw_engine(self.layout, context)
        draw_run(self.layout, context, mesh_object(context))


class PHYSICS_PT_neurok_cache(PhysicsPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_cache"
    bl_parent_id = "PHYSICS_PT_neurok"
    bl_label = "Cache"

    def draw(self, context):
        scene = context.scene
        s = scene.neurok
        obj = mesh_object(context)
        layout = self.layout
        layout.use_property_split = True
        layout.use_property_decorate = False
        layout.prop(s, "use_scene_range")
        col = layout.column(align=True)
        if s.use_scene_range:
            col.label(text=f"Frames {scene.frame_start}–{scene.frame_end}")
        else:
            col.prop(s, "frame_start", text="Simulation Start")
            col.prop(s, "frame_end", text="End")
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


class PHYSICS_PT_neurok_settings(PhysicsPanel, bpy.types.Panel):
    bl_idname = "PHYSICS_PT_neurok_settings"
    bl_parent_id = "PHYSICS_PT_neurok"
    bl_label = "Scene"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        VIEW3D_PT_neurok_scene.draw(self, context)


PHYSICS_PANELS = (PHYSICS_PT_neurok, _physics(VIEW3D_PT_neurok_material), _physics(VIEW3D_PT_neurok_pins, "Shape"),
                  _physics(VIEW3D_PT_neurok_forces), _physics(VIEW3D_PT_neurok_fields, "Field Weights"),
                  _physics(VIEW3D_PT_neurok_collisions), PHYSICS_PT_neurok_cache, PHYSICS_PT_neurok_bake,
                  PHYSICS_PT_neurok_settings, _physics(VIEW3D_PT_neurok_tools))


def draw_physics_add(self, context):
    """Appended to Properties ▸ Physics' "Enable physics for:" grid: the NeuROK button, like Cloth's."""
    obj = context.object
    if obj is None or obj.type != 'MESH':
        return
    row = self.layout.row(align=True)
    if obj.neurok.enabled:
        row.operator("neurok.physics_remove", text="NeuROK", icon='X')
    else:
        row.operator("neurok.physics_add", text="NeuROK", icon='MOD_SOFT')


# --------------------------------------------------------------------------- status bar, menus, presets

def status_lines() -> list[tuple[str, float, str]]:
    """(object, factor, text) of every running job, for the status bar."""
    return [(name, job.factor(), f"NeuROK {job.kind.title()} '{name}': {job.progress_text()}")
            for name, job in jobs.JOBS.items() if not job.finished]


def draw_status(self, context):
    """Appended to the status bar: a progress bar per running job with a cancel button (Esc cancels too)."""
    for name, factor, text in status_lines():
        row = self.layout.row(align=True)
        row.progress(factor=factor, type='BAR', text=text)
        op = row.operator("neurok.cancel", text="", icon='CANCEL')
        op.object_name = name


class NEUROK_MT_material_presets(bpy.types.Menu):
    """User-saved NeuROK materials (Blender's preset system: scripts/presets/neurok/material)"""
    bl_label = "NeuROK Material Presets"
    preset_subdir = "neurok/material"
    preset_operator = "script.execute_preset"
    draw = bpy.types.Menu.draw_preset


class NEUROK_MT_menu(bpy.types.Menu):
    """NeuROK's operators (Object ▸ NeuROK; also found by F3 search)"""
    bl_idname = "NEUROK_MT_menu"
    bl_label = "NeuROK"

    def draw(self, context):
        layout = self.layout
        layout.operator("neurok.physics_add", icon='MOD_SOFT')
        layout.operator("neurok.preview", icon='PLAY')
        layout.operator("neurok.bake_cache", icon='FILE_CACHE')
        layout.operator("neurok.bake_shape_keys", icon='SHAPEKEY_DATA')
        layout.operator("neurok.bake_together", icon='MOD_PHYSICS')
        layout.operator("neurok.free_bake", icon='TRASH')
        layout.separator()
        layout.operator("neurok.specialize", icon='EXPERIMENTAL')
        layout.operator("neurok.sample_pose", icon='SHAPEKEY_DATA')
        layout.operator("neurok.export_scene", icon='EXPORT')
        layout.operator("neurok.physics_remove", icon='X')


def draw_object_menu(self, context):
    self.layout.separator()
    self.layout.menu("NEUROK_MT_menu")


APPENDS = (("PHYSICS_PT_add", draw_physics_add), ("STATUSBAR_HT_header", draw_status),
           ("VIEW3D_MT_object", draw_object_menu))

classes = (NEUROK_UL_forces, VIEW3D_PT_neurok, *PHYSICS_PANELS, NEUROK_MT_material_presets, NEUROK_MT_menu)


def register_appends():
    for type_name, fn in APPENDS:
        cls = getattr(bpy.types, type_name, None)
        if cls is not None:
            cls.append(fn)


def unregister_appends():
    for type_name, fn in APPENDS:
        cls = getattr(bpy.types, type_name, None)
        if cls is not None:
            cls.remove(fn)
