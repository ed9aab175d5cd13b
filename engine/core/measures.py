"""Plausibility measures of a deformed mesh against its rest shape: what a viewer sees first.

Shared by the runtime guard (a frame that breaks a limit is not handed to the user) and by the
evaluation (reported beside every distance), so both judge a frame the same way.

- volume ratio: enclosed volume / rest volume of a closed surface (negative: inside out);
- edge strain: |len/rest_len - 1| per edge, mean and max;
- flipped triangles: share of triangles whose normal turned against the body's rotation
  (the best-fit rotation of the whole frame is removed first, so a tumbling body is not flagged);
- growth: bounding-box diagonal of the frame, best-fit rotation removed, over the rest diagonal.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .geometry import bbox_diagonal, face_columns, face_cross, face_edges, is_closed, mesh_volume

ROTATION_POINTS = 2_000   # points the best-fit rotation is taken from (a fixed sample)


def unique_edges(faces) -> np.ndarray:
    return face_edges(faces)[0]


def best_rotation(rest, x, rest_centred=False) -> np.ndarray:
    """Rotation R minimising |R (rest - c_rest) - (x - c_x)| (Kabsch), det R = +1.
    `rest_centred`: rest has its centroid at the origin already (x's centroid then drops out)."""
    a = rest if rest_centred else rest - rest.mean(axis=0)
    u, _, vt = np.linalg.svd(x.T @ a)
    R = u @ vt
    if np.linalg.det(R) < 0:
        R = R - 2.0 * np.outer(u[:, 2], vt[2])
    return R


@dataclass
class MeshMeasures:
    """Precomputed rest quantities of one mesh; `frame(x)` measures a deformed frame."""
    rest: np.ndarray
    faces: np.ndarray
    max_elements: int | None = None   # strain and flips on at most this many edges / triangles (a fixed sample)
    with_volume: bool = True          # False: no enclosed volume (it needs every triangle)
    edges: np.ndarray | None = None   # the mesh's unique edges, if the caller has them already

    def __post_init__(self):
        self.rest = np.asarray(self.rest, np.float64)
        self.faces = np.asarray(self.faces, np.int64)
        self.all_faces = self.faces                    # the volume always uses every triangle
        if self.edges is None:
            self.edges = unique_edges(self.faces) if len(self.faces) else np.zeros((0, 2), np.int64)
        self.all_edges = self.edges
        if self.max_elements is not None:
            rng = np.random.default_rng(0)
            if len(self.edges) > self.max_elements:
                self.edges = self.edges[np.sort(rng.choice(len(self.edges), self.max_elements, replace=False))]
            if len(self.faces) > self.max_elements:
                self.faces = self.faces[np.sort(rng.choice(len(self.faces), self.max_elements, replace=False))]
        n = len(self.rest)
        self.points = np.arange(n) if self.max_elements is None or n <= self.max_elements else \
            np.sort(np.random.default_rng(1).choice(n, self.max_elements, replace=False))   # rotation, growth
        self.rest_lengths = np.linalg.norm(self.rest[self.edges[:, 1]] - self.rest[self.edges[:, 0]], axis=1)
        self.edge_ok = self.rest_lengths > 1e-12 * max(self.diagonal, 1e-30)
        self.closed = self.with_volume and bool(len(self.all_faces)) and is_closed(self.all_faces)
        self.rest_lengths = self.rest_lengths[self.edge_ok]
        self.edges = self.edges[self.edge_ok]
        self.edge_ends = tuple(np.ascontiguousarray(self.edges[:, j]) for j in range(2))
        self.face_corners, self.all_corners = face_columns(self.faces), face_columns(self.all_faces)
        self.rest_volume = mesh_volume(self.rest, self.all_faces, self.all_corners) if self.closed else 0.0
        self.rest_normals = self._normals(self.rest)
        self.normal_ok = np.linalg.norm(self.rest_normals, axis=1) > 0
        self.rotation_points = self.points if len(self.points) <= ROTATION_POINTS else \
            self.points[np.random.default_rng(2).choice(len(self.points), ROTATION_POINTS, replace=False)]
        self._rotation_rest = self.rest[self.rotation_points] - self.rest[self.rotation_points].mean(axis=0)
        self._sampled_rotation_points = np.searchsorted(self.points, self.rotation_points)
        self._all_points = len(self.points) == n
        self._rest_normals_ok = np.ascontiguousarray(self.rest_normals[self.normal_ok].T)   # [3,F]
        self._all_normals_ok = bool(np.all(self.normal_ok))

    @property
    def diagonal(self) -> float:
        if not hasattr(self, "_diagonal"):
            self._diagonal = bbox_diagonal(self.rest)
        return self._diagonal

    def _normals(self, x):
        f = self.faces
        if not len(f):
            return np.zeros((0, 3))
        return face_cross(x, self.face_corners).T

    def rotation(self, x, sampled=False) -> np.ndarray:
        """The frame's best-fit rotation (from a fixed sample of ROTATION_POINTS points; `sampled`:
        x holds only `self.points`)."""
        x = np.take(np.asarray(x, np.float64), self._sampled_rotation_points if sampled else self.rotation_points, axis=0)
        return best_rotation(self._rotation_rest, x, rest_centred=True)

    def volume_ratio(self, x) -> float | None:
        if not self.closed or abs(self.rest_volume) < 1e-30:
            return None
        return mesh_volume(x, self.all_faces, self.all_corners) / self.rest_volume

    def edge_strain(self, x) -> np.ndarray:
        x = np.asarray(x, np.float64)
        d = np.take(x, self.edge_ends[1], axis=0) - np.take(x, self.edge_ends[0], axis=0)
        return np.abs(np.sqrt(np.einsum("ij,ij->i", d, d)) / self.rest_lengths - 1.0)

    def flipped_share(self, x, R=None) -> float:
        """Share of triangles whose normal points against the rigidly rotated rest normal
        (`R`: the frame's best-fit rotation, when the caller has it already)."""
        if not len(self.faces):
            return 0.0
        x = np.asarray(x, np.float64)
        R = self.rotation(x) if R is None else R
        if not self._rest_normals_ok.shape[1]:
            return 0.0
        n = face_cross(x, self.face_corners)          # [3,F]: each normal turned back by R
        if not self._all_normals_ok:
            n = n[:, self.normal_ok]
        return float(np.count_nonzero(np.einsum("if,if->f", R.T @ n, self._rest_normals_ok) < 0.0)) / n.shape[1]

    def growth(self, x, R=None) -> float:
        """Bounding-box diagonal of the frame in the body's own (best-fit rotated) frame, over rest."""
        x = np.asarray(x, np.float64)
        if not self._all_points:
            x = np.take(x, self.points, axis=0)
        R = self.rotation(x, sampled=not self._all_points) if R is None else R
        local = R.T @ x.T                             # [3,n]: rows contiguous, so the extents are quick
        return float(np.linalg.norm(local.max(axis=1) - local.min(axis=1))) / self.diagonal

    def frame(self, x) -> dict:
        """All measures of one frame as plain numbers (volume_ratio None for open surfaces)."""
        x = np.asarray(x, np.float64)
        strain = self.edge_strain(x)
        R = self.rotation(x)   # one fit serves both rotation-free measures
        return {"volume_ratio": self.volume_ratio(x),
                "edge_strain_mean": float(strain.mean()) if len(strain) else 0.0,
                "edge_strain_max": float(strain.max()) if len(strain) else 0.0,
                "flipped_share": self.flipped_share(x, R),
                "growth": self.growth(x, R)}
