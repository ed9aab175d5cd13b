"""NeuROK's user interface: Properties ▸ Physics ▸ NeuROK (every setting, in sub-panels like Cloth's:
physics_body, physics_forces, physics_cache), a compact view in the 3D viewport sidebar (sidebar),
the status bar's progress and the Object ▸ NeuROK menu (menus). Panels are named for where they are
registered: `PHYSICS_PT_*` in Properties ▸ Physics, `VIEW3D_PT_neurok` in the sidebar."""
from __future__ import annotations

import bpy

from . import menus, physics_body, physics_cache, physics_forces
from .menus import APPENDS, NEUROK_MT_menu, draw_object_menu, draw_physics_add, draw_status, status_lines
from .sidebar import VIEW3D_PT_neurok

# registration order is the order of the Physics sub-panels on screen
PHYSICS_PANELS = (*physics_body.classes, *physics_forces.classes, *physics_cache.classes)

classes = (physics_forces.NEUROK_UL_forces, VIEW3D_PT_neurok, *PHYSICS_PANELS, *menus.classes)

__all__ = ["NEUROK_MT_menu", "VIEW3D_PT_neurok", "classes", "draw_object_menu", "draw_physics_add", "draw_status",
           "register_appends", "status_lines", "unregister_appends"]


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
