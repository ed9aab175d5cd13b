"""Headless demo: three sample objects baked with NeuROK, saved, and rendered to a contact sheet.

    python -m neurok_blender.demo --out demo_out [--engine neurok|reference] [--frames N]

* soft_toy.obj (plush) dropped on a floor,
* flag.obj (cloth) pinned along its pole side in a gusty wind (a Wind field plus a sine force),
* jelly.obj (jelly) resting on the floor, poked sideways by a painted impulse force.

Missing sample OBJs are replaced by Blender primitives. Writes `neurok_demo.blend` and
`preview.png` (rows: objects, columns: frames, Workbench renders) into the output folder and
returns (and prints) the timings. Uses the learned engine when its checkpoint is present,
otherwise the reference simulator.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import bpy
import numpy as np
from mathutils import Matrix, Vector

from . import cache_files, jobs, mesh_data
from .engine_link import SAMPLES_DIR, NeurokError, formats, learned_engine_status

SPACING = 0.9


def _learned_available() -> bool:
    return learned_engine_status("") is None


def _ensure_registered() -> None:
    if not hasattr(bpy.types.Object, "neurok"):
        from . import register
        register()


def _import_obj(name: str, fallback):
    path = SAMPLES_DIR / f"{name}.obj"
    if path.is_file():
        before = set(bpy.data.objects)
        bpy.ops.wm.obj_import(filepath=str(path), forward_axis='Y', up_axis='Z')
        obj = next(o for o in bpy.data.objects if o not in before)
    else:
        fallback()
        obj = bpy.context.active_object
    obj.name = name
    # move the origin to the bounding-box centre so placement below is simple
    co = mesh_data.mesh_arrays(obj)[0]
    centre = 0.5 * (co.min(axis=0) + co.max(axis=0))
    obj.data.transform(Matrix.Translation(-Vector(centre)))
    return obj


def _group(obj, name: str, mask) -> None:
    vg = obj.vertex_groups.new(name=name)
    idx = [int(i) for i in np.nonzero(mask)[0]]
    vg.add(idx, 1.0, 'REPLACE')


def _select(obj) -> None:
    bpy.ops.object.select_all(action='DESELECT')
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def build_scene(frames: int, engine: str) -> dict:
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames
    scene.render.fps, scene.render.fps_base = 24, 1.0
    scene.use_gravity = True
    scene.neurok.engine = 'NEUROK' if engine == "neurok" else 'REFERENCE'
    scene.neurok.use_floor = True
    scene.neurok.floor_height = 0.0
    made = {}

    toy = _import_obj("soft_toy", lambda: bpy.ops.mesh.primitive_uv_sphere_add(segments=24, ring_count=12, radius=0.13))
    toy.location = (-SPACING, 0.0, 0.45)
    toy.neurok.preset = 'plush'
    made["soft_toy"] = toy

    flag = _import_obj("flag", lambda: bpy.ops.mesh.primitive_grid_add(x_subdivisions=24, y_subdivisions=16, size=0.6,
                                                                      rotation=(math.pi / 2, 0.0, 0.0)))
    flag.location = (0.0, 0.0, 0.75)
    flag.neurok.preset = 'cloth'
    co = mesh_data.mesh_arrays(flag)[0]
    _group(flag, "Pole", co[:, 0] <= co[:, 0].min() + 1e-4 + 0.02 * np.ptp(co[:, 0]))
    _group(flag, "All", np.ones(len(co), bool))
    flag.neurok.pin_group = "Pole"
    gust = flag.neurok.forces.add()
    gust.name, gust.vertex_group, gust.direction = "Gusts", "All", (0.0, 1.0, 0.3)
    gust.strength, gust.profile, gust.frequency = 6.0, 'SINE', 1.5
    gust.frame_start, gust.frame_end = 1, frames
    bpy.ops.object.effector_add(type='WIND', location=(0.0, -0.6, 0.75), rotation=(-math.pi / 2, 0.0, 0.0))
    wind = bpy.context.active_object
    wind.name = "Wind"
    wind.field.strength = 4.0
    wind.field.falloff_power = 0.0
    made["flag"] = flag

    jelly = _import_obj("jelly", lambda: bpy.ops.mesh.primitive_cube_add(size=0.25))
    co = mesh_data.mesh_arrays(jelly)[0]
    jelly.location = (SPACING, 0.0, -co[:, 2].min() + 0.003)
    jelly.neurok.preset = 'jelly'
    jelly.neurok.stiffness = 2.0e4  # a firm jelly: the 3 kPa preset slumps under its own weight at this size
    hi = co.max(axis=0)
    _group(jelly, "Poke", (co[:, 0] > hi[0] - 0.25 * np.ptp(co[:, 0])) & (co[:, 2] > hi[2] - 0.35 * np.ptp(co[:, 2])))
    poke = jelly.neurok.forces.add()
    poke.name, poke.vertex_group, poke.direction = "Poke", "Poke", (-1.0, 0.0, -0.3)
    poke.strength, poke.profile, poke.frame_start, poke.duration = 60.0, 'IMPULSE', 3, 2
    jelly.neurok.use_force_fields = False  # the wind is for the flag
    toy.neurok.use_force_fields = False
    made["jelly"] = jelly

    bpy.ops.mesh.primitive_plane_add(size=4.0, location=(0.0, 0.0, 0.0))
    ground = bpy.context.active_object
    ground.name = "Ground"
    ground.color = (0.55, 0.55, 0.55, 1.0)
    for obj, colour in zip(made.values(), ((0.9, 0.55, 0.35, 1), (0.35, 0.55, 0.9, 1), (0.45, 0.85, 0.4, 1))):
        obj.color = colour
        bpy.ops.object.select_all(action='DESELECT')
        obj.select_set(True)
        bpy.context.view_layer.objects.active = obj
        bpy.ops.object.shade_smooth()
    return made


def bake_all(objects: dict) -> dict:
    timings = {}
    for name, obj in objects.items():
        _select(obj)
        t0 = time.perf_counter()
        try:
            result = bpy.ops.neurok.bake_cache(object_name=obj.name)
        except RuntimeError as e:  # the operator's one-sentence error report
            raise NeurokError(f"baking '{name}' failed: {str(e).strip()}") from None
        timings[name] = round(time.perf_counter() - t0, 2)
        if result != {'FINISHED'}:
            raise NeurokError(f"baking '{name}' did not finish")
        print(f"  baked {name}: {len(obj.data.vertices)} vertices, {timings[name]:.1f} s", flush=True)
    return timings


def _look_at(cam, target, offset, size):
    cam.location = Vector(target) + Vector(offset)
    cam.rotation_euler = (Vector(target) - cam.location).to_track_quat('-Z', 'Y').to_euler()
    cam.data.ortho_scale = size


def _world_bounds(obj):
    """Bounding box of the object over the whole bake (world space), so the camera keeps it in view."""
    co = mesh_data.mesh_arrays(obj)[0]
    path = obj.neurok.bake.cache_path
    if path:
        try:
            co = formats.read_pc2(bpy.path.abspath(path))[0].reshape(-1, 3)
        except NeurokError:
            pass
    world = mesh_data.transform(co.astype(np.float64), mesh_data.matrix_np(obj.matrix_world))
    return world.min(axis=0), world.max(axis=0)


def contact_sheet(objects: dict, out_png: Path, frames: list[int], size=(200, 160)) -> None:
    scene = bpy.context.scene
    scene.render.engine = 'BLENDER_WORKBENCH'
    scene.display.shading.light = 'STUDIO'
    scene.display.shading.color_type = 'OBJECT'
    scene.display.shading.show_shadows = True
    scene.render.resolution_x, scene.render.resolution_y = size
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = 'PNG'
    scene.render.image_settings.color_mode = 'RGBA'
    cam_data = bpy.data.cameras.new("NeuROK Demo Camera")
    cam_data.type = 'ORTHO'
    cam = bpy.data.objects.new("NeuROK Demo Camera", cam_data)
    scene.collection.objects.link(cam)
    scene.camera = cam
    tmp = cache_files.temp_cache_dir() / "demo_frames"
    tmp.mkdir(exist_ok=True)
    w, h = size
    gap = 4
    sheet = np.ones(((h + gap) * len(objects) + gap, (w + gap) * len(frames) + gap, 4), np.float32)
    sheet[..., :3] = 0.12
    try:
        for row, (name, obj) in enumerate(objects.items()):
            for other in objects.values():
                other.hide_render = other is not obj
            lo, hi = _world_bounds(obj)
            centre = 0.5 * (lo + hi)
            extent = float((hi - lo).max())
            _look_at(cam, centre, (1.4, -2.0, 1.1), extent * 1.6)
            for col, frame in enumerate(frames):
                scene.frame_set(frame)
                path = tmp / f"{name}_{frame:04d}.png"
                scene.render.filepath = str(path)
                bpy.ops.render.render(write_still=True)
                img = bpy.data.images.load(str(path), check_existing=False)
                px = np.empty(w * h * 4, np.float32)
                img.pixels.foreach_get(px)
                bpy.data.images.remove(img)
                tile = px.reshape(h, w, 4)
                y0 = gap + (len(objects) - 1 - row) * (h + gap)  # Blender images start at the bottom row
                x0 = gap + col * (w + gap)
                sheet[y0:y0 + h, x0:x0 + w] = tile
    finally:
        for other in objects.values():
            other.hide_render = False
    out = bpy.data.images.new("NeuROK Contact Sheet", sheet.shape[1], sheet.shape[0], alpha=True)
    out.pixels.foreach_set(sheet.ravel())
    out.filepath_raw = str(out_png)
    out.file_format = 'PNG'
    out.save()
    bpy.data.images.remove(out)
    bpy.data.objects.remove(cam)
    bpy.data.cameras.remove(cam_data)


def main(out_dir="demo_out", engine: str | None = None, frames: int | None = None, size=(200, 160)) -> dict:
    """Build, bake, save and render the demo; returns timings in seconds."""
    t_start = time.perf_counter()
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if engine in (None, "auto"):
        engine = "neurok" if _learned_available() else "reference"
    elif engine == "neurok" and not _learned_available():
        print("NeuROK demo: the learned engine is not available; using the reference engine", flush=True)
        engine = "reference"
    if frames is None:
        frames = 48 if engine == "neurok" else 24
    if not bpy.app.background:
        raise NeurokError("the demo replaces the open file; run it headless: python -m neurok_blender.demo --out DIR")
    bpy.ops.wm.read_factory_settings(use_empty=True)
    _ensure_registered()
    print(f"NeuROK demo: {engine} engine, {frames} frames -> {out}", flush=True)
    t0 = time.perf_counter()
    objects = build_scene(frames, engine)
    timings = {"engine": engine, "frames": frames, "setup_s": round(time.perf_counter() - t0, 2)}
    t0 = time.perf_counter()
    timings["bake_s"] = bake_all(objects)
    timings["bake_total_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    blend = out / "neurok_demo.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    timings["save_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    shown = sorted({1, max(2, frames // 4), max(3, frames // 2), frames})
    contact_sheet(objects, out / "preview.png", shown, size=size)
    timings["render_s"] = round(time.perf_counter() - t0, 2)
    timings["total_s"] = round(time.perf_counter() - t_start, 2)
    timings["blend"] = str(blend)
    timings["preview"] = str(out / "preview.png")
    jobs.forget_engines()
    print(json.dumps(timings, indent=1), flush=True)
    return timings


def cli(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m neurok_blender.demo", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="demo_out", help="output folder (default demo_out)")
    p.add_argument("--engine", choices=("auto", "neurok", "reference"), default="auto")
    p.add_argument("--frames", type=int, default=None, help="frames to bake (default 48 learned, 24 reference)")
    args = p.parse_args(argv)
    try:
        main(args.out, engine=args.engine, frames=args.frames)
    except NeurokError as e:
        print(f"neurok demo: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
