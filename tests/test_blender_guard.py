"""The add-on when the plausibility guard stops a run (issue 14, item 2), headless: the built zip installed into
throwaway user folders and driven in a child process, like tests/test_blender_workflow.py.

The stop is real: a jelly ball pinned at its base whose top is pushed at 1000 m/s² from the fifth frame tears
apart in the learned engine with the bundled model, and the guard stops it a few frames later. Checked:

- the engine itself stops this setup (the frame, the good frames, the one-line message);
- "Keep Frames Before a Stop" off (the default): the add-on shows the engine's message, writes nothing (no
  file, no modifier, no bake record), and a faulting re-bake leaves an earlier bake byte for byte as it was;
- on: the good frames become a complete, shorter Mesh Cache (exactly the engine's frames, read back through
  the PC2 header, played by the modifier) or fewer shape keys, and the message says what was kept;
- a preview that stops keeps showing the frames before the stop, with the same message.
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
FRAMES = (1, 12)
PUSH_FROM = 5          # scene frame the push starts

if __name__ != "__main__":
    import pytest

    pytestmark = [pytest.mark.blender,
                  pytest.mark.skipif(importlib.util.find_spec("bpy") is None, reason="bpy is not installed")]


# =========================================================================== child side

def _child(zip_path, work, out_json):
    import importlib
    import struct

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
        assert PKG in sys.modules
    cache_files = importlib.import_module(PKG + ".cache_files")
    gather = importlib.import_module(PKG + ".gather")
    jobs = importlib.import_module(PKG + ".jobs")
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = FRAMES
    scene.frame_set(FRAMES[0])
    scene.neurok.engine = 'NEUROK'
    T = FRAMES[1] - FRAMES[0] + 1

    def read_pc2(path):
        data = Path(path).read_bytes()
        _m, _v, n, _s, _r, t = struct.unpack_from("<12siiffi", data)
        assert len(data) == 32 + 12 * n * t, "PC2 size does not match its header (half-written)"
        return np.frombuffer(data, "<f4", offset=32).reshape(t, n, 3).copy()

    def eval_co(obj, frame):
        scene.frame_set(frame)
        ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
        me = ev.to_mesh()
        co = np.empty(len(me.vertices) * 3, np.float32)
        me.vertices.foreach_get("co", co)
        ev.to_mesh_clear()
        return co.reshape(-1, 3)

    def op_error(fn, **kw):
        try:
            return None, fn(**kw)
        except RuntimeError as e:
            return str(e).strip(), None

    def one_sentence(msg):
        body = msg.split(":", 1)[1].strip() if msg.startswith("Error:") else msg
        return body.endswith(".") and "\n" not in body and "Traceback" not in body

    def files(folder):
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []

    # a jelly ball pinned at its base, its top pushed sideways far too hard from PUSH_FROM on
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=2, radius=0.5, location=(0, 0, 1))
    ball = bpy.context.active_object
    ball.name = "Jelly"
    z = np.array([v.co.z for v in ball.data.vertices])
    lo, hi = z.min(), z.max()
    ball.vertex_groups.new(name="Pin").add([int(i) for i in np.nonzero(z < lo + 0.2 * (hi - lo))[0]], 1.0, 'REPLACE')
    ball.vertex_groups.new(name="Push").add([int(i) for i in np.nonzero(z > hi - 0.2 * (hi - lo))[0]], 1.0, 'REPLACE')
    ball.neurok.preset = 'jelly'
    ball.neurok.pin_group = "Pin"
    f = ball.neurok.forces.add()
    f.vertex_group, f.strength, f.direction, f.profile = "Push", 1000.0, (1.0, 0.0, 0.0), 'CONSTANT'
    f.frame_start, f.frame_end = PUSH_FROM, 250
    bpy.context.view_layer.objects.active = ball
    ball.select_set(True)
    folder = str(cache_files.temp_cache_dir())
    cache_path = cache_files.cache_file_for(ball)[0]

    fault = {}
    with check("engine_stops_this_setup"):
        inputs = gather.gather(bpy.context, ball)
        run = jobs.get_engine(inputs.engine, inputs.model, "cpu").prepare(inputs.setup)
        try:
            run.bake()
            raise AssertionError("the guard did not stop the pushed jelly")
        except jobs.SimulationFault as e:
            fault.update(frame=int(e.frame), message=str(e), good=inputs.to_local(e.positions))
        assert 2 < fault["frame"] < T, fault["frame"]
        assert len(fault["good"]) == fault["frame"]
        results["fault"] = {"frame": fault["frame"], "message": fault["message"]}

    with check("off_writes_nothing"):
        assert scene.neurok.keep_frames_before_stop is False           # the default
        before = files(folder)
        msg, r = op_error(bpy.ops.neurok.bake_cache)
        assert r is None and msg, (msg, r)
        assert one_sentence(msg), msg
        assert fault["message"] in msg, (msg, fault["message"])          # the engine's own line
        assert f"at scene frame {FRAMES[0] + fault['frame']}" in msg, msg
        assert "nothing was written" in msg and "Keep Frames Before a Stop" in msg, msg
        assert files(folder) == before, (before, files(folder))
        assert not os.path.exists(cache_path)
        assert len(ball.modifiers) == 0 and ball.neurok.bake.kind == 'NONE'
        assert ball.data.shape_keys is None
        msg, r = op_error(bpy.ops.neurok.bake_shape_keys)
        assert r is None and "nothing was written" in msg and ball.data.shape_keys is None, msg
        results["off_message"] = msg

    with check("keep_writes_shorter_cache"):
        scene.neurok.keep_frames_before_stop = True
        r = bpy.ops.neurok.bake_cache()
        assert r == {'FINISHED'}, r
        mod = ball.modifiers.get("NeuROK Cache")
        assert mod is not None and mod.show_viewport
        path = bpy.path.abspath(mod.filepath)
        assert os.path.normcase(os.path.abspath(path)) == os.path.normcase(os.path.abspath(cache_path))
        got = read_pc2(path)
        n = fault["frame"]
        assert got.shape[0] == n < T, got.shape
        assert float(np.abs(got - fault["good"]).max()) < 1e-5           # exactly the engine's good frames
        b = ball.neurok.bake
        assert b.kind == 'CACHE' and b.frames == n and b.frame_start == FRAMES[0]
        assert float(np.abs(eval_co(ball, FRAMES[0] + n - 1) - got[n - 1]).max()) < 1e-4   # played
        scene.frame_set(FRAMES[0])
        assert [p for p in files(folder) if not p.endswith(".pc2")] == [], files(folder)   # no temp left over

    with check("off_leaves_an_earlier_bake_alone"):
        scene.neurok.keep_frames_before_stop = False
        old = Path(cache_path).read_bytes()
        msg, r = op_error(bpy.ops.neurok.bake_cache)
        assert r is None and "nothing was written" in msg, msg
        assert Path(cache_path).read_bytes() == old
        assert ball.neurok.bake.kind == 'CACHE' and ball.neurok.bake.frames == fault["frame"]
        assert ball.modifiers.get("NeuROK Cache") is not None

    with check("keep_writes_fewer_shape_keys"):
        assert bpy.ops.neurok.free_bake() == {'FINISHED'}
        scene.neurok.keep_frames_before_stop = True
        r = bpy.ops.neurok.bake_shape_keys()
        assert r == {'FINISHED'}, r
        key = ball.data.shape_keys
        ours = [kb for kb in key.key_blocks if kb.name.startswith("NeuROK ")]
        assert len(ours) == fault["frame"], len(ours)
        assert ball.neurok.bake.kind == 'SHAPE_KEYS' and ball.neurok.bake.frames == fault["frame"]
        assert bpy.ops.neurok.free_bake() == {'FINISHED'}
        assert ball.data.shape_keys is None

    with check("preview_keeps_frames_with_same_message"):
        msg, r = op_error(bpy.ops.neurok.preview)
        assert r is None and msg and one_sentence(msg), (msg, r)
        assert fault["message"] in msg and "the preview shows the frames before it" in msg, msg
        mod = ball.modifiers.get("NeuROK Preview")
        assert mod is not None
        assert read_pc2(bpy.path.abspath(mod.filepath)).shape[0] == fault["frame"]
        assert bpy.ops.neurok.preview(stop=True) == {'FINISHED'}
        assert ball.modifiers.get("NeuROK Preview") is None
        assert not jobs.JOBS

    dump()


# =========================================================================== pytest side

def _run(zip_path, work):
    env = dict(os.environ)
    for var, sub in (("BLENDER_USER_CONFIG", "config"), ("BLENDER_USER_SCRIPTS", "scripts"),
                     ("BLENDER_USER_EXTENSIONS", "extensions"), ("TMPDIR", "tmp")):
        (work / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(work / sub)
    env.setdefault("OMP_NUM_THREADS", "1")
    out = work / "guard.json"
    proc = subprocess.run([sys.executable, __file__, str(zip_path), str(work), str(out)],
                          env=env, capture_output=True, text=True, timeout=900)
    if not out.is_file():
        raise AssertionError(f"the child crashed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    res = json.loads(out.read_text())
    res["_log"] = proc.stdout + proc.stderr
    return res


if __name__ != "__main__":

    @pytest.fixture(scope="module")
    def guarded(tmp_path_factory):
        out = tmp_path_factory.mktemp("dist")
        stage = tmp_path_factory.mktemp("stage")
        proc = subprocess.run([sys.executable, str(ROOT / "build.py"), "--no-wheels", "--out-dir", str(out),
                               "--stage-dir", str(stage)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return _run(next(out.glob("neurok-*.zip")), tmp_path_factory.mktemp("guard"))

    def _assert(res, name):
        assert name in res, f"check '{name}' did not run; log:\n{res.get('_log', '')[-3000:]}"
        assert res[name]["ok"], res[name]["detail"]

    @pytest.mark.parametrize("name", ["install", "engine_stops_this_setup", "off_writes_nothing",
                                      "keep_writes_shorter_cache", "off_leaves_an_earlier_bake_alone",
                                      "keep_writes_fewer_shape_keys", "preview_keeps_frames_with_same_message"])
    def test_guard_stop_in_blender(guarded, name):
        _assert(guarded, name)

    def test_keep_message_says_what_was_kept(guarded):
        _assert(guarded, "keep_writes_shorter_cache")
        n = guarded["fault"]["frame"]
        assert f"kept the {n} frames before it as a shorter bake" in guarded["_log"], guarded["_log"][-3000:]


if __name__ == "__main__":
    _child(*sys.argv[1:4])
