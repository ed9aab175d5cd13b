"""What every engine offers: prepare a setup once, then take its frames one by one (live preview)
or all at once (bake). The reference simulator and the learned engine both subclass these.

Every frame either engine yields passes the plausibility guard (`guard.py`) here, in the one
place both share: a frame that breaks a limit is recomputed by the engine with more substeps
(`_retry_frame`), and if it still breaks it the run stops with `ImplausibleFrame` at the last
plausible frame. No caller ever receives the implausible frame.

An engine that can recompute any of its last `retry_window` frames (the learned engine keeps
their latent states) is checked in full only every `retry_window`-th frame and at the last
one; the frames between get the guard's quick check (a small fixed sample of the same
measures, volume left out), and are held back until the full check after them passes. When a
check fails, the held frames are checked in full from the oldest, the first one that breaks a
limit is recomputed, and the engine goes on from there.
"""
from __future__ import annotations

import numpy as np

from .errors import Cancelled, SimulationFault
from .guard import Guard, ImplausibleFrame
from .setup import Setup

GUARD_RETRY_FACTORS = (4, 16)   # a frame the guard rejects is recomputed with 4x, then 16x the substeps


class Run:
    """One prepared simulation. Subclasses implement `_iter_frames()` and may implement
    `_retry_frame(t, factor)`.

    `check_plausibility` (default True) turns the guard on; set it to False only to study raw
    dynamics (ablations), never for frames handed to a user."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.encode_seconds = 0.0
        self.ood: dict | None = None
        self.check_plausibility = True
        self._guard: Guard | None = None
        self.guard_retries = 0          # frames the guard rejected and the engine recomputed successfully
        # set by the caller, read by engines whose frames can be slow (the reference): called with
        # (frame being computed, share of it done) within a frame; `cancel` is checked inside it too
        self.on_substep = None
        self.cancel = None

    @property
    def guard(self) -> Guard | None:
        if not self.check_plausibility:
            return None
        if self._guard is None:
            self._guard = Guard(self.setup)
        return self._guard

    def _iter_frames(self):
        raise NotImplementedError

    def _retry_frame(self, t: int, factor: int):
        """Recompute frame t (t >= 1) from the state after frame t - 1 with `factor` times the
        substeps and return its positions; the next frame `_iter_frames` yields must then be
        t + 1, continued from the recomputed state. Called between two frames of `_iter_frames`,
        at most `retry_window` frames after frame t was yielded. Default: no retry (None)."""
        return None

    retry_window = 1     # how many frames back `_retry_frame` can go (1: only the frame just yielded)

    def frames(self, cancel=None):
        self.cancel = cancel
        guard = self.guard
        held = []                       # (t, x) computed but not yet released
        every = max(1, int(self.retry_window))
        last = self.setup.frames - 1
        t = -1
        frames = self._iter_frames()
        while True:
            try:
                x = next(frames)
            except StopIteration:
                return
            except SimulationFault:     # the engine stopped: the held frames that pass in full go out first
                for s, xs in held:
                    if guard.check(s, xs) is not None:
                        break
                    yield s, xs
                raise
            t += 1
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"cancelled at frame {t}")
            x = np.asarray(x, dtype=np.float32)
            if guard is None or t == 0:
                yield t, x
                continue
            held.append((t, x))
            quick_ok = every == 1 or guard.check(t, x, quick=True) is None
            if quick_ok and len(held) < every and t < last:
                continue
            if quick_ok and guard.check(t, x) is None:
                yield from held
            else:
                t = yield from self._release_checked(guard, held)
            held = []

    def _release_checked(self, guard: Guard, held):
        """Check held frames in full from the oldest; yield the good ones and the first bad one
        recomputed (or raise `ImplausibleFrame`). Returns the frame the engine continues after."""
        for s, xs in held:
            if guard.check(s, xs) is None:
                yield s, xs
                continue
            yield s, self._guarded(guard, s, xs)
            return s
        return held[-1][0]

    def _guarded(self, guard: Guard, t: int, x: np.ndarray) -> np.ndarray:
        violation = guard.check(t, x)
        if violation is None:
            return x
        for factor in GUARD_RETRY_FACTORS:
            try:
                again = self._retry_frame(t, factor)
            except SimulationFault:
                break
            if again is None:
                break
            again = np.asarray(again, dtype=np.float32)
            if guard.check(t, again) is None:
                self.guard_retries += 1
                return again
        raise ImplausibleFrame(violation)

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
