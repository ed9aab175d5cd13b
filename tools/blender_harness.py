"""One harness for every headless Blender check: the add-on's tests (tests/test_blender_*.py) and the
self-contained bundle's check (tools/check_bundle.py).

A check installs the built extension zip into throwaway Blender user folders and drives it in a child
Python (bpy state, and the BLENDER_USER_* folders read when bpy is imported, must not leak between
checks). The child records every check as {"ok": bool, "detail": str, "s": seconds} in a JSON file,
written after each one, so a crash later still leaves what was checked; the parent reads it back.

Parent side: `build_zip` (build.py into a folder), `user_env` (the throwaway folders), `run_child` (the
child process and its results), `assert_check`.

Child side: the child is this file, `python tools/blender_harness.py SCRIPT ARG...`: it loads SCRIPT
(a test file or check_bundle.py) and calls its `child(ARG...)`, which uses `Checks`, `install`,
`addon_modules` and the helpers every check needs (`read_pc2`, `eval_co`, `select_only`, `op_error`,
`one_sentence`). SCRIPT imports this module as `blender_harness` (tests/conftest.py registers it for
pytest; here it registers itself), so nothing edits the import path.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
HARNESS = Path(__file__).resolve()
PKG = "bl_ext.user_default.neurok"       # the add-on's package once installed from the zip
USER_DIRS = (("BLENDER_USER_CONFIG", "config"), ("BLENDER_USER_SCRIPTS", "scripts"),
             ("BLENDER_USER_EXTENSIONS", "extensions"))


# =========================================================================== parent side

def build_zip(out_dir, stage_dir, wheels: bool = False, python: str | None = None, timeout: int = 300) -> Path:
    """build.py into `out_dir` (the small zip without wheels unless `wheels`): the one zip's path.
    Raises AssertionError with build.py's output when it fails."""
    command = [python or sys.executable, str(ROOT / "build.py"), "--out-dir", str(out_dir), "--stage-dir",
               str(stage_dir)] + ([] if wheels else ["--no-wheels"])
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    zips = sorted(Path(out_dir).glob("neurok-*.zip"))
    assert proc.returncode == 0 and len(zips) == 1, (proc.stdout + proc.stderr).strip()[-3000:] or zips
    return zips[0]


def user_env(folder, base: dict | None = None, resources: bool = False) -> dict:
    """`base` (default: this process's environment) with Blender's user folders and TMPDIR in `folder`,
    made if missing (`resources`: BLENDER_USER_RESOURCES too)."""
    env = dict(os.environ if base is None else base)
    dirs = USER_DIRS + ((("BLENDER_USER_RESOURCES", "resources"),) if resources else ()) + (("TMPDIR", "tmp"),)
    for var, sub in dirs:
        (Path(folder) / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(Path(folder) / sub)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_child(script, args, out_json, env: dict, python: str | None = None, isolated: bool = False,
              timeout: int = 900, cwd=None):
    """Run `script`'s child(*args) in a Blender Python (`python`, default this one; `isolated`: `-I`, no
    user site-packages nor PYTHON* variables). Returns (results, log, rc): results is the child's JSON
    (None if it wrote none), rc None when it ran past `timeout`."""
    out_json = Path(out_json)
    out_json.unlink(missing_ok=True)
    command = [python or sys.executable] + (["-I"] if isolated else []) + [str(HARNESS), str(script)]
    command += [str(a) for a in args]
    try:
        proc = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        log, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out = [s.decode(errors="replace") if isinstance(s, bytes) else (s or "") for s in (e.stdout, e.stderr)]
        log, rc = f"timed out after {timeout} s: {''.join(out)}", None
    results = json.loads(out_json.read_text()) if out_json.is_file() else None
    return results, log, rc


def checked(script, args, out_json, env: dict, timeout: int = 900) -> dict:
    """run_child for a test: its results with the whole log under "_log"; AssertionError when the child
    crashed before writing any."""
    results, log, rc = run_child(script, args, out_json, env, timeout=timeout)
    if results is None:
        raise AssertionError(f"the Blender child crashed (rc {rc}):\n{log[-6000:]}")
    results["_log"] = log
    return results


def assert_check(results: dict, name: str) -> None:
    assert name in results, f"check '{name}' did not run; log:\n{str(results.get('_log', ''))[-3000:]}"
    assert results[name]["ok"], results[name]["detail"]


# =========================================================================== child side

class Checks:
    """The child's record: `with checks("name"): ...` records the block as passed, or failed with the
    traceback's tail, and goes on; `record` sets a result directly; every change is written out."""

    def __init__(self, out_json):
        self.out = Path(out_json)
        self.results: dict = {}

    def dump(self):
        self.out.write_text(json.dumps(self.results, indent=1))

    def record(self, name, ok, detail=""):
        self.results[name] = {"ok": bool(ok), "detail": str(detail)[:4000]}
        self.dump()

    def __call__(self, name):
        return _Check(self, name)


class _Check:
    def __init__(self, checks, name):
        self.checks, self.name = checks, name

    def __enter__(self):
        print("CHECK", self.name, flush=True)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, et, ev, tb):
        results = self.checks.results
        if et is not None:
            self.checks.record(self.name, False, "".join(traceback.format_exception(et, ev, tb))[-3000:])
        elif self.name not in results:
            self.checks.record(self.name, True)
        results[self.name]["s"] = time.perf_counter() - self.t0
        self.checks.dump()
        return True     # keep going: later checks still report


def install(zip_path) -> float:
    """Blender's factory settings, then the zip installed and enabled: the seconds the install took."""
    import bpy
    bpy.ops.wm.read_factory_settings(use_empty=True)
    t0 = time.perf_counter()
    r = bpy.ops.extensions.package_install_files(filepath=str(zip_path), repo="user_default", enable_on_install=True)
    assert r == {'FINISHED'}, r
    assert PKG in sys.modules, sorted(m for m in sys.modules if m.startswith("bl_ext"))
    return time.perf_counter() - t0


def addon_modules(*names):
    """The installed add-on's modules by name (`gather`, `jobs`, ...), in order."""
    return tuple(importlib.import_module(f"{PKG}.{name}") for name in names)


def read_pc2(path):
    """A PC2 file's frames [T, N, 3]; its header must match its size (no half-written file)."""
    import struct

    import numpy as np
    data = Path(path).read_bytes()
    magic, _v, n, _s, _r, t = struct.unpack_from("<12siiffi", data)
    assert magic == b"POINTCACHE2\0", magic
    assert len(data) == 32 + 12 * n * t, "PC2 size does not match its header (half-written)"
    return np.frombuffer(data, "<f4", offset=32).reshape(t, n, 3).copy()


def eval_co(obj, frame, subframe=0.0):
    """The object's evaluated vertex positions (object space) at a scene frame."""
    import bpy
    import numpy as np
    bpy.context.scene.frame_set(frame, subframe=subframe)
    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    me = ev.to_mesh()
    co = np.empty(len(me.vertices) * 3, np.float32)
    me.vertices.foreach_get("co", co)
    ev.to_mesh_clear()
    return co.reshape(-1, 3)


def select_only(obj):
    """Select `obj` alone and make it active (None: select nothing)."""
    import bpy
    bpy.context.view_layer.update()
    bpy.ops.object.select_all(action='DESELECT')
    if obj is not None:
        obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def op_error(fn, **kw):
    """Run an operator that should fail: (message, result), the message from the raised report."""
    try:
        return None, fn(**kw)
    except RuntimeError as e:
        return str(e).strip(), None


def one_sentence(msg, single: bool = False) -> bool:
    """An operator's report is one line ending in a full stop, no traceback (`single`: one sentence)."""
    body = msg.split(":", 1)[1].strip() if msg.startswith("Error:") else msg
    ok = body.endswith(".") and "\n" not in body and "Traceback" not in body
    return ok and (not single or body.count(". ") == 0)


def pole_flag(name="Flag", location=(0, 2, 1), size=0.5, cuts=10):
    """A cloth flag upright in the XZ plane: a grid whose low-x edge is the vertex group "Pole" (its pins)
    and whose every vertex is in "All" (for painted forces)."""
    import bpy
    import numpy as np
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=cuts, y_subdivisions=cuts, size=size, location=location,
                                    rotation=(1.5707963, 0, 0))
    flag = bpy.context.active_object
    flag.name = name
    co = np.array([v.co[:] for v in flag.data.vertices])
    flag.vertex_groups.new(name="Pole").add([int(i) for i in np.nonzero(co[:, 0] < co[:, 0].min() + 1e-4)[0]],
                                            1.0, 'REPLACE')
    flag.vertex_groups.new(name="All").add(list(range(len(co))), 1.0, 'REPLACE')
    flag.neurok.preset = 'cloth'
    flag.neurok.pin_group = "Pole"
    return flag


def keyed_gust(obj, direction, frames=(1, 5), strength=10.0):
    """A painted force on the vertex group "All" whose strength is keyed from 0 at frames[0] to `strength`
    at frames[1]: the force."""
    f = obj.neurok.forces.add()
    path = f"neurok.forces[{len(obj.neurok.forces) - 1}].strength"
    f.name, f.vertex_group, f.direction, f.profile = "Gust", "All", direction, 'KEYFRAMED'
    f.strength = 0.0
    obj.keyframe_insert(path, frame=frames[0])
    f.strength = strength
    obj.keyframe_insert(path, frame=frames[1])
    return f


# ------------------------------------------------------------------ modal operators without a window

TIMER = SimpleNamespace(type='TIMER', value='NOTHING')   # the events a windowless Blender never sends
ESC = SimpleNamespace(type='ESC', value='PRESS')


def dummy_of(op_cls):
    """The operator's methods on a plain object: modal() can then be driven with fake TIMER/ESC events."""
    ns = {}
    for klass in reversed(op_cls.__mro__):
        if klass.__module__.startswith(PKG):
            ns.update({k: v for k, v in vars(klass).items() if not k.startswith("__")})
    ns["report"] = lambda self, kind, msg: self.reports.append((sorted(kind)[0], msg))
    d = type("Dummy" + op_cls.__name__, (), ns)()
    d.reports = []
    return d


def fake_context(obj):
    """A context for a dummy operator, with `obj` active."""
    import bpy
    c = bpy.context
    return SimpleNamespace(scene=c.scene, view_layer=c.view_layer, window=None, window_manager=c.window_manager,
                           active_object=obj, preferences=c.preferences,
                           evaluated_depsgraph_get=c.evaluated_depsgraph_get)


def start_job(d, kind, obj, ctx, stream=False):
    """Start the add-on's job for a dummy operator `d` (a bake, or with `_setup_state` a preview), as its
    invoke() would: the job."""
    gather, jobs, preview = addon_modules("gather", "jobs", "operators.preview")
    inputs = gather.gather(ctx, obj)
    if hasattr(d, "_setup_state"):
        d._setup_state(inputs)
        d._fingerprint = preview.fingerprint(ctx, obj)
    d._obj_name, d._timer = obj.name, None
    job = jobs.Job(kind, inputs, stream=stream)
    job.handler = d.on_message
    jobs.JOBS[obj.name] = job
    d._job = job
    job.start()
    return job


def pump(d, ctx, until, limit=120.0, event=TIMER):
    """Send `event` to the dummy's modal() until `until(result)`: that result."""
    deadline = time.time() + limit
    while time.time() < deadline:
        result = d.modal(ctx, event)
        if until(result):
            return result
        time.sleep(0.03)
    raise AssertionError("modal operator did not get there in time")


def _child_main(script, *args):
    sys.modules.setdefault("blender_harness", sys.modules[__name__])
    spec = importlib.util.spec_from_file_location("blender_child", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.child(*args)


if __name__ == "__main__":
    _child_main(*sys.argv[1:])
