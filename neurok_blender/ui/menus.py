"""NeuROK outside its panels: the Physics "Enable physics for:" button, the status bar's progress,
the Object ▸ NeuROK menu and the material presets menu."""
from __future__ import annotations

import bpy

from .. import jobs


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


MENU_OPERATORS = (("physics_add", 'MOD_SOFT'), ("preview", 'PLAY'), ("bake_cache", 'FILE_CACHE'),
                  ("bake_shape_keys", 'SHAPEKEY_DATA'), ("bake_together", 'MOD_PHYSICS'), ("free_bake", 'TRASH'),
                  None, ("specialize", 'EXPERIMENTAL'), ("learn_material", 'MATERIAL'), ("sample_pose", 'SHAPEKEY_DATA'),
                  ("export_scene", 'EXPORT'), ("physics_remove", 'X'))


class NEUROK_MT_menu(bpy.types.Menu):
    """NeuROK's operators (Object ▸ NeuROK; also found by F3 search)"""
    bl_idname = "NEUROK_MT_menu"
    bl_label = "NeuROK"

    def draw(self, context):
        for entry in MENU_OPERATORS:
            if entry is None:
                self.layout.separator()
            else:
                self.layout.operator("neurok." + entry[0], icon=entry[1])


def draw_object_menu(self, context):
    self.layout.separator()
    self.layout.menu("NEUROK_MT_menu")


def draw_learn_from_cache(self, context):
    """Under Blender's own Cloth and Soft Body cache panels: learn a NeuROK material from that simulation."""
    self.layout.operator("neurok.learn_material", icon='MATERIAL')


APPENDS = (("PHYSICS_PT_add", draw_physics_add), ("STATUSBAR_HT_header", draw_status),
           ("VIEW3D_MT_object", draw_object_menu), ("PHYSICS_PT_cloth_cache", draw_learn_from_cache),
           ("PHYSICS_PT_softbody_cache", draw_learn_from_cache))

classes = (NEUROK_MT_material_presets, NEUROK_MT_menu)
