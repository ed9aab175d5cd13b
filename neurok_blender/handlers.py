"""File handlers: keep bakes with the .blend, and never leave a preview or a job behind a file change.

* save_pre: a cache baked while the file was unsaved lives in the temp folder; move it next to the
  .blend being written and store a relative `//` path, so the bake survives save and reload.
* load_pre: cancel running jobs (their modal operators die with the old file).
* undo_post/redo_post: a freed cache file is parked, not deleted; Undo of Free Bake brings it back.
* load_post: remove "NeuROK Preview" modifiers left in a file saved during a preview.
"""
from __future__ import annotations

import os
import shutil

import bpy
from bpy.app.handlers import persistent

from . import cache_files, jobs, preview_cache, stack


def _blend_path(args) -> str:
    return args[0] if args and isinstance(args[0], str) else bpy.data.filepath


def _cache_objects():
    for obj in bpy.data.objects:
        if obj.type != 'MESH' or obj.library is not None:
            continue
        mod = stack.own_modifier(obj, stack.CACHE_MODIFIER)
        if mod is not None:
            yield obj, mod


@persistent
def on_save_pre(*args):
    new_path = _blend_path(args)
    if not new_path:
        return
    old_path = bpy.data.filepath
    new_dir = os.path.dirname(os.path.abspath(new_path))
    stem = os.path.splitext(os.path.basename(new_path))[0]
    for obj, mod in _cache_objects():
        src = bpy.path.abspath(mod.filepath)
        if not (src and os.path.isfile(src) and cache_files.in_temp_cache(src)):
            continue
        dst = os.path.join(new_dir, f"{stem}.{cache_files.file_stem(obj.name)}.neurok.pc2")
        try:
            shutil.move(src, dst)
        except OSError as e:
            print(f"NeuROK: could not move the cache of '{obj.name}' next to the .blend ({e}); it stays in {src}")
            continue
        if old_path:  # remapping relative paths on "Save As" would shift a path made relative to new_dir
            stored = dst
        else:
            stored = bpy.path.relpath(dst, start=new_dir)
        mod.filepath = stored
        obj.neurok.bake.cache_path = stored


@persistent
def on_save_post(*args):
    if not bpy.data.filepath:
        return
    for obj, mod in _cache_objects():
        path = mod.filepath
        if path and not path.startswith("//") and not cache_files.in_temp_cache(path):
            try:
                path = bpy.path.relpath(path)
            except ValueError:  # another drive on Windows
                pass
            mod.filepath = path
        obj.neurok.bake.cache_path = path


@persistent
def on_load_pre(*args):
    jobs.cancel_all()
    cache_files.empty_trash()  # the undo history goes with the old file


@persistent
def on_undo_redo_post(*args):
    """Undo of Free Bake brings the modifier back: bring its parked file back too (and park it again on Redo)."""
    try:
        cache_files.sync_trash()
    except OSError as e:
        print(f"NeuROK: could not restore a cache file after undo ({e})")


@persistent
def on_load_post(*args):
    for obj in bpy.data.objects:
        if obj.type == 'MESH' and obj.library is None and stack.own_modifier(obj, stack.PREVIEW_MODIFIER):
            preview_cache.remove_preview(obj)


HANDLERS = (
    (bpy.app.handlers.save_pre, on_save_pre),
    (bpy.app.handlers.save_post, on_save_post),
    (bpy.app.handlers.load_pre, on_load_pre),
    (bpy.app.handlers.load_post, on_load_post),
    (bpy.app.handlers.undo_post, on_undo_redo_post),
    (bpy.app.handlers.redo_post, on_undo_redo_post),
)


def register():
    for lst, fn in HANDLERS:
        if fn not in lst:
            lst.append(fn)


def unregister():
    for lst, fn in HANDLERS:
        while fn in lst:
            lst.remove(fn)
