"""Foreign 4D data -> `neurok.sequence/1`: point caches (PC2, MDD) and Blender cloth bakes.

The engine learns from any recorded motion whose forces are known well enough: here only gravity
and pins (DESIGN.md section 3, "Imported observations"). Everything else the recording went
through (collisions, wind, a solver's own damping) is left for the learned potential and the
damping numbers to absorb.

    seq = import_pc2("cloth.pc2", "cloth.obj", dt=1/24, material={"kind": "cloth", ...},
                     pin_weight=weights_of_the_pin_group)
    write_sequence("data/mine/seq_00000.npz", seq)

Blender's cloth solver does not run in SI units: it counts time in frames (whatever the scene's
frame rate) and scales gravity by 0.001, so at 24 fps a cloth falls with 0.001 * 9.81 * 24^2 =
5.65 m/s^2, not 9.81 (checked with bpy 5.0.1: the fall per frame does not change with the frame
rate). `blender_cloth_gravity` and `blender_cloth_material` turn Blender's settings into the
acceleration and the SI material numbers that reproduce what the solver does; the raw settings
belong in `meta` (`resolve_material` rejects keys it does not know).
"""
from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

from ..core.formats import FormatError, NeurokError, Sequence, atomic_write_bytes, read_mesh, read_pc2, write_sequence
from ..core.geometry import bbox_diagonal
from ..core.scene import resolve_material

MDD_HEADER = struct.Struct(">ii")
AXIS_MATCH = 1e-3       # frame 0 within this share of the diagonal of the rest mesh: same axes
AXIS_MISMATCH = 0.05    # ... farther than this with the identity: try Blender's Y-up export swap


# --------------------------------------------------------------------------- MDD point caches

def read_mdd(path) -> tuple[np.ndarray, np.ndarray]:
    """Read an MDD point cache (big-endian: int32 frames, int32 points, float32 times[frames],
    then float32 xyz per point per frame). Returns (positions [T,N,3] float32, times [T] s)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise FormatError(f"{path}: cannot read MDD file ({e.strerror or type(e).__name__})") from None
    if len(data) < MDD_HEADER.size:
        raise FormatError(f"{path}: too short for an MDD header ({len(data)} bytes)")
    frames, points = MDD_HEADER.unpack_from(data)
    if frames <= 0 or points <= 0:
        raise FormatError(f"{path}: bad MDD header ({frames} frames, {points} points)")
    expected = MDD_HEADER.size + 4 * frames + 12 * frames * points
    if len(data) != expected:
        raise FormatError(f"{path}: MDD file is {len(data)} bytes, header promises {expected} "
                          f"({frames} frames of {points} points; truncated, corrupt or not MDD)")
    times = np.frombuffer(data, dtype=">f4", count=frames, offset=MDD_HEADER.size).astype(np.float64)
    pos = np.frombuffer(data, dtype=">f4", offset=MDD_HEADER.size + 4 * frames).reshape(frames, points, 3)
    pos = pos.astype(np.float32)
    if not np.all(np.isfinite(pos)):
        raise FormatError(f"{path}: MDD positions contain NaN or infinite values")
    return pos, times


def write_mdd(path, positions, times=None, dt: float = 1.0 / 24.0) -> None:
    """Write frames [T,N,3] as an MDD point cache (Blender's Mesh Cache modifier reads it)."""
    pos = np.asarray(positions, dtype=np.float64)
    if pos.ndim != 3 or pos.shape[2] != 3 or pos.shape[0] < 1:
        raise FormatError(f"{path}: MDD positions must be [frames, points, 3], got {list(pos.shape)}")
    t = np.arange(pos.shape[0]) * dt if times is None else np.asarray(times, dtype=np.float64)
    if t.shape != (pos.shape[0],):
        raise FormatError(f"{path}: {t.size} frame times for {pos.shape[0]} frames")
    body = MDD_HEADER.pack(pos.shape[0], pos.shape[1]) + t.astype(">f4").tobytes() + pos.astype(">f4").tobytes()
    atomic_write_bytes(path, body)


# --------------------------------------------------------------------------- Blender cloth units

def blender_cloth_gravity(scene_gravity=(0.0, 0.0, -9.81), fps: float = 24.0, weight: float = 1.0,
                          use_gravity: bool = True) -> np.ndarray:
    """The acceleration (m/s^2) Blender's cloth solver applies: scene gravity x 0.001 x fps^2 x
    the Field Weights gravity factor (the solver's time unit is one frame)."""
    if not use_gravity:
        return np.zeros(3)
    return np.asarray(scene_gravity, dtype=np.float64) * 1e-3 * float(fps) ** 2 * float(weight)


def blender_cloth_material(settings: dict, fps: float, spring_length: float, area_per_vertex: float) -> dict:
    """SI material numbers (DESIGN.md section 4) that match Blender cloth `settings`
    (keys as in `bpy.types.ClothSettings`: mass, tension_stiffness, bending_stiffness,
    tension_damping, air_damping) on a mesh whose mean edge is `spring_length` (m) and whose
    area per vertex is `area_per_vertex` (m^2). From Blender's mass-spring solver, time in frames:
    a structural spring has k = tension / mean spring length (N/m per frame^2), an angular bending
    spring k = bending x edge x 0.1, spring damping c = tension damping, air drag
    0.01 x air viscosity per vertex. In seconds at `fps` frames per second:
        stiffness   = tension x fps^2 / spring_length         (membrane, N/m)
        density     = vertex mass / area per vertex           (kg/m^2)
        bending     = 0.1 x bending x spring_length x fps^2   (N m)
        damping     = tension damping / (k x fps)             (Rayleigh beta, s)
        air_damping = 0.01 x air viscosity x fps / mass       (Rayleigh alpha, 1/s)
    The mapping is approximate (a spring grid is not a continuum); what it gets right is the
    time scale, so a model trained on other data starts in the right range."""
    f2 = float(fps) ** 2
    mass = float(settings.get("mass", 0.3))
    tension = float(settings.get("tension_stiffness", 15.0))
    k_frame = tension / max(spring_length, 1e-9)
    return resolve_material({
        "kind": "cloth",
        "stiffness": k_frame * f2,
        "density": mass / max(area_per_vertex, 1e-12),
        "bending": 0.1 * float(settings.get("bending_stiffness", 0.5)) * spring_length * f2,
        "damping": float(settings.get("tension_damping", 5.0)) / (k_frame * float(fps)),
        "air_damping": 0.01 * float(settings.get("air_damping", 1.0)) * float(fps) / max(mass, 1e-9),
    }, "blender cloth material").to_dict()


# --------------------------------------------------------------------------- point cache -> sequence

def _axes_note(rest: np.ndarray, frame0: np.ndarray, where: str):
    """Blender's OBJ/PLY exporters write Y-up by default while point caches stay Z-up. When frame 0
    matches the rest mesh only after that swap, return the fixed rest and a note."""
    diag = bbox_diagonal(rest)
    gap = float(np.linalg.norm(frame0 - rest, axis=1).mean()) / diag
    if gap <= AXIS_MISMATCH:
        return rest, None
    swapped = np.stack([rest[:, 0], -rest[:, 2], rest[:, 1]], axis=1)  # Y-up file -> Blender's Z-up
    if float(np.linalg.norm(frame0 - swapped, axis=1).mean()) / diag <= AXIS_MATCH:
        return swapped, "rest mesh converted from Y-up to Z-up (it matched frame 0 only that way)"
    return rest, f"frame 0 is {gap:.0%} of the diagonal away from the rest mesh (a posed start, or other axes?)"


def sequence_from_point_cache(rest, faces, positions, dt: float, gravity, material: dict,
                              pin_weight=None, meta: dict | None = None, pin_target: str = "recorded",
                              vertex_mass=None, velocity0=None, floor_z: float | None = None,
                              where: str = "point cache") -> Sequence:
    """A sequence from recorded vertex positions [T,N,3] on a rest mesh, with only gravity and
    pins as forces. `pin_weight` [N] (0..1, e.g. Blender's pin vertex group) holds vertices towards
    their recorded positions (`pin_target="recorded"`, also right for animated pins) or their
    frame-0 positions (`"frame0"`). `velocity0`: None (at rest), "difference" (first frame
    difference) or an [N,3] array. `material` is checked by `resolve_material` (SI numbers; put
    anything else in `meta`)."""
    rest = np.asarray(rest, dtype=np.float64)
    faces = np.asarray(faces)
    pos = np.asarray(positions, dtype=np.float64)
    if rest.ndim != 2 or rest.shape[1] != 3 or len(rest) == 0:
        raise FormatError(f"{where}: the rest mesh must be [N,3] vertices, got {list(rest.shape)}")
    if pos.ndim != 3 or pos.shape[2] != 3 or pos.shape[0] < 1:
        raise FormatError(f"{where}: positions must be [frames, points, 3], got {list(pos.shape)}")
    n = len(rest)
    if pos.shape[1] != n:
        raise FormatError(f"{where}: the point cache has {pos.shape[1]} points per frame but the mesh has {n} vertices")
    if not np.all(np.isfinite(pos)):
        raise FormatError(f"{where}: positions contain NaN or infinite values")
    if faces.size and (faces.ndim != 2 or faces.shape[1] != 3 or faces.min() < 0 or faces.max() >= n):
        raise FormatError(f"{where}: faces must be [F,3] indices below {n}")
    try:
        dt = float(dt)
    except (TypeError, ValueError):
        raise FormatError(f"{where}: dt must be a positive number of seconds, got {dt!r}") from None
    if not (math.isfinite(dt) and dt > 0):
        raise FormatError(f"{where}: dt must be a positive number of seconds, got {dt!r}")
    g = np.asarray(gravity, dtype=np.float64).reshape(-1)
    if g.shape != (3,) or not np.all(np.isfinite(g)):
        raise FormatError(f"{where}: gravity must be three finite numbers (m/s^2)")
    mat = resolve_material(material, f"{where}: material").to_dict()
    seq = Sequence(rest=rest.astype(np.float32), faces=faces.astype(np.int32).reshape(-1, 3),
                   positions=pos.astype(np.float32), dt=float(dt), gravity=g.astype(np.float32), material=mat,
                   floor_z=floor_z, meta=dict(meta or {}))
    seq.meta.setdefault("source", "imported point cache")
    seq.meta.setdefault("forces", "gravity and pins only")
    if pin_weight is not None:
        w = np.asarray(pin_weight, dtype=np.float64).reshape(-1)
        if w.shape != (n,) or not np.all(np.isfinite(w)) or w.min() < 0:
            raise FormatError(f"{where}: pin_weight must hold {n} non-negative numbers, got shape {list(w.shape)}")
        seq.pin_weight = w.astype(np.float32)
        if w.any():
            if pin_target == "recorded":
                seq.pin_target = pos.astype(np.float32)
            elif pin_target == "frame0":
                seq.pin_target = np.repeat(pos[:1], len(pos), axis=0).astype(np.float32)
            else:
                raise FormatError(f"{where}: pin_target must be 'recorded' or 'frame0', got {pin_target!r}")
    if vertex_mass is not None:
        m = np.broadcast_to(np.asarray(vertex_mass, dtype=np.float64), (n,))
        if not np.all(np.isfinite(m)) or m.min() <= 0:
            raise FormatError(f"{where}: vertex_mass must be positive")
        seq.vertex_mass = m.astype(np.float32)
    if isinstance(velocity0, str):
        if velocity0 != "difference":
            raise FormatError(f"{where}: velocity0 must be None, 'difference' or [N,3], got {velocity0!r}")
        v = (pos[1] - pos[0]) / dt if len(pos) > 1 else np.zeros_like(rest)
        seq.velocity0 = v.astype(np.float32)
    elif velocity0 is not None:
        v = np.asarray(velocity0, dtype=np.float64)
        if v.shape != (n, 3) or not np.all(np.isfinite(v)):
            raise FormatError(f"{where}: velocity0 must be [{n},3] finite numbers")
        seq.velocity0 = v.astype(np.float32)
    return seq


def _cache_and_mesh(cache_positions, cache_path, mesh_path, fix_axes):
    mesh = read_mesh(mesh_path)
    n_cache, n_mesh = cache_positions.shape[1], len(mesh.vertices)
    if n_cache != n_mesh:
        raise FormatError(f"{cache_path}: the point cache has {n_cache} points but the mesh {Path(mesh_path).name} "
                          f"has {n_mesh} vertices (export both from the same object, before any modifier "
                          f"that adds or removes vertices)")
    rest, note = mesh.vertices, None
    if fix_axes:
        rest, note = _axes_note(mesh.vertices, cache_positions[0].astype(np.float64), str(cache_path))
    return mesh, rest, note


def import_pc2(pc2_path, mesh_path, dt: float | None, material: dict, gravity=(0.0, 0.0, -9.81),
               pin_weight=None, meta: dict | None = None, fix_axes: bool = True, **kwargs) -> Sequence:
    """A PC2 point cache on a rest mesh (OBJ, PLY or NPZ; `engine.formats.read_mesh`) as a
    sequence. `dt` None: one frame per PC2 sample at 24 fps divided by the sample rate."""
    positions, start, rate = read_pc2(pc2_path)
    if positions.shape[0] == 0:
        raise FormatError(f"{pc2_path}: the PC2 file holds no frames")
    mesh, rest, note = _cache_and_mesh(positions, pc2_path, mesh_path, fix_axes)
    if dt is None:
        dt = (rate if rate > 0 else 1.0) / 24.0
    info = {"source": "PC2", "file": Path(pc2_path).name, "mesh": Path(mesh_path).name,
            "pc2_start_frame": float(start), "pc2_sample_rate": float(rate)}
    if note:
        info["import_note"] = note
    return sequence_from_point_cache(rest, mesh.faces, positions, dt, gravity, material, pin_weight,
                                     dict(info, **(meta or {})), where=str(pc2_path), **kwargs)


def import_mdd(mdd_path, mesh_path, dt: float | None, material: dict, gravity=(0.0, 0.0, -9.81),
               pin_weight=None, meta: dict | None = None, fix_axes: bool = True, **kwargs) -> Sequence:
    """An MDD point cache on a rest mesh as a sequence. `dt` None: from the MDD frame times."""
    positions, times = read_mdd(mdd_path)
    mesh, rest, note = _cache_and_mesh(positions, mdd_path, mesh_path, fix_axes)
    if dt is None:
        steps = np.diff(times)
        if len(steps) == 0 or not np.all(steps > 0):
            raise FormatError(f"{mdd_path}: the MDD frame times do not give a time step; pass dt")
        dt = float(np.median(steps))
    info = {"source": "MDD", "file": Path(mdd_path).name, "mesh": Path(mesh_path).name}
    if note:
        info["import_note"] = note
    return sequence_from_point_cache(rest, mesh.faces, positions, dt, gravity, material, pin_weight,
                                     dict(info, **(meta or {})), where=str(mdd_path), **kwargs)


def import_point_cache(cache_path, mesh_path, dt, material, **kwargs) -> Sequence:
    """PC2 or MDD by the file's suffix."""
    suffix = Path(cache_path).suffix.lower()
    if suffix == ".pc2":
        return import_pc2(cache_path, mesh_path, dt, material, **kwargs)
    if suffix == ".mdd":
        return import_mdd(cache_path, mesh_path, dt, material, **kwargs)
    raise FormatError(f"{cache_path}: unknown point cache type '{suffix}' (use .pc2 or .mdd)")


# --------------------------------------------------------------------------- command line

def _read_weights(text, n):
    """Pin weights: a .npy/.txt file with one weight per vertex, or comma-separated indices."""
    if text is None:
        return None
    p = Path(text)
    if p.is_file():
        w = np.load(p) if p.suffix == ".npy" else np.loadtxt(p)
        return np.asarray(w, dtype=np.float64).reshape(-1)
    try:
        idx = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise NeurokError(f"--pins: '{text}' is neither a file nor comma-separated vertex indices") from None
    w = np.zeros(n)
    if idx and (min(idx) < 0 or max(idx) >= n):
        raise NeurokError(f"--pins: vertex index out of range for {n} vertices")
    w[idx] = 1.0
    return w


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.importers",
                                description="convert a PC2/MDD point cache + rest mesh to a neurok.sequence/1 file")
    p.add_argument("--cache", required=True, help=".pc2 or .mdd")
    p.add_argument("--mesh", required=True, help="rest mesh (.obj, .ply, .npz), same vertex order")
    p.add_argument("--out", required=True, help="output .npz")
    p.add_argument("--dt", type=float, help="seconds per frame (default: from the file, else 1/24)")
    p.add_argument("--material", default='{"preset": "cloth"}', help="material JSON (neurok.scene/1 keys)")
    p.add_argument("--gravity", default="0,0,-9.81", help="m/s^2 as x,y,z")
    p.add_argument("--pins", help="pin weights file (.npy/.txt, one per vertex) or comma-separated indices")
    p.add_argument("--split", default="train", choices=("train", "validation", "heldout"))
    args = p.parse_args(argv)
    try:
        material = json.loads(args.material)
        gravity = [float(x) for x in args.gravity.split(",")]
        n = read_mesh(args.mesh).vertices.shape[0]
        seq = import_point_cache(args.cache, args.mesh, args.dt, material, gravity=gravity,
                                 pin_weight=_read_weights(args.pins, n), meta={"split": args.split})
        write_sequence(args.out, seq)
    except (NeurokError, json.JSONDecodeError, ValueError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {seq.frames} frames of {seq.num_vertices} vertices, dt {seq.dt:.5g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
