"""`Setup`: a simulation made concrete for one mesh, the one input both engines run.

Every field an engine reads is declared here; `scene.setup_from_arrays` builds one (from a scene
file through `scene.setup_from_scene`, from Blender through the add-on's gather), and
`scene.setup_from_sequence` from a recorded sequence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .colliders import Collider
from .errors import FormatError
from .fields import Effector
from .formats import Sequence
from .material_params import Material
from .physics import FLOOR_FRICTION, SELF_FRICTION


def profile_value(profile: dict, frame: float, dt: float) -> float:
    """Strength multiplier of a force at `frame` (applied from frame to frame + 1)."""
    kind = profile.get("type", "constant")
    start = profile.get("start", 0) or 0
    end = profile.get("end")
    if kind == "keyframes":
        keys = sorted(profile["keys"])
        return float(np.interp(frame, [k[0] for k in keys], [k[1] for k in keys]))
    if frame < start or (end is not None and frame >= end):
        return 0.0
    if kind == "constant":
        return 1.0
    if kind == "impulse":
        # an impulse lasts one frame unless an end is given
        return 1.0 if end is not None or frame < start + 1 else 0.0
    if kind == "sine":
        frequency = profile.get("frequency")
        return math.sin(2.0 * math.pi * (1.0 if frequency is None else frequency) * (frame - start) * dt)
    raise FormatError(f"unknown profile '{kind}'")


DETAILS = ("low", "medium", "high")   # scene key "detail": the learned engine's handles x 0.5 / 1 / 2
# Cloth at medium and high detail takes the learned engine's full-space sheet layer (creases, hinges
# at its pins, drapes) at any size; at low it bends as one smooth card (fast previews). On the full
# mesh (high detail) the layer costs about this many ms a frame per 1,000 vertices on one core
# (`neurok bench`'s 100k cloth row with the layer on every vertex); the Material panel names the cost from this size on.
SHEET_LAYER_MS_PER_1000_VERTICES = 18
SHEET_LAYER_NOTE_FROM_VERTICES = 20_000
# At medium detail a sheet of more vertices takes its layer on a coarse proxy of this many
# (`learned/sheet_proxy.py`); high detail takes it on the full mesh
SHEET_PROXY_VERTICES = 2_000
# the learned engine's choices for a sheet's layer: "auto" follows the detail, "full" is on and on
# the full mesh whatever the detail
SHEET_LAYER_CHOICES = ("auto", "on", "off", "full")


def cloth_detail_note(detail: str, vertices: int) -> str | None:
    """What a user should know about a cloth's detail level at this size, in one line, or None."""
    if detail == "low":
        return "Low bends cloth as one smooth card (fast previews); Medium creases and drapes it"
    if detail == "medium" and vertices > SHEET_PROXY_VERTICES:
        return (f"Medium creases this cloth on a {SHEET_PROXY_VERTICES:,}-vertex proxy of it (folds as fine "
                "as the proxy's edges); High creases every vertex, at more cost")
    if detail == "high" and vertices >= SHEET_LAYER_NOTE_FROM_VERTICES:
        seconds = SHEET_LAYER_MS_PER_1000_VERTICES * vertices / 1e6
        return (f"Creasing all {vertices:,} vertices costs about {seconds:.1f} s a frame; "
                f"Medium creases a {SHEET_PROXY_VERTICES:,}-vertex proxy of it, much faster")
    return None


@dataclass
class Setup:
    """A simulation made concrete for one mesh; every array is per vertex, in metres and seconds.

    `frames` counts frame 0 (the initial state), so a run makes frames - 1 steps.
    """
    rest: np.ndarray
    faces: np.ndarray
    x0: np.ndarray
    v0: np.ndarray
    dt: float
    frames: int
    gravity: np.ndarray
    material: Material
    pin_weight: np.ndarray
    pin_targets: np.ndarray | None = None  # [T,N,3]; None: pins hold frame-0 positions
    accel_table: np.ndarray | None = None  # [T,N,3] explicit per-frame accelerations
    force_terms: list = field(default_factory=list)  # (weights [N], accel [3], profile)
    floor_z: float | None = None
    floor_friction: float = FLOOR_FRICTION  # the floor's Coulomb coefficient
    vertex_mass: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    colliders: list[Collider] = field(default_factory=list)  # collision meshes (engine.core.colliders)
    # force fields (engine.core.fields), evaluated by the engines every step on the deformed surface
    effectors: list[Effector] = field(default_factory=list)
    # the learned engine's level of detail: how many handles its subspace gets (`DETAILS`)
    detail: str = "medium"
    # a cloth's self-collision thickness in metres (scene key "self_collision"); None: off
    self_collision: float | None = None
    # the Coulomb coefficient between a cloth's layers where they touch (with self_collision)
    self_friction: float = SELF_FRICTION

    @property
    def num_vertices(self) -> int:
        return len(self.rest)

    def pin_target(self, frame: int) -> np.ndarray:
        if self.pin_targets is None:
            return self.x0
        return self.pin_targets[min(frame, len(self.pin_targets) - 1)]

    def external_accel(self, frame: int) -> np.ndarray:
        """Acceleration per vertex applied from `frame` to `frame + 1` (m/s^2)."""
        if self.accel_table is not None:
            return self.accel_table[min(frame, len(self.accel_table) - 1)]
        a = np.zeros((self.num_vertices, 3))
        for weights, accel, profile in self.force_terms:
            s = profile_value(profile, frame, self.dt)
            if s != 0.0:
                a += s * weights[:, None] * np.asarray(accel)[None, :]
        return a

    def accel_frames(self) -> np.ndarray:
        return np.stack([self.external_accel(t) for t in range(self.frames)]).astype(np.float32)

    def pin_target_frames(self) -> np.ndarray:
        return np.stack([self.pin_target(t) for t in range(self.frames)]).astype(np.float32)

    def to_sequence(self, positions: np.ndarray, meta: dict | None = None) -> Sequence:
        """Record this setup with its result as a `neurok.sequence/1`."""
        seq = Sequence(rest=self.rest.astype(np.float32), faces=self.faces.astype(np.int32),
                       positions=np.asarray(positions, np.float32), dt=self.dt,
                       gravity=np.asarray(self.gravity, np.float32), material=self.material.to_dict(),
                       external_accel=self.accel_frames()[:len(positions)], velocity0=self.v0.astype(np.float32),
                       pin_weight=self.pin_weight.astype(np.float32), floor_z=self.floor_z,
                       floor_friction=None if self.floor_z is None else self.floor_friction,
                       meta=dict(self.meta, **(meta or {})))
        if self.self_collision:             # the format has no field for it: meta carries it to a replay
            seq.meta["self_collision"] = float(self.self_collision)
            seq.meta["self_friction"] = float(self.self_friction)
        if self.pin_weight.any():
            seq.pin_target = self.pin_target_frames()[:len(positions)]  # a stopped run keeps fewer frames
        if self.vertex_mass is not None:
            seq.vertex_mass = self.vertex_mass.astype(np.float32)
        return seq
