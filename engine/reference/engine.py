"""The reference simulator behind the common `Engine`/`Run` interface."""
from __future__ import annotations

import time

from ..core.run import Engine, Run
from ..core.setup import Setup
from .simulator import ReferenceSimulator


class ReferenceRun(Run):
    def __init__(self, setup: Setup, **sim_options):
        """`sim_options` go to `ReferenceSimulator` (lattice_cells, substep, ...)."""
        super().__init__(setup)
        t0 = time.perf_counter()
        self.sim = ReferenceSimulator(setup, **sim_options)
        self.encode_seconds = time.perf_counter() - t0
        self._before = None   # simulator state before the latest frame (for the guard's retry)

    def _iter_frames(self):
        sim = self.sim
        sim.cancel, sim.on_substep = self.cancel, self._substep_done
        yield sim.vertices()
        for _ in range(self.setup.frames - 1):
            self._before = (sim.y.copy(), sim.v.copy(), sim.frame)
            yield sim.step_frame()

    def _substep_done(self, frame, share):
        if self.on_substep is not None:
            self.on_substep(frame, share)

    def _retry_frame(self, t, factor):
        """Frame t again from the state before it, with `factor` times the substeps."""
        if self._before is None or self._before[2] != t - 1:
            return None
        sim = self.sim
        y, v, frame = self._before
        sim.y, sim.v, sim.frame = y.copy(), v.copy(), frame
        substeps, h = sim.substeps, sim.h
        sim.substeps, sim.h = substeps * factor, self.setup.dt / (substeps * factor)
        try:
            return sim.step_frame()
        finally:
            sim.substeps, sim.h = substeps, h


class ReferenceEngine(Engine):
    """The full-space FEM / cloth simulator: exact and slow. `sim_options` go to every run's
    `ReferenceSimulator` (lattice_cells, substep, ...)."""
    name = "reference"

    def __init__(self, **sim_options):
        self.sim_options = sim_options

    def prepare(self, setup: Setup) -> Run:
        return ReferenceRun(setup, **self.sim_options)
