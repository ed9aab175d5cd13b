"""Learn Material from Bake (issue 24), headless: the built zip installed into throwaway user folders and
driven in a child process, like tests/test_blender_workflow.py. A real Blender cloth (a pinned 10 x 10 grid
swinging under gravity) is learned from; the learned material is then in the Material list, is selected,
and a NeuROK bake of another sheet with it runs. Bad input gets one sentence.
"""
from __future__ import annotations

import importlib.util
import os

import blender_harness as bh
import pytest

pytestmark = [pytest.mark.blender,
              pytest.mark.skipif(importlib.util.find_spec("bpy") is None, reason="bpy is not installed")]


# =========================================================================== child side (the harness runs it)

def child(zip_path, work, out_json):
    import bpy
    import numpy as np

    check = bh.Checks(out_json)
    op_error, one_sentence = bh.op_error, bh.one_sentence
    with check("install"):
        bh.install(zip_path)
    properties, = bh.addon_modules("properties")
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 24

    def cloth_grid(name, frames, loc=(0, 0, 1)):
        bpy.ops.mesh.primitive_grid_add(x_subdivisions=9, y_subdivisions=9, size=0.6, location=loc)
        ob = bpy.context.active_object
        ob.name = name
        group = ob.vertex_groups.new(name="pin")
        co = np.array([v.co[:] for v in ob.data.vertices])
        group.add([int(i) for i in np.flatnonzero(co[:, 1] > co[:, 1].max() - 1e-6)], 1.0, 'REPLACE')
        mod = ob.modifiers.new("Cloth", 'CLOTH')
        mod.settings.vertex_group_mass = "pin"
        mod.point_cache.frame_start, mod.point_cache.frame_end = 1, frames
        return ob

    flag = cloth_grid("Flag", 24)
    with check("learns_from_a_blender_cloth"):
        err, res = op_error(bpy.ops.neurok.learn_material, object_name="Flag", material_name="my_silk", minutes=0.05)
        assert err is None and res == {'FINISHED'}, err
        path = bpy.path.abspath(scene.neurok.model_path)
        assert path and os.path.isfile(path), scene.neurok.model_path
        assert scene.neurok.engine == 'NEUROK'
        assert flag.neurok.preset == "my_silk"
        names = [item[0] for item in properties.preset_items(flag.neurok, bpy.context)]
        assert "my_silk" in names and "rubber" in names and names[-1] == 'CUSTOM', names
        assert flag.neurok.kind == 'CLOTH'
        # the sliders hold the SI numbers of Blender's cloth (tension 15 on the grid's 0.6/9 m edges at 24 fps)
        edge = 0.6 / 9
        assert abs(flag.neurok.stiffness - 15.0 * 24 ** 2 / edge) < 1e-6 * flag.neurok.stiffness, flag.neurok.stiffness
        assert scene.frame_current == 1, "the scene's frame is restored after reading the cloth"

    with check("bakes_with_the_learned_material"):
        bpy.ops.mesh.primitive_grid_add(x_subdivisions=6, y_subdivisions=6, size=0.5, location=(2, 0, 1))
        sheet = bpy.context.active_object
        sheet.name = "Sheet"
        group = sheet.vertex_groups.new(name="pin")
        group.add([0, 1, 2, 3, 4, 5], 1.0, 'REPLACE')
        assert bpy.ops.neurok.physics_add() == {'FINISHED'}
        sheet.neurok.preset = "my_silk"
        sheet.neurok.pin_group = "pin"
        scene.frame_end = 6
        err, res = op_error(bpy.ops.neurok.bake_cache, object_name="Sheet")
        assert err is None and res == {'FINISHED'}, err
        assert any(m.type == 'MESH_CACHE' for m in sheet.modifiers)
        scene.frame_end = 24

    with check("bad_input_one_sentence"):
        bpy.ops.mesh.primitive_cube_add(location=(4, 0, 1))
        bpy.context.active_object.name = "Plain"
        err, _ = op_error(bpy.ops.neurok.learn_material, object_name="Plain", minutes=0.05)
        assert err and "no simulation to learn from" in err and one_sentence(err), err
        cloth_grid("Short", 4, loc=(6, 0, 1))
        err, _ = op_error(bpy.ops.neurok.learn_material, object_name="Short", minutes=0.05)
        assert err and "only 4 frames" in err and one_sentence(err), err
        err, _ = op_error(bpy.ops.neurok.learn_material, object_name="Flag", material_name="rubber", minutes=0.05)
        assert err and "built-in" in err and one_sentence(err), err


# =========================================================================== pytest side

@pytest.fixture(scope="module")
def learned(addon_zip, tmp_path_factory):
    work = tmp_path_factory.mktemp("learn")
    return bh.checked(__file__, [addon_zip, work, work / "learn.json"], work / "learn.json", bh.user_env(work))


@pytest.mark.parametrize("name", ["install", "learns_from_a_blender_cloth", "bakes_with_the_learned_material",
                                  "bad_input_one_sentence"])
def test_learn_material_from_bake(learned, name):
    bh.assert_check(learned, name)
