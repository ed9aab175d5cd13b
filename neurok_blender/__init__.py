"""NeuROK for Blender: learned soft-body and cloth dynamics baked to Mesh Cache or shape keys.

Extension package: everything inside imports relatively (installed as bl_ext.<repo>.neurok); the
engine is reached only through `engine_link`.
"""
from __future__ import annotations

import bpy

from . import cache_files, handlers, jobs, preferences, properties, ui
from .operators import classes as operator_classes

classes = (*preferences.classes, *operator_classes, *ui.classes)


def register():
    properties.register()
    for cls in classes:
        bpy.utils.register_class(cls)
    ui.register_appends()
    handlers.register()


def unregister():
    jobs.cancel_all(wait=2.0)
    jobs.forget_engines()
    handlers.unregister()
    ui.unregister_appends()
    cache_files.empty_trash()
    for cls in reversed(classes):
        bpy.utils.unregister_class(cls)
    properties.unregister()
