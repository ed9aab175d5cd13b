"""The reference simulator behind the common `Engine`/`Run` interface."""
from __future__ import annotations

import time

from ..core.run import Engine, Run
from ..core.scene import Setup
from .simulator import ReferenceSimulator


class ReferenceRun(Run):
    def __init__(self, setup: Setup):
        super().__init__(setup)
        t0 = time.perf_counter()
        self.sim = ReferenceSimulator(setup)
        self.encode_seconds = time.perf_counter() - t0

    def _iter_frames(self):
        return self.sim.iter_frames()


class ReferenceEngine(Engine):
    """The full-space FEM / cloth simulator: exact and slow."""
    name = "reference"

    def prepare(self, setup: Setup) -> Run:
        return ReferenceRun(setup)
