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
import os
from pathlib import Path

import blender_harness as bh
import pytest

FRAMES = (1, 12)
PUSH_FROM = 5          # scene frame the push starts

pytestmark = [pytest.mark.blender,
              pytest.mark.skipif(importlib.util.find_spec("bpy") is None, reason="bpy is not installed")]


# =========================================================================== child side (the harness runs it)

def child(zip_path, work, out_json):
    import bpy
    import numpy as np

    checks = bh.Checks(out_json)
    results, check, dump = checks.results, checks, checks.dump
    read_pc2, eval_co, op_error, one_sentence = bh.read_pc2, bh.eval_co, bh.op_error, bh.one_sentence
    with check("install"):
        bh.install(zip_path)
    cache_files, gather, jobs = bh.addon_modules("cache_files", "gather", "jobs")
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = FRAMES
    scene.frame_set(FRAMES[0])
    scene.neurok.engine = 'NEUROK'
    T = FRAMES[1] - FRAMES[0] + 1

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

@pytest.fixture(scope="module")
def guarded(addon_zip, tmp_path_factory):
    work = tmp_path_factory.mktemp("guard")
    return bh.checked(__file__, [addon_zip, work, work / "guard.json"], work / "guard.json", bh.user_env(work))


@pytest.mark.parametrize("name", ["install", "engine_stops_this_setup", "off_writes_nothing",
                                  "keep_writes_shorter_cache", "off_leaves_an_earlier_bake_alone",
                                  "keep_writes_fewer_shape_keys", "preview_keeps_frames_with_same_message"])
def test_guard_stop_in_blender(guarded, name):
    bh.assert_check(guarded, name)


def test_keep_message_says_what_was_kept(guarded):
    bh.assert_check(guarded, "keep_writes_shorter_cache")
    n = guarded["fault"]["frame"]
    assert f"kept the {n} frames before it as a shorter bake" in guarded["_log"], guarded["_log"][-3000:]
