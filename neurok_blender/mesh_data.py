"""Blender data -> numpy arrays: vertex positions, triangles, vertex-group weights, matrices."""
from __future__ import annotations

import zlib

import numpy as np

from .objects import UserError


def mesh_arrays(obj) -> tuple[np.ndarray, np.ndarray]:
    """(vertex positions [N,3] float64 object space, triangles [F,3] int64) of the undeformed mesh."""
    return mesh_data_arrays(obj.data)


def mesh_data_arrays(me) -> tuple[np.ndarray, np.ndarray]:
    """(vertex positions [N,3] float64, triangles [F,3] int64) of a Mesh datablock (an evaluated one too)."""
    co = np.empty(len(me.vertices) * 3, dtype=np.float32)
    me.vertices.foreach_get("co", co)
    me.calc_loop_triangles()
    tris = np.empty(len(me.loop_triangles) * 3, dtype=np.int32)
    me.loop_triangles.foreach_get("vertices", tris)
    return co.reshape(-1, 3).astype(np.float64), tris.reshape(-1, 3).astype(np.int64)


def topology_hash(me) -> str:
    """Vertex count and a CRC of the connectivity: cheap, and changes when vertices/edges/faces change."""
    loops = np.empty(len(me.loops), dtype=np.int32)
    me.loops.foreach_get("vertex_index", loops)
    totals = np.empty(len(me.polygons), dtype=np.int32)
    me.polygons.foreach_get("loop_total", totals)
    edges = np.empty(len(me.edges) * 2, dtype=np.int32)
    me.edges.foreach_get("vertices", edges)
    h = zlib.crc32(loops.tobytes())
    h = zlib.crc32(totals.tobytes(), h)
    h = zlib.crc32(edges.tobytes(), h)
    return f"{len(me.vertices)}:{h:08x}"


def matrix_np(matrix) -> np.ndarray:
    return np.array([list(row) for row in matrix], dtype=np.float64)


def transform(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Apply a 4×4 matrix to points [..., 3]."""
    return points @ matrix[:3, :3].T + matrix[:3, 3]


def vertex_group_weights(obj, names, mesh=None) -> dict[str, np.ndarray]:
    """Weights [N] of the named vertex groups (0 where a vertex is not in the group), read from `mesh`
    (obj.data unless given: the evaluated mesh when modifiers come before NeuROK)."""
    mesh = obj.data if mesh is None else mesh
    names = [n for n in dict.fromkeys(names) if n]
    if not names:
        return {}
    index = {}
    for name in names:
        vg = obj.vertex_groups.get(name)
        if vg is None:
            raise UserError(f"'{obj.name}' has no vertex group named '{name}'.")
        index[vg.index] = name
    out = {name: np.zeros(len(mesh.vertices)) for name in names}
    for v in mesh.vertices:
        for g in v.groups:
            name = index.get(g.group)
            if name is not None:
                out[name][v.index] = g.weight
    return out


def evaluated_world_arrays(context, ob) -> tuple[np.ndarray, np.ndarray]:
    """World-space evaluated vertices and triangles of a collision object at the current frame."""
    dg = context.evaluated_depsgraph_get()
    ev = ob.evaluated_get(dg)
    me = ev.to_mesh()
    try:
        co, tris = mesh_data_arrays(me)
    finally:
        ev.to_mesh_clear()
    return transform(co, matrix_np(ev.matrix_world)), tris
