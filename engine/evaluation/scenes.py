"""The evaluation scenes: meshes that are no procedural family (Blender primitives and the
bundled samples, `heldout.py`), each with a setup that makes it move the way users make meshes
move: dropped on a floor, poked, shaken by a pinned base, pushed while pinned, cloth in wind.
Also the pinned beam of the physical-quantity check (`physical.py`).
"""
from __future__ import annotations

import numpy as np

from ..core.formats import Mesh
from .heldout import blender_primitives, bundled_samples, bundled_scenes

DT = 1.0 / 24.0


def _scene(frames, preset, pins=(), forces=(), floor=None, velocity=(0.0, 0.0, 0.0), **material):
    scene = {"format": "neurok.scene/1", "frames": int(frames), "dt": DT, "gravity": [0.0, 0.0, -9.81],
             "material": dict({"preset": preset}, **material), "pins": list(pins), "forces": list(forces),
             "floor": floor, "initial": {"velocity": list(velocity)}}
    if preset == "cloth":           # as the add-on's cloth runs by default
        scene["self_collision"] = True
    return scene


def _box(lo, hi):
    return {"box": {"min": list(lo), "max": list(hi)}}


def _floor_below(mesh, gap=0.02):
    return {"z": float(np.asarray(mesh.vertices)[:, 2].min()) - gap}


def _whole(accel, profile):
    return {"select": _box((0, 0, 0), (1, 1, 1)), "accel": list(accel), "profile": profile}


def primitive_setups(mesh: Mesh, frames: int):
    """(title, scene) for one Blender primitive."""
    name = mesh.name
    if name in ("monkey", "uv_sphere"):
        return "dropped on the floor (jelly)", _scene(frames, "jelly", floor=_floor_below(mesh, 0.05), velocity=(0.3, 0.0, -1.0))
    if name == "cone":
        return "base pinned, shaken sideways at 2 Hz (rubber)", _scene(
            frames, "rubber", pins=[{"select": _box((0, 0, 0), (1, 1, 0.12)), "strength": 1.0}],
            forces=[_whole((20.0, 0.0, 0.0), {"type": "sine", "start": 0, "frequency": 2.0})])
    if name in ("torus", "ico_sphere"):
        return "poked from above on the floor (jelly)", _scene(
            frames, "jelly", floor=_floor_below(mesh, 0.0),
            forces=[{"select": {"sphere": {"center": [0.85 if name == "torus" else 0.5, 0.5, 1.0], "radius": 0.35}},
                     "accel": [0.0, 0.0, -150.0],
                     "profile": {"type": "impulse", "start": 4, "end": 6}}])
    if name == "cylinder":
        return "one end pinned, pushed sideways (rubber)", _scene(
            frames, "rubber", pins=[{"select": _box((0, 0, 0), (0.15, 1, 1)), "strength": 1.0}],
            forces=[_whole((0.0, 10.0, 0.0), {"type": "constant"})])
    if name == "grid":
        return "cloth pinned along one edge in sine wind", _scene(
            frames, "cloth", pins=[{"select": _box((0, 0, 0), (0.02, 1, 1)), "strength": 1.0}],
            forces=[_whole((0.0, 6.0, 0.0), {"type": "sine", "start": 0, "frequency": 0.8})])
    raise KeyError(name)


def hang_vertically(mesh: Mesh) -> Mesh:
    """A flat grid in the xy plane turned into the xz plane (a hanging flag)."""
    v = np.asarray(mesh.vertices, np.float64)
    return Mesh(np.stack([v[:, 0], v[:, 2], v[:, 1]], axis=1), np.asarray(mesh.faces), name=mesh.name)


# --------------------------------------------------------------------------- cloth on a table

def square_sheet(size=1.0, cells=30, height=0.55) -> Mesh:
    """A square sheet of `cells` x `cells` quads (alternating diagonals) at `height`, centred on the z axis."""
    t = np.linspace(-size / 2, size / 2, cells + 1)
    X, Y = np.meshgrid(t, t, indexing="ij")
    vertices = np.stack([X.ravel(), Y.ravel(), np.full(X.size, height)], axis=1)
    faces = []
    for i in range(cells):
        for j in range(cells):
            a, b, c, d = i * (cells + 1) + j, (i + 1) * (cells + 1) + j, (i + 1) * (cells + 1) + j + 1, i * (cells + 1) + j + 1
            faces += [[a, b, c], [a, c, d]] if (i + j) % 2 == 0 else [[a, b, d], [b, c, d]]
    return Mesh(vertices, np.array(faces, np.int32), name="sheet")


def box_collider(lo, hi, friction=0.5, thickness=0.01, name="table") -> dict:
    """A closed box as a `neurok.scene/1` collider entry (outward triangles)."""
    corners = [[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])]
    faces = []
    for a, b, c, d in ((0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)):
        faces += [[a, b, c], [a, c, d]]
    return {"name": name, "faces": faces, "vertices": corners, "friction": friction, "thickness": thickness}


DRAPE_TABLE = 0.5     # m, the drape scene's table side (its cloth: 1 m)


def drape_case(frames, size=1.0, cells=30, table=DRAPE_TABLE):
    """A square cloth dropped from 5 cm onto a smaller square table (a box Collision object) on the floor."""
    mesh = square_sheet(size, cells, height=table + 0.05)
    scene = _scene(frames, "cloth", floor={"z": 0.0})
    scene["colliders"] = [box_collider((-table / 2, -table / 2, 0.0), (table / 2, table / 2, table))]
    return mesh, scene


def overhang_tilt(x, rest, faces, table_half) -> float:
    """Mean angle (degrees, area-weighted) between the vertical and the triangles of a draped
    sheet that lie beyond the table's edge at rest: 0 where they hang straight down, 90 flat."""
    faces = np.asarray(faces)
    centre = np.asarray(rest)[faces].mean(axis=1)
    over = np.abs(centre[:, :2]).max(axis=1) > table_half * 1.08
    n = np.cross(x[faces[:, 1]] - x[faces[:, 0]], x[faces[:, 2]] - x[faces[:, 0]])
    area = np.linalg.norm(n, axis=1)
    tilt = np.degrees(np.arcsin(np.clip(np.abs(n[:, 2]) / np.maximum(area, 1e-12), 0.0, 1.0)))
    return float((tilt[over] * area[over]).sum() / max(area[over].sum(), 1e-12))


def evaluation_scenes(names, frames, cache_dir):
    """[(case name, title, Mesh, scene dict, source)] for the chosen case names, and notes on
    what could not be made. Names: the bundled scenes (toy_drop, jelly_poke, flag_wind) and the
    Blender primitives (monkey, cone, torus, cylinder, uv_sphere, ico_sphere, grid) and the
    cloth dropped on a table (drape)."""
    samples, scenes = bundled_samples(), bundled_scenes()
    sample_of = {"toy_drop": "soft_toy", "jelly_poke": "jelly", "flag_wind": "flag"}
    wanted_prims = [n for n in names if n not in sample_of and n != "drape"]
    prims, note = blender_primitives(cache_dir, wanted_prims) if wanted_prims else ({}, None)
    cases, notes = [], [note] if note else []
    for n in names:
        if n in sample_of:
            if n not in scenes or sample_of[n] not in samples:
                notes.append(f"{n}: bundled scene or sample missing")
                continue
            scene = dict(scenes[n], frames=int(frames))
            cases.append((n, f"bundled sample '{sample_of[n]}', scene {n}.json", samples[sample_of[n]], scene, "bundled"))
        elif n == "drape":
            mesh, scene = drape_case(frames)
            cases.append((n, "a square cloth dropped onto a smaller table (a box Collision object)", mesh, scene,
                          "procedural"))
        elif n in prims:
            mesh = hang_vertically(prims[n]) if n == "grid" else prims[n]
            title, scene = primitive_setups(mesh, frames)
            cases.append((n, f"Blender primitive '{n}': {title}", mesh, scene, "blender primitive"))
        elif not note:
            notes.append(f"{n}: unknown evaluation scene")
    return cases, notes


# --------------------------------------------------------------------------- a round ball (balance checks)

def uv_sphere(radius, rings=16, segments=32) -> Mesh:
    """Blender's UV sphere: rings of `segments` vertices between two poles."""
    theta = np.pi * np.arange(1, rings) / rings
    phi = 2 * np.pi * np.arange(segments) / segments
    ring = np.stack([np.outer(np.sin(theta), np.cos(phi)), np.outer(np.sin(theta), np.sin(phi)),
                     np.repeat(np.cos(theta)[:, None], segments, axis=1)], axis=-1).reshape(-1, 3)
    vertices = radius * np.concatenate([[[0, 0, 1]], ring, [[0, 0, -1]]])
    south = len(vertices) - 1
    faces = []
    for j in range(segments):
        k = (j + 1) % segments
        faces.append([0, 1 + j, 1 + k])
        faces.append([south, 1 + (rings - 2) * segments + k, 1 + (rings - 2) * segments + j])
        for i in range(rings - 2):
            a, b = 1 + i * segments, 1 + (i + 1) * segments
            faces += [[a + j, b + j, b + k], [a + j, b + k, a + k]]
    return Mesh(vertices, np.array(faces, np.int32), name="uv_sphere")



# --------------------------------------------------------------------------- the pinned beam

def beam_mesh(length=0.5, width=0.08, cells=(24, 4, 4)) -> Mesh:
    """A closed box surface [0,length] x [-w/2,w/2]^2, a structured triangle grid on each side,
    normals outward."""
    nx, ny, nz = cells
    size = np.array([length, width, width])
    lo = np.array([0.0, -width / 2, -width / 2])
    verts, faces, index = [], [], {}

    def vid(p):
        key = tuple(np.round(p, 9))
        if key not in index:
            index[key] = len(verts)
            verts.append(p)
        return index[key]

    n = np.array([nx, ny, nz])
    for axis in range(3):
        a, b = [k for k in range(3) if k != axis]
        for side in (0, 1):
            for i in range(n[a]):
                for j in range(n[b]):
                    quad = []
                    for di, dj in ((0, 0), (1, 0), (1, 1), (0, 1)):
                        p = lo.copy()
                        p[axis] += side * size[axis]
                        p[a] += (i + di) / n[a] * size[a]
                        p[b] += (j + dj) / n[b] * size[b]
                        quad.append(vid(p))
                    # orientation: outward normal along +axis on side 1, -axis on side 0
                    outward = (side == 1) == ((a, b) in ((0, 1), (1, 2), (2, 0)))
                    q = quad if outward else quad[::-1]
                    faces += [[q[0], q[1], q[2]], [q[0], q[2], q[3]]]
    return Mesh(np.array(verts), np.array(faces, np.int32), name="beam")


BEAM_STIFFNESS = 1.0e6          # Pa: a 0.5 m rubber-like beam ringing at about 2.5 Hz


def beam_scene(frames) -> dict:
    return _scene(frames, "rubber", pins=[{"select": _box((0, 0, 0), (0.02, 1, 1)), "strength": 1.0}],
                  stiffness=BEAM_STIFFNESS, damping=0.0, air_damping=0.0)   # only the integrator damps
