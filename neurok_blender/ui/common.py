"""What every NeuROK panel shares: wrapped text, the active mesh, the Physics panels' base."""
from __future__ import annotations

import textwrap

import bpy

ICONS = set(bpy.types.UILayout.bl_rna.functions["label"].parameters["icon"].enum_items.keys())

# `placeholder` text in fields exists from Blender 4.1 on (pass it only where it does)
PLACEHOLDER = "placeholder" in bpy.types.UILayout.bl_rna.functions["prop"].parameters


def wrapped(layout, text: str, icon: str = 'NONE', width: int = 42, alert: bool = False) -> None:
    col = layout.column(align=True)
    col.alert = alert
    for i, line in enumerate(textwrap.wrap(text, width) or [""]):
        col.label(text=line, icon=icon if i == 0 else 'BLANK1' if icon != 'NONE' else 'NONE')


def mesh_object(context):
    obj = context.active_object
    return obj if obj is not None and obj.type == 'MESH' else None


def split_layout(layout):
    """Blender's property-editor style: labels left of the fields, no keyframe dots."""
    layout.use_property_split = True
    layout.use_property_decorate = False
    return layout


class PhysicsPanel:
    """Properties ▸ Physics, shown for a mesh with NeuROK physics (where Cloth and Soft Body live)."""
    bl_space_type = 'PROPERTIES'
    bl_region_type = 'WINDOW'
    bl_context = "physics"

    @classmethod
    def poll(cls, context):
        obj = mesh_object(context)
        return obj is not None and obj.neurok.enabled


class PhysicsSubPanel(PhysicsPanel):
    bl_parent_id = "PHYSICS_PT_neurok"
