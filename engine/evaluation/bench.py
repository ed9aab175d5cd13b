"""`neurok bench --json OUT.json [--sizes 1000,10000,100000] [--frames 24]`: speed.

One scene, the same for every engine: a geodesic sphere (about `n` vertices, the same shape and
size at every n) of rubber, pinned on one side (the 15% slab at low x), pushed sideways at
10 m/s^2 under gravity, 1/24 s frames. For each size:

- neurok (cpu, and cuda when torch sees a GPU): encode once (`prepare`, the cubature fit and the
  guard's rest measures included), then step + decode + guard per frame (what a bake does);
  encode_ms and ms_per_frame (wall clock), cpu_ms_per_frame (this process's CPU time: what a
  frame costs when other jobs share the cores), peak_mb = peak resident memory above the level
  before the run (sampled every 2 ms; on CUDA the peak allocated device memory),
  cubature_samples and cubature_force_error (the fitted cubature's relative force error on
  held-out poses of that mesh, `learned/cubature.py`).
- reference: the full-space simulator on the same setup (encode_ms = building the lattice,
  elements and pins). Its frames are capped (`reference_frames`; 3 at 50k vertices and more):
  its cost per frame hardly depends on the frame, and the row says how many were run.
- neurok_cloth (sizes up to 100k): the learned engine on a 1 m square sheet of cloth hung by its
  top edge in a sine gust (`CLOTH_SCENE`); its subspace has as many handles as its area asks
  (`learned/subspace.resolution`: 32), and `handles` / `coordinates` are in every neurok row.
  `sheet_layer` says whether the full-space layer ran (`learned/sheet_layer.py`; by default at
  every size at Medium detail, the bench's) and `layer_vertices` on how many vertices: above
  2,000 Medium iterates on a coarse proxy of that many (`learned/sheet_proxy.py`). Above that size
  a further row runs the layer on every vertex (`sheet_layer` "full", as High detail does):
  `full_layer` true.
  `closures` whether the learned closures acted (off under the layer: `runtime.RunConfig`).
  A further row at each size runs the same sheet with the scene key "self_collision": true (the
  layer's thickness layer against the sheet's folds, Blender's 5 mm; the add-on's cloth has it by
  default, a scene file only when it asks), the layer on:
  `self_collision` true and a note; `ratios` divides its ms_per_frame by the layered row's.
- neurok_solid_contact (sizes up to 10k): the learned engine on the same sphere, unpinned, set on a
  floor at its lowest point and thrown along it at 2 m/s (`CONTACT_SCENE`, initial velocity): the
  floor contact and its Coulomb friction (0.5) act every frame. A second row runs it with the solid's
  fine level (`learned/solid_layer.py`, experimental): `solid_layer` true. No ratio.
- blender_cloth: Blender's own cloth simulator on the same mesh and frames, pinned by a vertex
  group (gravity only: cloth on the surface mesh, not a volumetric solid; a speed reference);
  blender_cloth_sheet: the same on the cloth rows' sheet, pinned along its top edge (gravity only),
  against which `ratios` compares the learned engine's sheet with its full-space layer;
  run in a child Python that imports bpy (the engine never imports bpy); skipped with a reason
  when bpy is not installed.
All rows come from one run, and `ratios` divides the other engines' ms_per_frame by neurok's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from ..core.formats import NeurokError
from ..core.setup import SHEET_PROXY_VERTICES

BENCH_SCENE = {"format": "neurok.scene/1", "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, -9.81],
               "material": {"preset": "rubber"},
               "pins": [{"select": {"box": {"min": [0.0, 0.0, 0.0], "max": [0.15, 1.0, 1.0]}}, "strength": 1.0}],
               "forces": [{"select": {"box": {"min": [0.0, 0.0, 0.0], "max": [1.0, 1.0, 1.0]}}, "accel": [0.0, 10.0, 0.0],
                           "profile": {"type": "constant"}}],
               "floor": None}
LARGE_MESH = 50_000
# a square sheet of cloth hung by its top edge, pushed across by a sine gust (the flag's motion)
CLOTH_SCENE = {"format": "neurok.scene/1", "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, -9.81],
               "material": {"preset": "cloth"},
               "pins": [{"select": {"box": {"min": [0.0, 0.0, 0.97], "max": [1.0, 1.0, 1.0]}}, "strength": 1.0}],
               "forces": [{"select": {"box": {"min": [0.0, 0.0, 0.0], "max": [1.0, 1.0, 1.0]}}, "accel": [0.0, 6.0, 0.0],
                           "profile": {"type": "sine", "frequency": 0.7}}],
               "floor": None}
CLOTH_UP_TO = 100_000           # cloth rows at sizes up to this many vertices
# the bench's sphere thrown along a floor at 2 m/s: the floor contact and its Coulomb friction act every
# frame ("z" is set per mesh by `contact_setup`: the floor at the sphere's lowest point)
CONTACT_SCENE = {"format": "neurok.scene/1", "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, -9.81],
                 "material": {"preset": "rubber"}, "pins": [], "forces": [],
                 "floor": {"z": 0.0, "friction": 0.5}, "initial": {"velocity": [2.0, 0.0, 0.0]}}
CONTACT_UP_TO = 10_000          # contact rows at sizes up to this many vertices


def bench_mesh(n: int):
    from ..training.shapes import make_shape
    return make_shape("sphere", np.random.default_rng(0), target_vertices=n)


def bench_setup(mesh, frames: int, scene=None):
    from ..core.scene import setup_from_scene
    return setup_from_scene(mesh, dict(scene or BENCH_SCENE, frames=frames))


def contact_setup(mesh, frames: int):
    """`CONTACT_SCENE` on `mesh`: the floor at its lowest vertex, so that it starts touching."""
    floor = dict(CONTACT_SCENE["floor"], z=float(np.asarray(mesh.vertices)[:, 2].min()))
    return bench_setup(mesh, frames, dict(CONTACT_SCENE, floor=floor))


def bench_sheet(n: int):
    """A 1 m square sheet in the xz plane, about `n` vertices on a regular grid."""
    from ..core.formats import Mesh
    k = max(int(round(np.sqrt(n))), 2)
    u = np.linspace(0.0, 1.0, k)
    X, Z = np.meshgrid(u, u)
    vertices = np.stack([X.ravel(), np.zeros(k * k), Z.ravel()], axis=1)
    idx = np.arange(k * k).reshape(k, k)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, 1:].ravel(), idx[1:, :-1].ravel()
    faces = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)]).astype(np.int32)
    return Mesh(vertices, faces, name="sheet")


# --------------------------------------------------------------------------- memory

def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _status_kb(key):
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kb("VmHWM") is not None
    except OSError:
        return False


class PeakMemory:
    """Peak resident memory above the starting level while the block runs (MB): the kernel's
    peak mark (reset on entry) where Linux offers it, else RSS sampled every 2 ms."""

    def __init__(self, interval=0.002):
        self.interval = interval

    def __enter__(self):
        self.start = _rss_bytes()
        self.peak = self.start
        self.kernel = _reset_peak()
        self._stop = threading.Event()
        self._thread = None
        if not self.kernel:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_bytes())
            self._stop.wait(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, _rss_bytes())
        if self.kernel:
            self.peak = max(self.peak, 1024 * (_status_kb("VmHWM") or 0))
        self.mb = (self.peak - self.start) / 2 ** 20
        return False


# --------------------------------------------------------------------------- engines

def bench_neurok(engine, setup, device="cpu", sheet_layer="auto", solid_layer="off") -> dict:
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        run = engine.prepare(setup, sheet_layer=sheet_layer, solid_layer=solid_layer)
        run.guard                          # the guard's rest measures are made once per mesh too
        if cuda:
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        frames = run.frames()
        next(frames)                       # frame 0 is the given state (no work)
        t2, c2 = time.perf_counter(), time.process_time()
        count = 0
        for _, x in frames:
            count += 1
        if cuda:
            torch.cuda.synchronize()
        t3, c3 = time.perf_counter(), time.process_time()
    sub = run.scene.sub
    row = {"encode_ms": 1000.0 * (t1 - t0), "ms_per_frame": 1000.0 * (t3 - t2) / max(count, 1), "frames": count + 1,
           "peak_mb": mem.mb,
           # CPU time of this process per frame: what the frame costs where other jobs share the cores
           "cpu_ms_per_frame": 1000.0 * (c3 - c2) / max(count, 1),
           "cubature_samples": int(len(run.scene.weights)), "cubature_force_error": float(sub.cubature_error),
           "substeps": run.config.substeps, "handles": int(run.scene.resolution.handles), "coordinates": int(run.scene.dims),
           "sheet_layer": run.config.sheet_layer, "solid_layer": run.config.solid_layer, "closures": run.config.closures,
           "layer_vertices": None if run.layer is None else int(len(run.layer.rest))}
    if cuda:
        row["peak_mb"] = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
        row["host_peak_mb"] = mem.mb
    return row


def bench_reference(setup, frames: int) -> dict:
    from ..api import ReferenceEngine
    import copy
    s = copy.copy(setup)
    s.frames = frames
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        run = ReferenceEngine().prepare(s)
        t1 = time.perf_counter()
        it = run.frames()
        next(it)
        t2 = time.perf_counter()
        count = sum(1 for _ in it)
        t3 = time.perf_counter()
    return {"encode_ms": 1000.0 * (t1 - t0), "ms_per_frame": 1000.0 * (t3 - t2) / max(count, 1), "frames": count + 1,
            "peak_mb": mem.mb}


BLENDER_SCRIPT = r"""
import importlib, json, resource, sys, time
import numpy as np
bpy = importlib.import_module("bpy")   # this script runs in a child Python; the engine itself never loads Blender
data = np.load(sys.argv[1])
frames, threads = int(sys.argv[2]), int(sys.argv[3])
v, f, pins = data["vertices"], data["faces"], data["pins"]
bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.render.threads_mode = "FIXED"
scene.render.threads = threads
def status_kb(key):
    for line in open("/proc/self/status").read().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
try:
    open("/proc/self/clear_refs", "w").write("5")
    rss0, peak_key = status_kb("VmRSS"), "VmHWM"
except OSError:
    rss0, peak_key = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, None
t0 = time.perf_counter()
mesh = bpy.data.meshes.new("bench")
mesh.vertices.add(len(v))
mesh.vertices.foreach_set("co", v.astype(np.float32).ravel())
mesh.loops.add(3 * len(f))
mesh.loops.foreach_set("vertex_index", f.astype(np.int32).ravel())
mesh.polygons.add(len(f))
mesh.polygons.foreach_set("loop_start", np.arange(0, 3 * len(f), 3, dtype=np.int32))
mesh.polygons.foreach_set("loop_total", np.full(len(f), 3, dtype=np.int32))
mesh.update()
obj = bpy.data.objects.new("bench", mesh)
scene.collection.objects.link(obj)
group = obj.vertex_groups.new(name="pin")
group.add([int(i) for i in pins], 1.0, "REPLACE")
mod = obj.modifiers.new("Cloth", "CLOTH")
mod.settings.vertex_group_mass = "pin"
scene.frame_start, scene.frame_end = 1, frames
mod.point_cache.frame_start, mod.point_cache.frame_end = 1, frames
scene.frame_set(1)
dg = bpy.context.evaluated_depsgraph_get()
obj.evaluated_get(dg).data.vertices[0].co
t1 = time.perf_counter()
for k in range(2, frames + 1):
    scene.frame_set(k)
    dg = bpy.context.evaluated_depsgraph_get()
    obj.evaluated_get(dg).data.vertices[0].co
t2 = time.perf_counter()
moved = float(np.linalg.norm(np.array(obj.evaluated_get(dg).data.vertices[len(v) // 2].co) - v[len(v) // 2]))
rss1 = status_kb(peak_key) if peak_key else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("BENCH_JSON " + json.dumps({"encode_ms": 1000 * (t1 - t0), "ms_per_frame": 1000 * (t2 - t1) / max(frames - 1, 1),
                                   "frames": frames, "peak_mb": (rss1 - rss0) / 1024.0, "threads": threads,
                                   "blender": bpy.app.version_string, "moved_m": moved}))
"""


def bench_blender_cloth(mesh, setup, frames: int, threads: int, timeout: float = 900.0) -> dict:
    """Blender cloth in a child Python (needs the `bpy` module); {'skipped': reason} otherwise."""
    import importlib.util
    if importlib.util.find_spec("bpy") is None:
        return {"skipped": "bpy is not installed (pip install bpy) - Blender cloth not measured"}
    with tempfile.TemporaryDirectory() as tmp:
        arrays = Path(tmp) / "mesh.npz"
        np.savez(arrays, vertices=np.asarray(mesh.vertices, np.float32), faces=np.asarray(mesh.faces, np.int32),
                 pins=np.nonzero(setup.pin_weight > 0)[0].astype(np.int64))
        script = Path(tmp) / "blender_bench.py"
        script.write_text(BLENDER_SCRIPT)
        env = dict(os.environ, BLENDER_USER_CONFIG=tmp, BLENDER_USER_SCRIPTS=tmp, BLENDER_USER_DATAFILES=tmp)
        try:
            proc = subprocess.run([sys.executable, str(script), str(arrays), str(frames), str(threads)],
                                  capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            return {"skipped": f"Blender cloth took longer than {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH_JSON "):
            return json.loads(line[len("BENCH_JSON "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"skipped": f"Blender cloth failed: {tail[0][:200]}"}


# --------------------------------------------------------------------------- the command

def machine() -> dict:
    from .metrics import machine_info
    info = machine_info()
    info["threads"] = torch.get_num_threads()
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def bench(model_path=None, sizes=(1000, 10000, 100000), frames=24, reference=True, blender=True, cuda=None,
          reference_frames=None, threads=None, quiet=False, cloth=True, contact=True) -> dict:
    from ..api import default_model_path
    from ..core.progress import ProgressBar
    from ..learned.runtime import NeurokEngine
    if threads:
        torch.set_num_threads(int(threads))
    model_path = model_path or default_model_path()
    if frames < 2:
        raise NeurokError("bench needs at least 2 frames")
    cuda = torch.cuda.is_available() if cuda is None else cuda
    devices = ["cpu"] + (["cuda"] if cuda else [])
    engines = {d: NeurokEngine(model_path, device=d) for d in devices}
    warm = bench_setup(bench_mesh(200), 3)   # first-call costs (lazy initialisation) stay out of the rows
    for eng in engines.values():
        bench_neurok(eng, warm, eng.device)
    cpu_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    rows, notes = [], []
    cloth_sizes = [n for n in sizes if n <= CLOTH_UP_TO] if cloth else []
    contact_sizes = [n for n in sizes if n <= CONTACT_UP_TO] if contact else []
    steps = (len(sizes) * (len(devices) + int(reference) + int(blender)) + len(cloth_sizes) * (2 + int(blender))
             + 2 * len(contact_sizes)
             + sum(1 for n in cloth_sizes if len(bench_sheet(n).vertices) > SHEET_PROXY_VERTICES))
    bar = None if quiet else ProgressBar(steps, "bench")
    for n in sizes:
        mesh = bench_mesh(n)
        setup = bench_setup(mesh, frames)
        nv = int(len(mesh.vertices))
        for d, eng in engines.items():
            r = bench_neurok(eng, setup, d)
            rows.append(dict({"engine": "neurok", "device": d, "vertices": nv}, **r, torch_threads=torch.get_num_threads()))
            if bar:
                bar.update(1, postfix=f"neurok/{d} {nv} v: {r['ms_per_frame']:.1f} ms/frame")
        if reference:
            rf = min(frames, reference_frames) if reference_frames else (min(frames, 3) if nv >= LARGE_MESH else min(frames, 8))
            r = bench_reference(setup, rf)
            row = dict({"engine": "reference", "device": "cpu", "vertices": nv}, **r)
            if rf < frames:
                row["note"] = f"frames capped at {rf} of {frames} (cost per frame is steady)"
            rows.append(row)
            if bar:
                bar.update(1, postfix=f"reference {nv} v: {r['ms_per_frame']:.0f} ms/frame")
        if blender:
            r = bench_blender_cloth(mesh, setup, frames, cpu_threads)
            if "skipped" in r:
                notes.append(f"blender_cloth at {nv} vertices: {r['skipped']}")
            else:
                rows.append(dict({"engine": "blender_cloth", "device": "cpu", "vertices": nv}, **r))
            if bar:
                bar.update(1, postfix=f"blender cloth {nv} v")
        if n in contact_sizes:   # the learned engine on the sphere thrown along a floor: contact and friction
            for fine in ("off", "on"):      # the latent step alone, then with the fine level
                r = bench_neurok(engines["cpu"], contact_setup(mesh, frames), "cpu", solid_layer=fine)
                rows.append(dict({"engine": "neurok_solid_contact", "device": "cpu", "vertices": nv}, **r,
                                 torch_threads=torch.get_num_threads()))
                if bar:
                    bar.update(1, postfix=f"neurok solid contact{', fine level' if fine == 'on' else ''} {nv} v: "
                                          f"{r['ms_per_frame']:.1f} ms/frame")
        if n in cloth_sizes:   # the learned engine on a sheet of cloth: its handles follow the sheet's area
            sheet = bench_sheet(n)
            r = bench_neurok(engines["cpu"], bench_setup(sheet, frames, CLOTH_SCENE), "cpu")
            rows.append(dict({"engine": "neurok_cloth", "device": "cpu", "vertices": int(len(sheet.vertices))}, **r,
                             torch_threads=torch.get_num_threads()))
            if bar:
                bar.update(1, postfix=f"neurok cloth {len(sheet.vertices)} v: {r['ms_per_frame']:.1f} ms/frame")
            r = bench_neurok(engines["cpu"], bench_setup(sheet, frames, dict(CLOTH_SCENE, self_collision=True)), "cpu",
                             sheet_layer="on")
            rows.append(dict({"engine": "neurok_cloth", "device": "cpu", "vertices": int(len(sheet.vertices))}, **r,
                             torch_threads=torch.get_num_threads(), self_collision=True,
                             note="with self-collision (scene key self_collision: true, 5 mm, friction 0.5; the "
                                  "add-on's cloth default) and the sheet layer"))
            if bar:
                bar.update(1, postfix=f"neurok cloth, self-collision {len(sheet.vertices)} v: "
                                      f"{r['ms_per_frame']:.1f} ms/frame")
            if len(sheet.vertices) > SHEET_PROXY_VERTICES:     # the layer on every vertex (High's)
                r = bench_neurok(engines["cpu"], bench_setup(sheet, frames, CLOTH_SCENE), "cpu", sheet_layer="full")
                rows.append(dict({"engine": "neurok_cloth", "device": "cpu", "vertices": int(len(sheet.vertices))}, **r,
                                 torch_threads=torch.get_num_threads(), full_layer=True,
                                 note="the sheet layer on every vertex (sheet_layer full), no proxy"))
                if bar:
                    bar.update(1, postfix=f"neurok cloth, full layer {len(sheet.vertices)} v: "
                                          f"{r['ms_per_frame']:.1f} ms/frame")
            if blender:     # Blender's cloth on the same sheet, pinned along the same edge
                r = bench_blender_cloth(sheet, bench_setup(sheet, frames, CLOTH_SCENE), frames, cpu_threads)
                if "skipped" not in r:
                    rows.append(dict({"engine": "blender_cloth_sheet", "device": "cpu",
                                      "vertices": int(len(sheet.vertices))}, **r))
                if bar:
                    bar.update(1, postfix=f"blender cloth, sheet {len(sheet.vertices)} v")
    if bar:
        bar.close()
    result = {"format": "neurok.bench/1", "machine": machine(), "model": str(model_path), "rows": rows,
              "ratios": ratios(rows), "scene": "geodesic sphere, rubber, pinned slab at low x, 10 m/s^2 push + gravity, dt 1/24 s",
              "cloth_scene": "1 m square sheet of cloth, top edge pinned, 6 m/s^2 sine gust at 0.7 Hz + gravity, dt 1/24 s",
              "contact_scene": "the same sphere, rubber, unpinned, on a floor at its lowest point (friction 0.5), "
                               "thrown along x at 2 m/s + gravity, dt 1/24 s"}
    if notes:
        result["notes"] = notes
    return result


def is_default_layer_row(r) -> bool:
    """The cloth sheet with its layer as a default (Medium) run has it: no self-collision, and
    on its proxy where it has one."""
    return (r["engine"] == "neurok_cloth" and bool(r.get("sheet_layer")) and not r.get("self_collision")
            and not r.get("full_layer"))


def ratios(rows) -> dict:
    """Speed-up of neurok (cpu) over the other engines per size: their ms_per_frame / neurok's; and
    what self-collision costs the cloth sheet: its row's ms_per_frame / the layered row's."""
    base = {r["vertices"]: r["ms_per_frame"] for r in rows if r["engine"] == "neurok" and r["device"] == "cpu"}
    out = {}
    for other in ("reference", "blender_cloth"):
        vals = {str(r["vertices"]): r["ms_per_frame"] / base[r["vertices"]] for r in rows
                if r["engine"] == other and r["vertices"] in base and base[r["vertices"]] > 0}
        if vals:
            out[f"{other}_over_neurok"] = vals
    layered = {r["vertices"]: r["ms_per_frame"] for r in rows if is_default_layer_row(r)}
    sheet = {str(r["vertices"]): r["ms_per_frame"] / layered[r["vertices"]] for r in rows
             if r["engine"] == "blender_cloth_sheet" and r["vertices"] in layered}
    if sheet:
        out["blender_cloth_sheet_over_neurok_cloth_layer"] = sheet
    folds = {str(r["vertices"]): r["ms_per_frame"] / layered[r["vertices"]] for r in rows
             if r["engine"] == "neurok_cloth" and r.get("self_collision") and r["vertices"] in layered}
    if folds:
        out["neurok_cloth_self_collision_over_layer"] = folds
    cuda = {r["vertices"]: r["ms_per_frame"] for r in rows if r["engine"] == "neurok" and r["device"] == "cuda"}
    if cuda:
        out["neurok_cpu_over_cuda"] = {str(n): base[n] / cuda[n] for n in cuda if n in base and cuda[n] > 0}
    return out


def bench_command(json_path, model_path=None, sizes=(1000, 10000, 100000), frames=24, **kwargs) -> dict:
    from .metrics import write_json
    result = bench(model_path, list(sizes), frames, **kwargs)
    write_json(json_path, result)
    for r in result["rows"]:
        extra = (f", cpu {r['cpu_ms_per_frame']:.2f} ms/frame, {r['handles']} handles, cubature {r['cubature_samples']} "
                 f"samples (force error {r['cubature_force_error']:.3f})") if "cubature_samples" in r else ""
        print(f"{r['engine']:>13} {r['device']:>4} {r['vertices']:>7} v: encode {r['encode_ms']:8.1f} ms, "
              f"{r['ms_per_frame']:9.2f} ms/frame, peak {r['peak_mb']:7.1f} MB ({r['frames']} frames){extra}")
    for name, vals in result["ratios"].items():
        print(f"{name}: " + ", ".join(f"{k} v: {v:.1f}x" for k, v in vals.items()))
    for note in result.get("notes", []):
        print(f"note: {note}")
    print(f"wrote {json_path}")
    return result
