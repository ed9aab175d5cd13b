"""The reference against itself at twice the resolution: the noise floor of every accuracy figure.

A solid runs at the default lattice and at twice as many cells along each side; a cloth runs on
its own mesh and on the mesh with every triangle split in four (the original vertices keep their
indices, so the two runs are compared vertex by vertex). No learned model can be asked to be
closer to the reference than the reference is to itself.

    from engine.evaluation.noise_floor import noise_floor
    report = noise_floor(setup)            # setup: engine.core.setup.Setup
    report["rel_l2"]["mean"], report["ratio_to_hold_still"]["mean"]

Returned keys:
- `kind`: "solid" | "cloth"; `frames`: frames compared (frame 0 included);
- `coarse`, `fine`: the two resolutions ({"lattice_cells": c} or {"vertices": n});
- `rel_l2`: {"1", "10", "50", "100", "200" (those within the run), "mean"}: mean vertex distance
  between the default and the fine run at that frame over the rest bounding-box diagonal
  (DESIGN.md section 5), "mean" over frames 1..T-1;
- `hold_still_rel_l2`: the same for a body that holds its frame-0 pose, against the fine run;
- `ratio_to_hold_still`: rel_l2 / hold_still_rel_l2 per key ("mean": ratio of the means);
- `per_frame_rel_l2`: the whole curve (list, frame 0 first); `seconds`: wall time of both runs.
"""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..core.setup import Setup
from ..reference.lattice import DEFAULT_LATTICE_CELLS
from ..reference.simulator import ReferenceSimulator

REPORT_FRAMES = (1, 10, 50, 100, 200)


def subdivide(rest, faces):
    """Split every triangle in four at its edge midpoints. Returns (vertices, faces, edges): the
    first N vertices are the originals and vertex N + e is the midpoint of `edges[e]`."""
    faces = np.asarray(faces)
    e = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    edges, inv = np.unique(e, axis=0, return_inverse=True)
    inv = inv.ravel().reshape(3, -1).T + len(rest)                 # [F,3]: midpoints of (01, 12, 20)
    a, b, c = faces.T
    m01, m12, m20 = inv.T
    new_faces = np.concatenate([np.stack(t, axis=1) for t in
                                ((a, m01, m20), (m01, b, m12), (m20, m12, c), (m01, m12, m20))])
    vertices = np.concatenate([rest, 0.5 * (rest[edges[:, 0]] + rest[edges[:, 1]])])
    return vertices, new_faces, edges


def subdivide_setup(setup: Setup) -> Setup:
    """The same scene on the subdivided mesh: per-vertex data at a midpoint is the mean of its
    edge's ends, except pin weight (the smaller one, so the pinned region does not grow)."""
    rest, faces, edges = subdivide(np.asarray(setup.rest), setup.faces)

    def extend(a, reduce=None):
        if a is None:
            return None
        a = np.asarray(a)
        axis = 1 if a.ndim == 3 else 0                  # [N], [N,3] or [T,N,3]
        ends = (np.take(a, edges[:, 0], axis=axis), np.take(a, edges[:, 1], axis=axis))
        mid = reduce(*ends) if reduce else 0.5 * (ends[0] + ends[1])
        return np.concatenate([a, mid], axis=axis)

    return replace(setup, rest=rest, faces=faces, x0=extend(setup.x0), v0=extend(setup.v0),
                   pin_weight=extend(setup.pin_weight, np.minimum), pin_targets=extend(setup.pin_targets),
                   accel_table=extend(setup.accel_table),
                   force_terms=[(extend(w), accel, profile) for w, accel, profile in setup.force_terms],
                   vertex_mass=None)


def _frames(sim, count):
    out = [sim.vertices()]
    for _ in range(count - 1):
        out.append(sim.step_frame())
    return np.array(out)


def _summary(curve, frames):
    keys = {str(t): float(curve[t]) for t in REPORT_FRAMES if t < frames}
    keys["mean"] = float(np.mean(curve[1:])) if frames > 1 else 0.0
    return keys


def noise_floor(setup: Setup, frames: int | None = None, lattice_cells: int = DEFAULT_LATTICE_CELLS) -> dict:
    """Run `setup` at the default resolution and at twice it; see the module docstring."""
    frames = int(frames or setup.frames)
    t0 = time.perf_counter()
    n = len(setup.rest)
    if setup.material.kind == "cloth":
        kind = "cloth"
        fine_setup = subdivide_setup(setup)
        coarse_x = _frames(ReferenceSimulator(setup), frames)
        fine_x = _frames(ReferenceSimulator(fine_setup), frames)[:, :n]
        resolutions = {"vertices": n}, {"vertices": len(fine_setup.rest)}
    else:
        kind = "solid"
        coarse_x = _frames(ReferenceSimulator(setup, lattice_cells=lattice_cells), frames)
        fine_x = _frames(ReferenceSimulator(setup, lattice_cells=2 * lattice_cells), frames)
        resolutions = {"lattice_cells": lattice_cells}, {"lattice_cells": 2 * lattice_cells}
    rest = np.asarray(setup.rest)
    diagonal = float(np.linalg.norm(rest.max(axis=0) - rest.min(axis=0))) or 1.0
    curve = np.linalg.norm(coarse_x - fine_x, axis=2).mean(axis=1) / diagonal
    hold = np.linalg.norm(coarse_x[:1] - fine_x, axis=2).mean(axis=1) / diagonal
    rel, still = _summary(curve, frames), _summary(hold, frames)
    ratio = {k: (rel[k] / still[k] if still[k] > 0 else float("nan")) for k in rel}
    return {"kind": kind, "frames": frames, "coarse": resolutions[0], "fine": resolutions[1],
            "rel_l2": rel, "hold_still_rel_l2": still, "ratio_to_hold_still": ratio,
            "per_frame_rel_l2": [float(c) for c in curve], "seconds": time.perf_counter() - t0}
