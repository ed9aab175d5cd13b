"""The coarse sheet the full-space layer iterates on when the mesh is finer than it needs.

The layer's iterations cost in proportion to the vertices, and on a fine sheet they converge less
(its springs are stiffer against a vertex's inertia): on every vertex the bench's sheet costs 161 ms
a frame at 10k vertices and 1.8 s at 100k, on its proxy 45 ms at either (`neurok bench`), and a
10k flag's rollout is no further from the reference's on its proxy (docs/DESIGN_NOTES.md,
"Sheets"). At medium detail a sheet of more than `PROXY_VERTICES` vertices takes its layer on a
coarser triangulation of itself
(`core.coarse_mesh.coarsen`: a subset of its own vertices, about evenly spread, border, corners and
pins kept), the way an artist simulates a proxy and binds the render mesh to it; every fine vertex
follows the coarse triangle it lies on (`core.coarse_mesh.Embedding`). The latent step still runs
on the whole mesh and predicts the coarse vertices' move; masses and painted forces are carried
to the coarse vertices by the embedding's weights, so the coarse sheet weighs what the fine one
does and feels the same pushes. Folds are as fine as the coarse sheet's edges (about 1/45 of a
square sheet's side at 2,000 vertices). High detail iterates on the full mesh.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.coarse_mesh import Embedding, coarsen
from ..core.memo import MeshMemo
from ..core.setup import SHEET_PROXY_VERTICES
from .sheet_layer import vertex_masses

PROXY_VERTICES = SHEET_PROXY_VERTICES     # the layer's mesh at medium detail, at most (high: the full mesh)

_COARSE = MeshMemo()        # (kept vertices, faces, embedding) per mesh and pins: seconds at 100k vertices


def proxy_wanted(setup) -> bool:
    """Whether the layer of this sheet runs on a coarser proxy: at medium detail above `PROXY_VERTICES`."""
    return setup.detail == "medium" and setup.num_vertices > PROXY_VERTICES


class SheetProxy:
    """A sheet's coarse proxy: its vertices `keep` (indices into the sheet's), the proxy's `setup`
    (what the layer is built on), and the maps between the two."""

    def __init__(self, setup, vertices: int = PROXY_VERTICES):
        pinned = np.asarray(setup.pin_weight) > 0
        self.keep, faces, self.embedding = _COARSE.get(
            setup.rest, setup.faces, (vertices, pinned.tobytes()),
            lambda rest, f: _coarse_sheet(rest, f, vertices, pinned))
        self.setup = proxy_setup(setup, self.keep, faces, self.embedding)

    @property
    def num_vertices(self) -> int:
        return len(self.keep)

    def restrict(self, x) -> np.ndarray:
        """The proxy's vertices of fine per-vertex values [N,3] -> [P,3]."""
        return np.asarray(x, dtype=np.float64)[self.keep]

    def positions(self, x_proxy) -> np.ndarray:
        """The fine sheet's vertices [N,3] on the proxy at `x_proxy` [P,3]."""
        return self.embedding.positions(x_proxy)


def _coarse_sheet(rest, faces, vertices, pinned):
    keep, coarse_faces = coarsen(rest, faces, vertices, pinned)
    return keep, coarse_faces, Embedding(rest, keep, coarse_faces)


def proxy_setup(setup, keep, faces, embedding):
    """The `Setup` of the proxy: the fine sheet's vertices `keep` with the coarse `faces`, its mass
    and painted accelerations carried over by the embedding (force = mass x acceleration, summed),
    pins, targets, colliders, force fields and the rest as the fine sheet's."""
    mass = vertex_masses(setup)
    proxy_mass = embedding.transfer(mass)

    def carried(per_vertex):     # an acceleration or a force's weight [N] or [N,3] -> per proxy vertex
        a = np.asarray(per_vertex, np.float64)
        shape = (-1,) + (1,) * (a.ndim - 1)
        return embedding.transfer(mass.reshape(shape) * a) / proxy_mass.reshape(shape)

    force_terms = [(carried(w), accel, profile) for w, accel, profile in setup.force_terms]
    accel_table = None if setup.accel_table is None else np.stack([carried(a) for a in setup.accel_table])
    return replace(setup, rest=np.asarray(setup.rest, np.float64)[keep], faces=faces,
                   x0=np.asarray(setup.x0, np.float64)[keep], v0=np.asarray(setup.v0, np.float64)[keep],
                   pin_weight=np.asarray(setup.pin_weight, np.float64)[keep],
                   pin_targets=None if setup.pin_targets is None else np.asarray(setup.pin_targets)[:, keep],
                   accel_table=accel_table, force_terms=force_terms, vertex_mass=proxy_mass)
