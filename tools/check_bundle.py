#!/usr/bin/env python3
"""Install the self-contained extension zip into a clean Blender Python and bake with it.

    python tools/check_bundle.py                     # build the zip, make a clean bpy venv, install, bake
    python tools/check_bundle.py --zip dist/neurok-0.1.0-linux_x64.zip   # check an existing zip
    python tools/check_bundle.py --python /path/to/python                # a Python that already has bpy only
    python tools/check_bundle.py --keep --work /tmp/nb                   # keep the folders for a look

"Clean" means what Blender ships: a Python with `bpy` (and the numpy it brings) but no torch or scipy,
so the engine can only run from the wheels the zip bundles. Steps:

1. build:  `build.py` for this platform (torch CPU + scipy wheels) into a temporary folder (skipped with --zip);
2. python: a fresh venv with only `bpy==5.0.1` from pip (skipped with --python);
3. child:  this file's `child`, run by tools/blender_harness.py isolated (`python -I`) in that Python with throwaway
   BLENDER_USER_CONFIG / SCRIPTS / EXTENSIONS / RESOURCES folders: it installs the zip with
   `bpy.ops.extensions.package_install_files` (Blender extracts the bundled wheels into the extensions'
   site-packages), draws the NeuROK panel, bakes the bundled jelly sample with the learned engine and a
   small cube with the reference simulator, and checks the PC2 caches.

One line per check (`PASS name: detail` / `FAIL name: detail`), then `N passed, N failed`; the exit status
is non-zero when a check failed. The temporary folder (about 2.5 GB: zip, venv, installed wheels) is
removed unless --keep (a folder given with --work is kept).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import blender_harness as bh

ROOT = bh.ROOT
BPY_PIN = "bpy==5.0.1"
PKG = bh.PKG
FRAMES = (1, 6)  # 6 frames
FORBIDDEN_PREFIXES = ("nvidia", "triton", "cuda")


# =========================================================================== child (runs in the clean Python)

def child(zip_path: str, out_json: str, forbidden_root: str) -> None:
    """Run by tools/blender_harness.py in the clean Python."""
    import importlib
    import importlib.util

    checks = bh.Checks(out_json)
    results, record, check = checks.results, checks.record, checks
    read_pc2, select_only = bh.read_pc2, bh.select_only

    with check("clean_python"):
        missing = [m for m in ("torch", "scipy") if importlib.util.find_spec(m) is None]
        assert missing == ["torch", "scipy"], f"this Python already has {sorted({'torch', 'scipy'} - set(missing))}"
        assert importlib.util.find_spec("bpy") is not None, "bpy is missing"
        record("clean_python", True, f"{sys.executable}: bpy present, torch and scipy absent")

    t0 = time.perf_counter()
    import bpy
    import numpy as np
    results["_timing_import_bpy"] = {"ok": True, "detail": f"{time.perf_counter() - t0:.1f}"}

    ext_dir = Path(bpy.utils.user_resource('EXTENSIONS'))
    site = ext_dir / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"

    with check("install"):
        dt = bh.install(zip_path)
        assert hasattr(bpy.ops.neurok, "bake_cache")
        results["_timing_install_s"] = {"ok": True, "detail": f"{dt:.1f}"}
        record("install", True, f"package_install_files + enable in {dt:.1f} s")

    with check("wheels_installed"):
        assert site.is_dir(), f"{site} was not created"
        names = sorted(p.name for p in site.iterdir())
        for m in ("torch", "scipy"):
            assert m in names, f"{m} not in {site}: {names}"
        bad = [n for n in names if n.lower().startswith(FORBIDDEN_PREFIXES)]
        assert not bad, f"CUDA packages installed: {bad}"
        size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
        record("wheels_installed", True, f"{len([n for n in names if n.endswith('.dist-info')])} wheels, "
                                         f"{size / 1e6:.0f} MB in {site}")

    link, = bh.addon_modules("engine_link")
    with check("engine_status"):
        assert link.ENGINE_PROBLEM is None, link.ENGINE_PROBLEM
        assert link.api is not None
        assert link.bundled_model() is not None, "no bundled checkpoint"
        assert link.learned_engine_status("") is None, link.learned_engine_status("")

    with check("torch_from_extension"):
        import scipy
        import torch
        where = {m.__name__: str(Path(m.__file__).resolve()) for m in (torch, scipy)}
        for name, f in where.items():
            assert Path(f).is_relative_to(site.resolve()), f"{name} imported from {f}, not from {site}"
            assert not Path(f).is_relative_to(Path(forbidden_root).resolve()), f"{name} imported from {f}"
        assert "+cpu" in torch.__version__ or not sys.platform.startswith("linux"), torch.__version__
        record("torch_from_extension", True, f"torch {torch.__version__} from {where['torch']}; "
                                             f"scipy {scipy.__version__} from {where['scipy']}")

    with check("panel_engine_status"):  # the sidebar panel, drawn against a layout that records what it shows
        ui, = bh.addon_modules("ui")
        shown = []

        class Layout:
            def __getattr__(self, name):
                def call(*args, **kw):
                    if name == "label":
                        shown.append((kw.get("text", ""), kw.get("icon", "NONE")))
                    return Layout()
                return call

            def __setattr__(self, key, value):
                pass

        class Self:
            layout = Layout()

        bpy.context.scene.neurok.engine = 'NEUROK'
        ui.VIEW3D_PT_neurok.draw(Self(), bpy.context)
        errors = [t for t, icon in shown if icon == 'ERROR']
        assert not errors, errors
        assert not [t for t, _ in shown if "cannot run" in t], shown
        record("panel_engine_status", True, f"no error line; shown: {[t for t, _ in shown if t][:3]}")

    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = FRAMES
    scene.frame_set(FRAMES[0])
    scene.neurok.use_floor = False
    T = FRAMES[1] - FRAMES[0] + 1

    with check("bake_learned_jelly"):
        sample = link.SAMPLES_DIR / "jelly.obj"
        assert sample.is_file(), sample
        assert Path(sample).resolve().is_relative_to(ext_dir.resolve()), sample  # the zip's own copy
        bpy.ops.wm.obj_import(filepath=str(sample))
        jelly = bpy.context.selected_objects[0]
        jelly.location = (0.0, 0.0, 1.0)
        select_only(jelly)
        jelly.neurok.preset = 'jelly'
        scene.neurok.engine, scene.neurok.model_path = 'NEUROK', ""
        t0 = time.perf_counter()
        r = bpy.ops.neurok.bake_cache()
        dt = time.perf_counter() - t0
        assert r == {'FINISHED'}, r
        mod = jelly.modifiers.get("NeuROK Cache")
        assert mod is not None and mod.cache_format == 'PC2'
        pc2 = read_pc2(bpy.path.abspath(mod.filepath))  # object space
        n = len(jelly.data.vertices)
        assert pc2.shape == (T, n, 3), (pc2.shape, T, n)
        assert np.all(np.isfinite(pc2)), "non-finite positions"
        m = np.array(jelly.matrix_world)  # the OBJ importer turns Y-up into Z-up with the object's rotation
        world = pc2 @ m[:3, :3].T + m[:3, 3]
        moved = float(np.linalg.norm(world[-1] - world[0], axis=1).max())
        fall = float(world[0, :, 2].mean() - world[-1, :, 2].mean())
        g = 9.81 * 0.5 * ((T - 1) / scene.render.fps) ** 2
        assert 0.3 * g < fall < 1.5 * g, f"the centre fell {fall:.4f} m in {T} frames (free fall {g:.4f} m)"
        assert jelly.neurok.bake.kind == 'CACHE' and jelly.neurok.bake.engine == 'neurok', jelly.neurok.bake.engine
        results["_timing_bake_learned_s"] = {"ok": True, "detail": f"{dt:.1f}"}
        record("bake_learned_jelly", True, f"{n} vertices x {T} frames in {dt:.1f} s, engine "
                                           f"'{jelly.neurok.bake.engine}', centre fell {fall:.4f} m (free fall "
                                           f"{g:.4f}), max move {moved:.4f} m, OOD {jelly.neurok.bake.ood_level or '-'}")

    with check("bake_reference_cube"):
        import bmesh
        bpy.ops.mesh.primitive_cube_add(size=0.3, location=(2.0, 0.0, 1.0))
        cube = bpy.context.active_object
        bm = bmesh.new()
        bm.from_mesh(cube.data)
        bmesh.ops.subdivide_edges(bm, edges=bm.edges[:], cuts=2, use_grid_fill=True)
        bm.to_mesh(cube.data)
        bm.free()
        select_only(cube)
        cube.neurok.preset = 'rubber'
        scene.neurok.engine = 'REFERENCE'
        t0 = time.perf_counter()
        r = bpy.ops.neurok.bake_cache()
        dt = time.perf_counter() - t0
        assert r == {'FINISHED'}, r
        pc2 = read_pc2(bpy.path.abspath(cube.modifiers["NeuROK Cache"].filepath))
        n = len(cube.data.vertices)
        assert pc2.shape == (T, n, 3) and np.all(np.isfinite(pc2)), pc2.shape
        fall = float(pc2[0, :, 2].mean() - pc2[-1, :, 2].mean())
        g = 9.81 * 0.5 * ((T - 1) / scene.render.fps) ** 2
        assert 0.3 * g < fall < 1.5 * g, (fall, g)
        results["_timing_bake_reference_s"] = {"ok": True, "detail": f"{dt:.1f}"}
        record("bake_reference_cube", True, f"{n} vertices x {T} frames in {dt:.1f} s, fell {fall:.4f} m "
                                            f"(free fall {g:.4f})")

    with check("disable_clean"):  # Blender also takes the add-on's wheels out of the shared site-packages
        t0 = time.perf_counter()
        bpy.ops.preferences.addon_disable(module=PKG)
        dt = time.perf_counter() - t0
        assert not hasattr(bpy.types.Object, "neurok")
        assert not [n for n in dir(bpy.ops.neurok) if not n.startswith("_")], dir(bpy.ops.neurok)
        left = sorted(p.name for p in site.iterdir() if p.name in ("torch", "scipy")) if site.is_dir() else []
        record("disable_clean", True, f"disabled in {dt:.1f} s; torch/scipy left in the extensions' site-packages: "
                                      f"{left or 'none'}")


# =========================================================================== parent

def _say(msg: str) -> None:
    print(msg, flush=True)


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "BLENDER_")) and k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    return env


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zip", help="check this zip instead of building one")
    p.add_argument("--python", help="a Python with bpy and without torch/scipy (default: a fresh venv with "
                                    f"{BPY_PIN})")
    p.add_argument("--work", help="working folder, kept afterwards (default: a new temporary folder, removed)")
    p.add_argument("--keep", action="store_true", help="keep the temporary working folder")
    p.add_argument("--timeout", type=int, default=1200, help="seconds for the Blender child (default 1200)")
    args = p.parse_args(argv)

    t_all = time.perf_counter()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="neurok_bundle_"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    timings: dict = {}

    def record(name, ok, detail=""):
        results[name] = {"ok": bool(ok), "detail": str(detail)}
        _say(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")

    try:
        # ------------------------------------------------------------------ 1. the zip
        if args.zip:
            zip_path = Path(args.zip).resolve()
            if not zip_path.is_file():
                record("build", False, f"{zip_path} does not exist")
                return _finish(results, timings, work, args, t_all)
        else:
            t0 = time.perf_counter()
            try:
                zip_path = bh.build_zip(work / "dist", work / "stage", wheels=True, timeout=None)
            except AssertionError as e:
                record("build", False, str(e)[-1500:])
                return _finish(results, timings, work, args, t_all)
            finally:
                timings["build"] = time.perf_counter() - t0
                shutil.rmtree(work / "stage", ignore_errors=True)  # the staged wheels (~230 MB) are in the zip now
            record("build", True, f"{zip_path.name} in {timings['build']:.0f} s")
        import zipfile
        with zipfile.ZipFile(zip_path) as z:
            wheels = [Path(n).name for n in z.namelist() if n.startswith("wheels/") and n.endswith(".whl")]
        size = zip_path.stat().st_size
        torch_whl = [w for w in wheels if w.startswith("torch-")]
        bad = [w for w in wheels if w.lower().startswith(FORBIDDEN_PREFIXES)]
        ok = bool(torch_whl) and any(w.startswith("scipy-") for w in wheels) and not bad
        if sys.platform.startswith("linux"):
            ok = ok and all("+cpu" in w for w in torch_whl)
        record("zip_contents", ok, f"{size / 1e6:.1f} MB ({size / 2**20:.1f} MiB), {len(wheels)} wheels: "
                                   f"{', '.join(sorted(wheels))}" + (f"; CUDA wheels {bad}" if bad else ""))
        timings["zip_mb"] = size / 1e6

        # ------------------------------------------------------------------ 2. the clean Python
        if args.python:
            py = args.python
        else:
            t0 = time.perf_counter()
            venv = work / "blender_py"
            proc = _run([sys.executable, "-m", "venv", str(venv)], env=_clean_env())
            py = str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))
            if proc.returncode == 0:
                proc = _run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", BPY_PIN],
                            env=_clean_env())
            timings["venv"] = time.perf_counter() - t0
            if proc.returncode != 0:
                record("clean_venv", False, (proc.stdout + proc.stderr).strip()[-1500:])
                return _finish(results, timings, work, args, t_all)
            record("clean_venv", True, f"{BPY_PIN} in a fresh venv in {timings['venv']:.0f} s")

        # ------------------------------------------------------------------ 3. install and bake in that Python
        env = bh.user_env(work / "user", _clean_env(), resources=True)
        out_json = work / "child.json"
        # -I: no user site-packages, no PYTHON* variables, not even the script's folder on the import path
        t0 = time.perf_counter()
        child_results, log, rc = bh.run_child(Path(__file__).resolve(), [zip_path, out_json, ROOT], out_json, env,
                                              python=py, isolated=True, timeout=args.timeout, cwd=str(work))
        timings["child"] = time.perf_counter() - t0
        child_results = child_results or {}
        for name, r in child_results.items():
            if name.startswith("_timing_"):
                timings[name[len("_timing_"):]] = float(r["detail"])
            else:
                record(name, r["ok"], r["detail"] + (f" [{r['s']:.1f} s]" if "s" in r else ""))
        expected = ("clean_python", "install", "wheels_installed", "engine_status", "torch_from_extension",
                    "panel_engine_status", "bake_learned_jelly", "bake_reference_cube", "disable_clean")
        not_run = [n for n in expected if n not in child_results]
        if not_run or rc != 0:
            record("child_process", False, f"rc {rc}; checks not run: {not_run}; log tail:\n{log[-2500:]}")
        else:
            record("child_process", True, f"{timings['child']:.0f} s (Blender start, install, bakes)")
        return _finish(results, timings, work, args, t_all)
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)


def _finish(results, timings, work, args, t_all) -> int:
    timings["total"] = time.perf_counter() - t_all
    passed = sum(r["ok"] for r in results.values())
    failed = len(results) - passed
    _say("timings: " + ", ".join(f"{k.removesuffix('_s').removesuffix('_mb')} {v:.1f}"
                                 f"{' MB' if k.endswith('_mb') else ' s'}" for k, v in timings.items()))
    if args.keep or args.work:
        _say(f"kept {work}")
    _say(f"{passed} passed, {failed} failed")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
