"""Held-out means held out: evaluation meshes that are no procedural family at all.

Shapes made by Blender's own primitive operators (monkey, cone, torus, cylinder, UV sphere, ico
sphere; a grid for cloth) and the bundled sample meshes. The primitives are built headless by
the `bpy` module in a child process (the engine itself never imports bpy), triangulated, scaled
to a 0.5 m longest side and kept as plain arrays in `<cache>/primitives_<hash>.npz`; without bpy they
are skipped, and the report says so. The cache file's name carries a hash of the recipes.

A copy kept in the repository (`data/eval/primitives_<hash>.npz`) is read before any other: the
evaluation's kept physics was made from exactly those meshes, and bpy does not triangulate the UV
sphere's quads the same way twice (its faces differ from build to build), so a fresh build would
miss the kept answers and move the figures.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from ..core.formats import Mesh, read_mesh

ROOT = Path(__file__).resolve().parent.parent.parent
SIZE = 0.5                      # longest side, metres
KEPT_PRIMITIVES = ROOT / "data" / "eval"     # the primitives the kept physics was made from

# name -> (operator call, subdivision cuts); the grid is the cloth
PRIMITIVES = {
    "monkey": ("bpy.ops.mesh.primitive_monkey_add()", 1),
    "cone": ("bpy.ops.mesh.primitive_cone_add(vertices=32, depth=2.0)", 3),
    "torus": ("bpy.ops.mesh.primitive_torus_add(major_segments=48, minor_segments=16)", 0),
    "cylinder": ("bpy.ops.mesh.primitive_cylinder_add(vertices=32, depth=2.0)", 3),
    "uv_sphere": ("bpy.ops.mesh.primitive_uv_sphere_add(segments=32, ring_count=16)", 0),
    "ico_sphere": ("bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=4)", 0),
    "grid": ("bpy.ops.mesh.primitive_grid_add(x_subdivisions=16, y_subdivisions=16, size=2.0)", 0),
}

_SCRIPT = r'''
import json, sys
import bpy, bmesh
import numpy as np
spec = json.loads(sys.argv[1])
out = {}
for name, (call, cuts) in spec.items():
    bpy.ops.wm.read_factory_settings(use_empty=True)
    eval(call)
    ob = bpy.context.active_object
    bm = bmesh.new()
    bm.from_mesh(ob.data)
    if cuts:
        bmesh.ops.subdivide_edges(bm, edges=bm.edges[:], cuts=cuts, use_grid_fill=True)
    bmesh.ops.triangulate(bm, faces=bm.faces[:])
    bm.verts.index_update()
    v = np.array([tuple(x.co) for x in bm.verts], dtype=np.float64)
    f = np.array([[x.index for x in face.verts] for face in bm.faces], dtype=np.int64)
    out[name + "_v"], out[name + "_f"] = v, f
    bm.free()
np.savez(sys.argv[2], **out)
'''


def blender_primitives(cache_dir, names=None, kept=KEPT_PRIMITIVES) -> tuple[dict, str | None]:
    """({name: Mesh}, note): the primitives, read from `kept` (a folder; None: not looked at) or
    built once with bpy and cached in `cache_dir`; note says why some are missing (None when all
    are there)."""
    names = list(names or PRIMITIVES)
    # the cache file is named by the operator calls that made it, so a changed recipe rebuilds
    key = hashlib.sha1(json.dumps(PRIMITIVES, sort_keys=True).encode()).hexdigest()[:10]
    cache = Path(cache_dir) / f"primitives_{key}.npz"
    if kept is not None and (Path(kept) / cache.name).is_file():
        cache = Path(kept) / cache.name
    have = {}
    if cache.is_file():
        with np.load(cache) as z:
            have = {n: (z[n + "_v"], z[n + "_f"]) for n in PRIMITIVES if n + "_v" in z.files}
    todo = [n for n in names if n not in have]
    note = None
    if todo:
        cache.parent.mkdir(parents=True, exist_ok=True)
        spec = {n: PRIMITIVES[n] for n in PRIMITIVES}
        tmp = cache.with_suffix(".tmp.npz")
        proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(spec), str(tmp)], capture_output=True,
                              text=True, timeout=600)
        if proc.returncode == 0 and tmp.is_file():
            tmp.replace(cache)
            with np.load(cache) as z:
                have = {n: (z[n + "_v"], z[n + "_f"]) for n in PRIMITIVES if n + "_v" in z.files}
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            note = f"Blender primitives not built (bpy: {tail[0][:160]})"
    meshes = {}
    for n in names:
        if n in have:
            v, f = have[n]
            meshes[n] = normalise(Mesh(v, f.astype(np.int32), name=n))
    return meshes, note


def normalise(mesh: Mesh, size=SIZE) -> Mesh:
    """Bounding box centred at the origin, longest side `size`."""
    v = np.asarray(mesh.vertices, np.float64)
    v = v - 0.5 * (v.min(axis=0) + v.max(axis=0))
    v = v * (size / max(float(np.ptp(v, axis=0).max()), 1e-12))
    return Mesh(v, np.asarray(mesh.faces), name=mesh.name)


def bundled_samples() -> dict:
    """{sample name: Mesh} of assets/samples/*.obj (the add-on's demo meshes)."""
    return {p.stem: read_mesh(str(p)) for p in sorted((ROOT / "assets" / "samples").glob("*.obj"))}


def bundled_scenes() -> dict:
    """{scene name: scene dict} of assets/scenes/*.json."""
    return {p.stem: json.loads(p.read_text()) for p in sorted((ROOT / "assets" / "scenes").glob("*.json"))}
