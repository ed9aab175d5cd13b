"""The live preview: a PC2 file that grows frame by frame, played by the "NeuROK Preview" modifier."""
from __future__ import annotations

import os
import struct

import bpy
import numpy as np

from .cache_files import file_stem, in_temp_cache, temp_cache_dir
from .engine_link import formats
from .stack import CACHE_MODIFIER, PREVIEW_MODIFIER, new_cache_modifier, own_modifier


PC2_SAMPLES_OFFSET = 28  # byte offset of the sample count in a PC2 header


class PreviewCache:
    """A PC2 file that grows frame by frame while the Mesh Cache modifier "NeuROK Preview" plays it."""

    def __init__(self, obj_name: str, points: int, frame_start: int):
        name = file_stem(obj_name)
        self.path = str(temp_cache_dir() / f"preview_{os.getpid()}_{name}.neurok.pc2")
        self.points = points
        self.frame_start = frame_start
        self.samples = 0
        self.reset()

    def reset(self) -> None:
        header = struct.pack("<12siiffi", formats.PC2_MAGIC, 1, self.points, float(self.frame_start), 1.0, 0)
        with open(self.path, "wb") as f:
            f.write(header)
        self.samples = 0

    def append(self, frames: list) -> None:
        if not frames:
            return
        data = b"".join(np.ascontiguousarray(x, dtype="<f4").tobytes() for x in frames)
        with open(self.path, "r+b") as f:
            f.seek(0, os.SEEK_END)
            f.write(data)
            f.seek(PC2_SAMPLES_OFFSET)
            f.write(struct.pack("<i", self.samples + len(frames)))
        self.samples += len(frames)

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass


def show_preview(obj, path: str, frame_start: int, newest: int | None) -> None:
    """Point "NeuROK Preview" at `path`: following the newest frame while running (newest=int), or playing
    with the timeline once finished (newest=None)."""
    cache = own_modifier(obj, CACHE_MODIFIER)
    index = None if cache is None else list(obj.modifiers).index(cache) + 1
    mod = new_cache_modifier(obj, PREVIEW_MODIFIER, index)
    if mod.filepath != path:
        mod.filepath = path
    mod.cache_format = 'PC2'
    mod.time_mode = 'FRAME'
    mod.deform_mode = 'OVERWRITE'
    mod.frame_start = float(frame_start)
    if newest is None:
        mod.play_mode = 'SCENE'
    else:
        mod.play_mode = 'CUSTOM'
        mod.eval_frame = float(newest)
    obj.update_tag()


def remove_preview(obj) -> bool:
    mod = own_modifier(obj, PREVIEW_MODIFIER)
    if mod is None:
        return False
    path = bpy.path.abspath(mod.filepath)
    obj.modifiers.remove(mod)
    if path and in_temp_cache(path) and os.path.isfile(path):
        try:
            os.unlink(path)
        except OSError:
            pass
    return True
