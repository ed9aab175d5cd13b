"""The simulated body: what comes before NeuROK in the modifier stack, with its vertex-group weights,
its world matrix every frame, and (when anything moves) the positions of the body and of the
moving collision objects every frame."""
from __future__ import annotations

from dataclasses import dataclass, field

import bpy
import numpy as np

from ..animation import maybe_animated, moves, sample_frames
from ..mesh_data import evaluated_world_arrays, matrix_np, mesh_arrays, transform, vertex_group_weights
from ..objects import UserError
from ..stack import InputStack, deforms_over_time, evaluated_input, needs_evaluation
from .colliders import moving_colliders


@dataclass
class Body:
    rest: np.ndarray  # [N,3] world space at the first frame
    tris: np.ndarray  # [F,3]
    weights: dict  # vertex group name -> [N]
    matrix: np.ndarray  # object -> world at the first frame
    inverse: np.ndarray  # world -> object: [4,4], or [T,4,4] when the object moves
    evaluated: bool  # taken from the modifier stack / shape-key mix, not obj.data alone
    world_frames: list | None  # [N,3] world positions per frame when the body deforms or moves, else None
    sampled: dict  # followed object name -> {"matrix": [T,4,4], "strength": [T]}
    collider_frames: dict = field(default_factory=dict)  # moving collider -> [(vertices, triangles)] per frame
    static_colliders: dict = field(default_factory=dict)  # other collider -> (vertices, triangles)


class _Sampler:
    """Called by `sample_frames` at every visited frame `t`; keeps what the body needs."""

    def __init__(self, context, obj, frames, groups, per_frame, evaluated, col_obs):
        self.context, self.name, self.groups = context, obj.name, groups
        self.per_frame, self.evaluated = per_frame, evaluated
        self.matrices = np.empty((frames, 4, 4))
        self.world_frames = [] if per_frame else None
        self.moving = moving_colliders(col_obs)
        self.collider_frames = {ob.name: [] for ob in self.moving}
        self.static_names = [ob.name for ob in col_obs if ob.name not in self.collider_frames]
        self.static_colliders, self.first = {}, {}

    def __call__(self, t: int) -> None:
        ob = bpy.data.objects[self.name]
        self.matrices[t] = matrix_np(ob.matrix_world)
        if t == 0 or self.per_frame:
            if self.evaluated:
                co, tris, w = evaluated_input(self.context, ob, self.groups)
            else:
                (co, tris), w = mesh_arrays(ob), None
            if t == 0:
                self.first.update(co=co, tris=tris, weights=w)
            if self.per_frame:
                self.world_frames.append(transform(co, self.matrices[t]))
        for c in self.moving:
            self.collider_frames[c.name].append(evaluated_world_arrays(self.context, bpy.data.objects[c.name]))
        if t == 0:
            for name in self.static_names:
                self.static_colliders[name] = evaluated_world_arrays(self.context, bpy.data.objects[name])


def sample_body(context, obj, start: int, frames: int, groups, followed, col_obs) -> Body:
    """The body over the frame range, and the world matrix (and field strength) of the `followed` objects."""
    evaluated = needs_evaluation(obj)
    moving = moves(obj)
    per_frame = moving or (evaluated and deforms_over_time(obj))
    s = _Sampler(context, obj, frames, groups, per_frame, evaluated, col_obs)
    with InputStack(obj):
        sampled = sample_frames(context, start, frames, followed, s, always=per_frame or bool(s.moving))
    co, tris = s.first["co"], s.first["tris"]
    if len(co) == 0 or len(tris) == 0:
        raise UserError(f"What comes before NeuROK in the modifier stack of '{obj.name}' has no faces to simulate.")
    weights = vertex_group_weights(obj, groups) if s.first["weights"] is None else s.first["weights"]
    matrices = s.matrices
    if not per_frame and not s.moving and not any(maybe_animated(bpy.data.objects[n]) for n in followed
                                                  if n in bpy.data.objects):
        matrices[:] = matrices[0]  # visited once only
    matrix = matrices[0]
    if np.abs(np.linalg.det(matrices[:, :3, :3])).min() < 1e-12:
        raise UserError(f"'{obj.name}' has zero scale on some axis; fix its transform first.")
    inverse = np.linalg.inv(matrices) if moving else np.linalg.inv(matrix)
    world_frames = s.world_frames
    if per_frame and max(np.abs(w - world_frames[0]).max() for w in world_frames) < 1e-9:
        world_frames = None  # nothing actually moved
    return Body(rest=transform(co, matrix), tris=tris, weights=weights, matrix=matrix, inverse=inverse,
                evaluated=evaluated, world_frames=world_frames, sampled=sampled,
                collider_frames=s.collider_frames, static_colliders=s.static_colliders)
