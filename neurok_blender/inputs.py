"""`Inputs`: everything a run needs as plain data, so a worker thread never touches bpy."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .mesh_data import transform


@dataclass
class Inputs:
    """Everything a run needs, as plain data (a worker thread may use all of it)."""
    obj_name: str
    setup: object  # engine.core.setup.Setup, world space
    mesh: object  # engine.core.formats.Mesh, world space
    material: dict  # as the settings say it (the preset's name only while the sliders match it), for export
    pin_strength: float  # for export: the scene format keeps pin weights and strength apart
    matrix: np.ndarray  # object -> world at the first frame
    inverse: np.ndarray  # world -> object: [4,4], or [T,4,4] when the object moves (one per frame)
    frame_start: int
    frames: int
    vertex_count: int  # simulated vertices (what comes before NeuROK in the stack)
    topology: str  # of obj.data
    engine: str
    model: str | None
    warnings: list = field(default_factory=list)
    export_notes: list = field(default_factory=list)
    obj_uid: int | None = None  # session uid: follows the object through renames
    data_vertices: int = 0  # len(obj.data.vertices)
    evaluated: bool = False  # the input came from the modifier stack / shape-key mix, not obj.data alone

    def to_local(self, positions: np.ndarray, frame: int | None = None) -> np.ndarray:
        """World -> object space; `positions` is one frame ([N,3], pass its index) or all frames ([T,N,3])."""
        x = np.asarray(positions, np.float64)
        inv = np.asarray(self.inverse)
        if inv.ndim == 2:
            return transform(x, inv).astype(np.float32)
        if x.ndim == 3:
            return np.stack([transform(x[t], inv[min(t, len(inv) - 1)]) for t in range(len(x))]).astype(np.float32)
        t = 0 if frame is None else min(int(frame), len(inv) - 1)
        return transform(x, inv[t]).astype(np.float32)
