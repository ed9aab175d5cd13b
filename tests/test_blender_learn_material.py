"""Learn Material from Bake (issue 24), headless: the built zip installed into throwaway user folders and
driven in a child process, like tests/test_blender_workflow.py. A real Blender cloth (a pinned 10 x 10 grid
swinging under gravity) is learned from; the learned material is then in the Material list, is selected,
and a NeuROK bake of another sheet with it runs. Bad input gets one sentence.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "bl_ext.user_default.neurok"

if __name__ != "__main__":
    import pytest

    pytestmark = [pytest.mark.blender,
                  pytest.mark.skipif(importlib.util.find_spec("bpy") is None, reason="bpy is not installed")]


def _child(zip_path, work, out_json):
    import importlib

    import numpy as np

    results = {}

    def dump():
        Path(out_json).write_text(json.dumps(results, indent=1))

    class check:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            print("CHECK", self.name, flush=True)

        def __exit__(self, et, ev, tb):
            if et is None:
                results.setdefault(self.name, {"ok": True, "detail": ""})
            else:
                results[self.name] = {"ok": False, "detail": "".join(traceback.format_exception(et, ev, tb))[-3000:]}
            dump()
            return True

    import bpy
    bpy.ops.wm.read_factory_settings(use_empty=True)
    with check("install"):
        assert bpy.ops.extensions.package_install_files(filepath=zip_path, repo="user_default",
                                                        enable_on_install=True) == {'FINISHED'}
    properties = importlib.import_module(PKG + ".properties")
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 24

    def op_error(fn, **kw):
        try:
            return None, fn(**kw)
        except RuntimeError as e:
            return str(e).strip(), None

    def one_sentence(msg):
        body = msg.split(":", 1)[1].strip() if msg.startswith("Error:") else msg
        return body.endswith(".") and "\n" not in body and "Traceback" not in body

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


def _run(zip_path, work):
    env = dict(os.environ)
    for var, sub in (("BLENDER_USER_CONFIG", "config"), ("BLENDER_USER_SCRIPTS", "scripts"),
                     ("BLENDER_USER_EXTENSIONS", "extensions"), ("TMPDIR", "tmp")):
        (work / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(work / sub)
    out = work / "learn.json"
    proc = subprocess.run([sys.executable, __file__, str(zip_path), str(work), str(out)],
                          env=env, capture_output=True, text=True, timeout=900)
    if not out.is_file():
        raise AssertionError(f"child crashed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    res = json.loads(out.read_text())
    res["_log"] = (proc.stdout + proc.stderr)[-3000:]
    return res


if __name__ != "__main__":

    @pytest.fixture(scope="module")
    def learned(tmp_path_factory):
        out = tmp_path_factory.mktemp("dist")
        stage = tmp_path_factory.mktemp("stage")
        proc = subprocess.run([sys.executable, str(ROOT / "build.py"), "--no-wheels", "--out-dir", str(out),
                               "--stage-dir", str(stage)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return _run(next(out.glob("neurok-*.zip")), tmp_path_factory.mktemp("learn"))

    @pytest.mark.parametrize("name", ["install", "learns_from_a_blender_cloth", "bakes_with_the_learned_material",
                                      "bad_input_one_sentence"])
    def test_learn_material_from_bake(learned, name):
        assert name in learned, f"check '{name}' did not run; log:\n{learned.get('_log')}"
        assert learned[name]["ok"], learned[name]["detail"]


if __name__ == "__main__":
    _child(*sys.argv[1:4])
