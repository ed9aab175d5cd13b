"""Several objects simulated together, each felt by the others as a moving collider.

Both engines step one object against kinematic collision meshes (colliders.py). To let several
simulated objects meet (a stack of toys, a jelly dropped on a cushion), `link` gives every object's
setup one collider per other object, whose frames are written while the simulation runs, and
`Together` advances the prepared runs in lockstep, frame by frame:

1. the objects step in order; each one sees the objects before it moving over the frame (their new
   frame t is already written) and the objects after it standing where they were at frame t - 1;
2. so every pair is resolved at least once per frame against the other's true motion (Gauss-Seidel),
   and at the end of each frame the later object of a pair is outside the earlier one's shell.

Predicting the others' frame t from their velocity was tried first: a falling object, predicted to
keep falling, pushed the one under it down like an unstoppable wall (the learned engine squashed a
rubber cube to 63 % of its height and shot it sideways; tests/test_coupling.py). Holding them gives
a clean landing in both engines.

Contact works on both sides (A keeps out of B's shell and B out of A's, each with its own mass), so
neither passes through the other; momentum is exchanged only through these penalties, not by a
joint solve.
All setups must be in one space (world coordinates) and have the same frame count and step.
"""
from __future__ import annotations

import numpy as np

from .colliders import Collider
from .errors import NeurokError, SimulationFault

CONTACT_THICKNESS = 0.01    # m, the shell each simulated object keeps around the others
CONTACT_FRICTION = 0.3      # Coulomb coefficient between simulated objects (engine/core/friction.py)


def link(setups, names=None, thickness=CONTACT_THICKNESS, friction=CONTACT_FRICTION) -> list[list[Collider]]:
    """Give every setup a collider for each other setup (appended to `setup.colliders`). Returns,
    per object, the colliders that carry its surface in the others' setups (`Together` fills
    them). `thickness` and `friction` may be one number or one per object (the object seen)."""
    setups = list(setups)
    names = list(names or [f"object {i}" for i in range(len(setups))])
    if len(names) != len(setups):
        raise NeurokError("link: one name per setup")
    frames = {(s.frames, round(float(s.dt), 9)) for s in setups}
    if len(frames) > 1:
        raise NeurokError("objects simulated together need the same frame count and frame step")
    thickness = np.broadcast_to(np.asarray(thickness, dtype=np.float64), (len(setups),))
    friction = np.broadcast_to(np.asarray(friction, dtype=np.float64), (len(setups),))
    carriers: list[list[Collider]] = [[] for _ in setups]
    for i, seen in enumerate(setups):
        for j, feeler in enumerate(setups):
            if i == j:
                continue
            positions = np.repeat(np.asarray(seen.x0, dtype=np.float64)[None], seen.frames, axis=0)
            col = Collider(name=names[i], faces=seen.faces, positions=positions,
                           thickness_outer=float(thickness[i]), thickness_inner=float(thickness[i]),
                           friction=float(friction[i]), meta={"simulated": True})
            feeler.colliders = list(feeler.colliders) + [col]
            carriers[i].append(col)
    return carriers


class Together:
    """Prepared runs (one per object, from setups passed through `link`) stepped in lockstep."""

    def __init__(self, runs, carriers):
        if len(runs) != len(carriers):
            raise NeurokError("Together: one list of carriers per run")
        self.runs, self.carriers = list(runs), carriers
        for run in self.runs:   # lockstep: a frame is released before the next is stepped (no frames held for the guard)
            run.retry_window = 1
        self.frame_count = self.runs[0].setup.frames if self.runs else 0

    def _write(self, i, t, x):
        for col in self.carriers[i]:
            col.positions[t] = x

    def _hold(self, t):
        """Frame t of every object, before any steps: where it was at frame t - 1."""
        for carriers in self.carriers:
            for col in carriers:
                col.positions[t] = col.positions[t - 1]

    def frames(self, cancel=None):
        """Yields (t, [positions of each object at frame t])."""
        iterators = [run.frames(cancel) for run in self.runs]
        for t in range(self.frame_count):
            if t > 0:
                self._hold(t)
            now = []
            for i, it in enumerate(iterators):
                _, x = next(it)
                self._write(i, t, np.asarray(x, dtype=np.float64))
                now.append(x)
            yield t, now

    def bake(self, progress=None, cancel=None) -> list[np.ndarray]:
        """All frames of every object ([T,N_i,3] each). A stop (SimulationFault) carries the
        frames every object completed before it in `fault.positions` (a list, one per object)."""
        outs = [np.empty((self.frame_count, run.setup.num_vertices, 3), dtype=np.float32) for run in self.runs]
        done = 0
        try:
            for t, xs in self.frames(cancel):
                for out, x in zip(outs, xs):
                    out[t] = x
                done = t + 1
                if progress is not None:
                    progress(done, self.frame_count)
        except SimulationFault as fault:
            fault.positions = [out[:done].copy() for out in outs]
            raise
        return outs
