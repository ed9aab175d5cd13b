"""The fingerprint of what made a reference run's frames: the reference's physics version and
settings (lattice, substep, work budget), the mesh and the scene. Files that keep such frames
(training sequences, the evaluation's ground truth in data/) carry it, so a later run reuses a
file only while nothing that decides it has changed, and makes again only the stale ones.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from ..core.physics import substeps_per_frame
from .budget import DEFAULT_BUDGET

# Bump a kind's version when a change to the reference simulator, or to how a scene becomes a Setup
# (engine/core), changes the frames it makes for that kind of body: every file stamped with that kind is
# then stale and is made again, the other kind's are kept. (tests/test_data_set.py holds one stored
# rollout against a fresh one: a change that forgets this fails there.)
#   2: Coulomb friction on the floor and colliders; cut lattice cells strained at their inside centroid
#   solid 3: the lattice's Kuhn split mirrored in every other cell (a symmetric body stays symmetric)
#   cloth 3: a self-contact pair without a plane measures a gap continuous where it passes an edge
#            (`core.self_contact.ContactPairs.gaps`)
#   solid 4: only the body meets the floor: a lattice node may sink below it as far as it lies outside
#            the body at rest (`simulator.LATTICE_FLOORS`; before, every node stood on it, a flat sole)
PHYSICS_VERSIONS = {"solid": 4, "cloth": 3}


def physics_version(kind: str) -> int:
    """The reference's physics version for a kind of body ("solid": the lattice, "cloth": the sheet)."""
    return PHYSICS_VERSIONS[kind]


def digest(*parts) -> str:
    """A short hash of strings, JSON-able values and arrays."""
    h = hashlib.sha1()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(str((part.dtype.str, part.shape)).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(json.dumps(part, sort_keys=True, default=str).encode())
    return h.hexdigest()[:20]


def mesh_digest(vertices, faces) -> str:
    return digest(np.asarray(vertices, np.float64), np.asarray(faces, np.int64))


def run_settings(lattice_cells: int, longest_substep: float, dt: float | None, budget=DEFAULT_BUDGET) -> dict:
    """The reference's settings that decide its frames. The substep recorded is the one it takes at
    the frame time dt (`core.physics.substeps_per_frame`; the longest allowed where dt is None): a
    change to how many steps a frame takes then marks stale exactly the answers it moves."""
    substep = longest_substep if dt is None else dt / substeps_per_frame(dt, longest_substep)
    return {"lattice_cells": int(lattice_cells), "substep": float(substep),
            "budget": budget.as_dict() if budget is not None else None}


def reference_stamp(vertices, faces, scene: dict, settings: dict, kind: str) -> dict:
    """What made a run of a `kind` of body: physics version, settings, mesh and scene digests, and one
    fingerprint of them all."""
    stamp = {"physics_version": physics_version(kind), "settings": settings, "mesh": mesh_digest(vertices, faces),
             "scene": digest(scene)}
    stamp["fingerprint"] = digest(stamp)
    return stamp
