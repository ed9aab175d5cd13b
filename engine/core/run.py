"""What every engine offers: prepare a setup once, then take its frames one by one (live preview)
or all at once (bake). The reference simulator and the learned engine both subclass these."""
from __future__ import annotations

import numpy as np

from .errors import Cancelled, SimulationFault
from .scene import Setup


class Run:
    """One prepared simulation. Subclasses implement `_iter_frames()`."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.encode_seconds = 0.0
        self.ood: dict | None = None

    def _iter_frames(self):
        raise NotImplementedError

    def frames(self, cancel=None):
        for t, x in enumerate(self._iter_frames()):
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"cancelled at frame {t}")
            yield t, np.asarray(x, dtype=np.float32)

    def bake(self, progress=None, cancel=None) -> np.ndarray:
        total = self.setup.frames
        out = np.empty((total, self.setup.num_vertices, 3), dtype=np.float32)
        done = 0
        try:
            for t, x in self.frames(cancel):
                out[t] = x
                done = t + 1
                if progress is not None:
                    progress(done, total)
        except SimulationFault as fault:
            fault.positions = out[:done].copy()
            raise
        return out


class Engine:
    name = "engine"

    def prepare(self, setup: Setup) -> Run:
        raise NotImplementedError
