"""Cache files: the PC2 a bake writes and its "NeuROK Cache" modifier, and the trash that lets Undo bring a
freed file back."""
from __future__ import annotations

import os
import shutil
import tempfile
import zlib
from pathlib import Path

import bpy
import numpy as np

from .engine_link import formats
from .stack import CACHE_MODIFIER, PREVIEW_MODIFIER, new_cache_modifier, own_modifier


def file_stem(name: str) -> str:
    """A file-name-safe stem unique to an object name: "Cube.001" and "Cube_001" clean to the same text, so the
    exact name's CRC is appended (their caches must never share a file)."""
    return f"{bpy.path.clean_name(name)}-{zlib.crc32(name.encode('utf-8')):08x}"


def temp_cache_dir() -> Path:
    d = Path(tempfile.gettempdir()) / "neurok_cache"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cache_file_for(obj) -> tuple[str, str]:
    """(absolute path, path to store) of the PC2 cache for `obj`: next to the .blend, or in the temp folder."""
    name = file_stem(obj.name)
    blend = bpy.data.filepath
    if blend:
        path = os.path.join(os.path.dirname(blend), f"{Path(blend).stem}.{name}.neurok.pc2")
        return path, bpy.path.relpath(path)
    path = str(temp_cache_dir() / f"unsaved_{os.getpid()}_{name}.neurok.pc2")
    return path, path


def in_temp_cache(path: str) -> bool:
    try:
        return Path(path).resolve().parent == temp_cache_dir().resolve()
    except OSError:
        return False


def write_cache(obj, local: np.ndarray, frame_start: int) -> str:
    """Write the PC2 next to the .blend and point the "NeuROK Cache" modifier (first in the stack) at it."""
    path, stored = cache_file_for(obj)
    formats.write_pc2(path, local, start_frame=frame_start, sample_rate=1.0)
    old = obj.neurok.bake.cache_path
    if old:
        old_abs = bpy.path.abspath(old)
        if (os.path.normcase(os.path.abspath(old_abs)) != os.path.normcase(os.path.abspath(path))
                and os.path.isfile(old_abs) and not cache_users(old_abs, skip=obj)):
            os.unlink(old_abs)
    mod = new_cache_modifier(obj, CACHE_MODIFIER, None)
    mod.show_viewport = mod.show_render = True
    mod.cache_format = 'PC2'
    mod.filepath = stored
    mod.frame_start = float(frame_start)
    mod.frame_scale = 1.0
    mod.time_mode = 'FRAME'
    mod.play_mode = 'SCENE'
    mod.deform_mode = 'OVERWRITE'
    mod.interpolation = 'LINEAR'
    mod.forward_axis, mod.up_axis = 'POS_Y', 'POS_Z'
    mod.flip_axis = (False, False, False)
    mod.factor = 1.0
    obj.neurok.bake.cache_path = stored
    return path


def normalized_path(path: str) -> str:
    return os.path.normcase(os.path.abspath(bpy.path.abspath(path)))


def cache_users(path: str, skip=None) -> list:
    """Objects whose NeuROK cache modifier plays `path` (other than `skip`)."""
    target = normalized_path(path)
    out = []
    for ob in bpy.data.objects:
        if ob is skip or ob.type != 'MESH' or ob.library is not None:
            continue
        for name in (CACHE_MODIFIER, PREVIEW_MODIFIER):
            mod = own_modifier(ob, name)
            if mod is not None and mod.filepath and normalized_path(mod.filepath) == target:
                out.append(ob)
    return out


# Freed cache files are parked here (not deleted) so that Undo, which brings the modifier back, can bring
# the file back too (the undo_post handler calls sync_trash). Emptied when another file is loaded.
TRASH: dict[str, str] = {}  # normalized original path -> parked copy
RESTORED: set[str] = set()


def trash_dir() -> Path:
    d = temp_cache_dir() / f"trash_{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def trash_file(path: str) -> None:
    src = normalized_path(path)
    dst = trash_dir() / f"{len(TRASH)}_{zlib.crc32(src.encode('utf-8')):08x}_{os.path.basename(src)}"
    shutil.move(src, dst)
    TRASH[src] = str(dst)
    RESTORED.discard(src)


def sync_trash() -> list[str]:
    """After Undo/Redo: put back parked cache files that a NeuROK modifier plays again, and park again the
    files restored earlier that no modifier plays any more. Returns the restored paths."""
    wanted = set()
    for ob in bpy.data.objects:
        if ob.type != 'MESH' or ob.library is not None:
            continue
        mod = own_modifier(ob, CACHE_MODIFIER)
        if mod is not None and mod.filepath:
            wanted.add(normalized_path(mod.filepath))
    restored = []
    for path in wanted:
        parked = TRASH.get(path)
        if parked and not os.path.isfile(path) and os.path.isfile(parked):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            shutil.move(parked, path)
            del TRASH[path]
            RESTORED.add(path)
            restored.append(path)
    for path in list(RESTORED):
        if path not in wanted and os.path.isfile(path):
            trash_file(path)
    return restored


def empty_trash() -> None:
    for parked in TRASH.values():
        try:
            os.unlink(parked)
        except OSError:
            pass
    TRASH.clear()
    RESTORED.clear()


def remove_cache(obj, delete_file: bool = True) -> bool:
    """Remove "NeuROK Cache"; its file is parked in the trash (Undo brings both back), unless another object
    still plays the same file."""
    mod = own_modifier(obj, CACHE_MODIFIER)
    changed = False
    path = obj.neurok.bake.cache_path or (mod.filepath if mod else "")
    if mod is not None and obj.neurok.enabled:  # NeuROK physics keeps its place in the stack, switched off
        if mod.filepath or mod.show_viewport:
            changed = True
        mod.filepath = ""
        mod.show_viewport = mod.show_render = False
    elif mod is not None:
        obj.modifiers.remove(mod)
        changed = True
    if delete_file and path:
        abs_path = bpy.path.abspath(path)
        if os.path.isfile(abs_path) and abs_path.endswith(".neurok.pc2") and not cache_users(abs_path, skip=obj):
            trash_file(abs_path)
            changed = True
    obj.neurok.bake.cache_path = ""
    return changed
