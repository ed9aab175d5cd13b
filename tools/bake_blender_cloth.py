"""Bake a family of cloth sequences with Blender's own cloth solver (bpy, headless) and write them
as `neurok.sequence/1` files plus an `index.json`, so the engine can learn from data it did not
simulate itself.

    python tools/bake_blender_cloth.py --out data/blender_cloth --sequences 36 --frames 48 --seed 0

One family ('blender_cloth'): a square grid (21 x 21 vertices, 1 m) hanging from a pin group.
Sequence i draws from `numpy.random.default_rng([seed, i])`: which part is pinned (cycling
through one edge, two corners, one corner, the middle of an edge, each on a random side), a tilt
(0-70 degrees) and turn of the sheet, in 60% of sequences an isometric cylindrical bend as the
shape of the rest (the sheet starts at rest) and tension / shear / bending within +-30% of
Blender's defaults. The last `--validation` sequences (default 6) are split 'validation', the rest 'train'.

Recorded as Blender's solver ran it (see `engine/training/importers.py`): dt = 1 / fps, the gravity the
solver applies (0.001 x fps^2 x scene gravity: 5.65 m/s^2 at 24 fps), SI material numbers from
`blender_cloth_material`, pins with their recorded positions, vertex masses; the raw Blender
settings go in `meta["blender"]`.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from engine.core.formats import Sequence, atomic_write_text, write_sequence
from engine.training.importers import blender_cloth_gravity, blender_cloth_material, sequence_from_point_cache

FAMILY = "blender_cloth"
PIN_MODES = ("edge", "two_corners", "one_corner", "edge_middle")
FPS = 24
SIZE = 1.0
RESOLUTION = 21
SCENE_GRAVITY = (0.0, 0.0, -9.81)
# Blender 5.0's cloth defaults (bpy.types.ClothSettings); the varied ones move within +-30%
BLENDER_DEFAULTS = {"quality": 5, "mass": 0.3, "air_damping": 1.0, "tension_stiffness": 15.0,
                    "compression_stiffness": 15.0, "shear_stiffness": 5.0, "bending_stiffness": 0.5,
                    "tension_damping": 5.0, "compression_damping": 5.0, "shear_damping": 5.0,
                    "bending_damping": 0.5, "pin_stiffness": 1.0, "bending_model": "ANGULAR"}
VARIATION = 0.3


# --------------------------------------------------------------------------- geometry (numpy only)

def grid(resolution: int = RESOLUTION, size: float = SIZE):
    """Flat square grid in the xy-plane centred at the origin: (vertices [N,3], quads [Q,4],
    triangles [2Q,3]); vertex (i, j) is index j * resolution + i."""
    u = np.linspace(-0.5 * size, 0.5 * size, resolution)
    xx, yy = np.meshgrid(u, u)  # yy varies along rows: index j * res + i
    verts = np.stack([xx.ravel(), yy.ravel(), np.zeros(resolution * resolution)], axis=1)
    quads = []
    for j in range(resolution - 1):
        for i in range(resolution - 1):
            a = j * resolution + i
            quads.append((a, a + 1, a + 1 + resolution, a + resolution))
    quads = np.asarray(quads, dtype=np.int64)
    tris = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    return verts, quads, tris


def pin_weights(mode: str, side: int, resolution: int) -> np.ndarray:
    """1 on the pinned vertices of one side (0: y min, 1: x max, 2: y max, 3: x min), else 0."""
    r = resolution
    w = np.zeros((r, r))  # [j, i]
    edge = [(0, i) for i in range(r)] if side == 0 else [(j, r - 1) for j in range(r)] if side == 1 else \
        [(r - 1, i) for i in range(r)] if side == 2 else [(j, 0) for j in range(r)]
    if side in (2, 3):
        edge = edge[::-1]
    patch = 2 if r >= 7 else 1  # a corner pin holds a 2x2 patch on fine grids
    if mode == "edge":
        picks = edge
    elif mode == "two_corners":
        picks = edge[:patch] + edge[-patch:]
    elif mode == "one_corner":
        picks = edge[:patch]
    elif mode == "edge_middle":
        half = 1 if r >= 7 else 0
        mid = len(edge) // 2
        picks = edge[mid - half: mid + half + 1]
    else:
        raise ValueError(f"unknown pin mode {mode!r}")
    for j, i in picks:
        w[j, i] = 1.0
    if mode in ("two_corners", "one_corner") and patch == 2:  # grow each corner inwards by one row
        inward = {0: (1, 0), 1: (0, -1), 2: (-1, 0), 3: (0, 1)}[side]
        for j, i in picks:
            w[j + inward[0], i + inward[1]] = 1.0
    return w.ravel()


def rotation(yaw: float, tilt: float, tilt_axis: float) -> np.ndarray:
    """Turn about z by `yaw`, then tilt by `tilt` about a horizontal axis at angle `tilt_axis`."""
    c, s = math.cos(yaw), math.sin(yaw)
    rz = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    a = np.array([math.cos(tilt_axis), math.sin(tilt_axis), 0.0])
    k = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
    rt = np.eye(3) + math.sin(tilt) * k + (1.0 - math.cos(tilt)) * (k @ k)
    return rt @ rz


def bend(flat: np.ndarray, curvature: float, angle: float) -> np.ndarray:
    """Roll the flat (z = 0) grid onto a cylinder of curvature `curvature` (1/m) whose axis lies
    in the plane at `angle`: isometric, so only bending, no stretch."""
    if abs(curvature) < 1e-9:
        return flat.copy()
    d = np.array([math.cos(angle), math.sin(angle), 0.0])     # arc direction
    s = flat @ d                                              # arc length from the centre line
    radius = 1.0 / curvature
    out = flat - s[:, None] * d[None]
    out += (radius * np.sin(s / radius))[:, None] * d[None]
    out[:, 2] += radius * (1.0 - np.cos(s / radius))
    return out


def plan_sequence(seed: int, index: int) -> dict:
    """Everything random about sequence `index` (numpy only: the same plan on any machine)."""
    rng = np.random.default_rng([seed, index])
    settings = dict(BLENDER_DEFAULTS)
    for key in ("tension_stiffness", "shear_stiffness", "bending_stiffness"):
        settings[key] = float(BLENDER_DEFAULTS[key] * (1.0 + rng.uniform(-VARIATION, VARIATION)))
    settings["compression_stiffness"] = settings["tension_stiffness"]
    return {"pin_mode": PIN_MODES[index % len(PIN_MODES)], "pin_side": int(rng.integers(4)),
            "yaw": float(rng.uniform(0.0, 2.0 * math.pi)), "tilt": float(math.radians(rng.uniform(0.0, 70.0))),
            "tilt_axis": float(rng.uniform(0.0, 2.0 * math.pi)),
            "curvature": float(rng.uniform(-1.5, 1.5)) if rng.random() < 0.6 else 0.0,
            "bend_angle": float(rng.uniform(0.0, math.pi)), "settings": settings}


def posed(plan: dict, resolution: int, size: float = SIZE):
    """(rest = start [N,3]: bent, then tilted and turned; triangles, quads, pin weights). The
    bend is a shape of the rest: the sheet starts at rest, pre-curved, and falls under gravity."""
    flat, quads, tris = grid(resolution, size)
    r = rotation(plan["yaw"], plan["tilt"], plan["tilt_axis"])
    rest = bend(flat, plan["curvature"], plan["bend_angle"]) @ r.T
    return rest, tris, quads, pin_weights(plan["pin_mode"], plan["pin_side"], resolution)


# --------------------------------------------------------------------------- Blender

def bake_in_blender(start, quads, weights, settings: dict, frames: int, fps: int = FPS,
                    gravity=SCENE_GRAVITY) -> np.ndarray:
    """Run Blender's cloth solver from `start` (also its rest shape) with the vertices of
    weight > 0 in the pin group; returns the evaluated world positions [frames, N, 3].

    (A flat rest under a bent start would need `ClothSettings.rest_shape_key`, which had no effect
    in bpy 5.0.1 headless: a rest key of 0.8x the size did not change the bake at all.)"""
    import bpy  # only here: the rest of the module works without Blender

    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.fps, scene.render.fps_base = int(fps), 1.0
    scene.gravity, scene.use_gravity = tuple(gravity), True
    scene.frame_start, scene.frame_end = 1, frames
    mesh = bpy.data.meshes.new("cloth")
    mesh.from_pydata([tuple(map(float, v)) for v in start], [], [tuple(map(int, q)) for q in quads])
    mesh.update()
    obj = bpy.data.objects.new("cloth", mesh)
    scene.collection.objects.link(obj)
    pinned = [int(i) for i in np.nonzero(weights > 0)[0]]
    group = obj.vertex_groups.new(name="pin")
    for i in pinned:
        group.add([i], float(weights[i]), "REPLACE")
    mod = obj.modifiers.new("Cloth", "CLOTH")
    cs = mod.settings
    for key, value in settings.items():
        setattr(cs, key, value)
    cs.vertex_group_mass = "pin"
    mod.point_cache.frame_start, mod.point_cache.frame_end = 1, frames
    n = len(start)
    out = np.empty((frames, n, 3), dtype=np.float32)
    buf = np.empty(n * 3, dtype=np.float32)
    for f in range(1, frames + 1):
        scene.frame_set(f)
        evaluated = obj.evaluated_get(bpy.context.evaluated_depsgraph_get()).data
        if len(evaluated.vertices) != n:
            raise RuntimeError(f"Blender's evaluated mesh has {len(evaluated.vertices)} vertices, expected {n}")
        evaluated.vertices.foreach_get("co", buf)
        out[f - 1] = buf.reshape(n, 3)  # object at the origin, unrotated: local = world
    bpy.ops.wm.read_factory_settings(use_empty=True)  # free the bake
    return out


def make_sequence(seed: int, index: int, frames: int = 48, resolution: int = RESOLUTION, split: str = "train",
                  fps: int = FPS) -> tuple[Sequence, dict]:
    """Plan, bake and record sequence `index`; returns (Sequence, index entry)."""
    plan = plan_sequence(seed, index)
    rest, tris, quads, weights = posed(plan, resolution)
    t0 = time.perf_counter()
    positions = bake_in_blender(rest, quads, weights, plan["settings"], frames, fps)
    seconds = time.perf_counter() - t0
    if not np.all(np.isfinite(positions)):
        raise RuntimeError(f"Blender's cloth produced NaN in sequence {index}")
    n = len(rest)
    spacing = SIZE / (resolution - 1)
    settings = plan["settings"]
    material = blender_cloth_material(settings, fps, spring_length=spacing, area_per_vertex=SIZE * SIZE / n)
    gravity = blender_cloth_gravity(SCENE_GRAVITY, fps)
    meta = {"source": "tools/bake_blender_cloth.py", "simulator": "blender cloth (bpy 5.0)", "seed": seed,
            "index": index, "family": FAMILY, "scenario": plan["pin_mode"], "split": split,
            "blender": {"settings": settings, "fps": fps, "scene_gravity": list(SCENE_GRAVITY),
                        "grid": {"resolution": resolution, "size": SIZE}, "pin_group": "pin"},
            "pose": {k: plan[k] for k in ("pin_side", "yaw", "tilt", "tilt_axis", "curvature", "bend_angle")},
            "units": "gravity = the solver's 0.001 x fps^2 x scene gravity; material = engine.training.importers.blender_cloth_material"}
    seq = sequence_from_point_cache(rest, tris, positions, 1.0 / fps, gravity, material, pin_weight=weights,
                                    meta=meta, vertex_mass=settings["mass"], where=f"{FAMILY} sequence {index}")
    entry = {"file": f"seq_{index:05d}.npz", "family": FAMILY, "scenario": plan["pin_mode"], "split": split,
             "kind": "cloth", "vertices": n, "frames": frames, "seconds": round(seconds, 3)}
    return seq, entry


def bake_dataset(out, sequences: int = 36, frames: int = 48, seed: int = 0, resolution: int = RESOLUTION,
                 validation: int = 6, quiet: bool = False) -> dict:
    """Bake `sequences` sequences into `out` (the last `validation` are split 'validation');
    writes index.json after each one. Returns a summary with the time taken."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    entries = []
    for k in range(sequences):
        split = "validation" if k >= sequences - validation else "train"
        seq, entry = make_sequence(seed, k, frames, resolution, split)
        write_sequence(out / entry["file"], seq)
        entries.append(entry)
        body = {"format": "neurok.dataset/1", "seed": seed, "sequences": entries, "total": sequences,
                "shard": "0/1", "heldout_families": [], "source": "tools/bake_blender_cloth.py"}
        atomic_write_text(out / "index.json", json.dumps(body, indent=1))
        if not quiet:
            print(f"  {entry['file']} {split:10s} {entry['scenario']:12s} {entry['seconds']:.2f} s", flush=True)
    elapsed = time.perf_counter() - t0
    return {"out": str(out), "sequences": sequences, "frames": frames, "vertices": resolution * resolution,
            "seconds": round(elapsed, 2), "validation": min(validation, sequences)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--sequences", type=int, default=36)
    p.add_argument("--frames", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resolution", type=int, default=RESOLUTION, help="vertices per side (default 21)")
    p.add_argument("--validation", type=int, default=6, help="the last this many sequences are 'validation'")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.sequences < 1 or args.frames < 2 or args.resolution < 3 or not 0 <= args.validation <= args.sequences:
        print("error: need --sequences >= 1, --frames >= 2, --resolution >= 3, 0 <= --validation <= --sequences",
              file=sys.stderr)
        return 2
    summary = bake_dataset(args.out, args.sequences, args.frames, args.seed, args.resolution, args.validation,
                           args.quiet)
    print(f"baked {summary['sequences']} sequences ({summary['vertices']} vertices, {summary['frames']} frames) "
          f"in {summary['seconds']:.1f} s -> {summary['out']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
