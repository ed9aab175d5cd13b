"""Renders docs/figures/addon_getting_started.png headless (Workbench): a cloth banner pinned to an animated,
rotating hook, baked by NeuROK (the learned engine with its sheet layer) over a Subdivision modifier, falling onto a Collision plane.

    python docs/figures/addon_figure.py ZIP OUT.png     (run with BLENDER_USER_* pointed at temp folders)
"""
import sys

import bpy
import numpy as np

zip_path, out = sys.argv[1], sys.argv[2]
bpy.ops.wm.read_factory_settings(use_empty=True)
bpy.ops.extensions.package_install_files(filepath=zip_path, repo="user_default", enable_on_install=True)
scene = bpy.context.scene
scene.frame_start, scene.frame_end = 1, 16
scene.neurok.engine = 'NEUROK'
bpy.ops.mesh.primitive_plane_add(size=3, location=(0, 0, 0))
bpy.ops.object.modifier_add(type='COLLISION')
bpy.ops.object.empty_add(location=(-0.3, 0, 0.9))
hook = bpy.context.active_object
hook.keyframe_insert("rotation_euler", frame=1)
hook.rotation_euler = (0, 0, 0.6)
hook.keyframe_insert("rotation_euler", frame=16)
bpy.ops.mesh.primitive_grid_add(x_subdivisions=8, y_subdivisions=8, size=0.6, location=(0, 0, 0.9))
flag = bpy.context.active_object
co = np.array([v.co[:] for v in flag.data.vertices])
g = flag.vertex_groups.new(name="Pin")
g.add([int(i) for i in np.nonzero(co[:, 0] < co[:, 0].min() + 1e-4)[0]], 1.0, 'REPLACE')
sub = flag.modifiers.new("Subdivision", "SUBSURF")
sub.levels = sub.render_levels = 1  # the cache holds the viewport level's vertices
bpy.ops.neurok.physics_add()
flag.neurok.preset = 'cloth'
flag.neurok.pin_group = "Pin"
flag.neurok.pin_target = hook
scene.frame_set(1)
assert bpy.ops.neurok.bake_cache() == {'FINISHED'}
bpy.ops.object.empty_add(location=(0, 0, 0.65))
aim = bpy.context.active_object
bpy.ops.object.camera_add(location=(0.6, -2.2, 1.3))
scene.camera = bpy.context.active_object
track = scene.camera.constraints.new('TRACK_TO')
track.target = aim
scene.render.engine = 'BLENDER_WORKBENCH'
scene.display.shading.light = 'STUDIO'
scene.display.shading.color_type = 'OBJECT'
scene.world = bpy.data.worlds.new('W')
scene.world.color = (0.8, 0.85, 0.9)
flag.color = (0.9, 0.35, 0.2, 1)
scene.render.resolution_x, scene.render.resolution_y = 480, 360
frames = []
for f in (1, 8, 16):
    scene.frame_set(f)
    scene.render.filepath = f"{out}.{f}.png"
    bpy.ops.render.render(write_still=True)
    img = bpy.data.images.load(scene.render.filepath)
    frames.append(np.array(img.pixels[:]).reshape(360, 480, 4))
    bpy.data.images.remove(img)
    import os
    os.unlink(scene.render.filepath)
sheet = np.concatenate(frames, axis=1)
img = bpy.data.images.new("sheet", 480 * 3, 360)
img.pixels = sheet.ravel()
img.filepath_raw, img.file_format = out, 'PNG'
img.save()
