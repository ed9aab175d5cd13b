"""The object an operator works on, and the one-sentence error a user can fix."""
from __future__ import annotations

import bpy

from .engine_link import NeurokError


class UserError(NeurokError):
    """A problem the user can fix; the message is one sentence."""


def target_object(context, name: str = ""):
    """The object an operator works on: `name` if given, else the active, selected object."""
    if name:
        obj = bpy.data.objects.get(name)
        if obj is None:
            raise UserError(f"There is no object named '{name}'.")
    else:
        obj = getattr(context, "active_object", None)
        if obj is None or not obj.select_get():
            raise UserError("Select a mesh object first.")
    check_object(obj)
    return obj


def check_object(obj) -> None:
    if obj.type != 'MESH':
        raise UserError(f"'{obj.name}' is not a mesh; NeuROK simulates mesh objects only.")
    if obj.library is not None or obj.data.library is not None:
        raise UserError(f"'{obj.name}' is linked from another file; make it local first.")
    if obj.mode == 'EDIT':
        raise UserError(f"'{obj.name}' is in Edit Mode; switch to Object Mode first.")
    if len(obj.data.vertices) == 0:
        raise UserError(f"'{obj.name}' has no vertices to simulate.")
    if len(obj.data.polygons) == 0:
        raise UserError(f"'{obj.name}' has no faces; NeuROK needs a surface or a closed volume.")


def find_object(name: str, uid: int | None = None):
    """The object called `name`, or, when it was renamed meanwhile, the object with session uid `uid`."""
    obj = bpy.data.objects.get(name)
    if obj is not None and (uid is None or getattr(obj, "session_uid", uid) == uid):
        return obj
    if uid is not None:
        for ob in bpy.data.objects:
            if getattr(ob, "session_uid", None) == uid:
                return ob
    return None
