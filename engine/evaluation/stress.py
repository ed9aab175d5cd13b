"""Stress scenes: long rollouts (a 1,000-frame stability run), force scales 0.1x..100x the largest
training push, very soft and very stiff materials, one shape at several vertex counts, a thin
plate and a mesh of two separate bodies. Ground truth from the reference simulator at the data
generator's settings where affordable; every run is also measured for plausibility (volume,
strain, flipped triangles), which needs no ground truth.
"""
from __future__ import annotations

import time

import numpy as np

from ..api import open_engine
from ..core.formats import Mesh
from ..core.progress import ProgressBar
from ..core.scene import setup_from_scene
from ..training.generate import GENERATOR_LATTICE, GENERATOR_SUBSTEP
from ..training.shapes import make_shape
from .distances import bbox_diagonal, first_unstable_frame, rel_l2_curve
from .metrics import predict_neurok, sequence_metrics
from .physics_cache import PhysicsRunFailed, compute_now, scene_job
from .plausibility import plausibility_series, plausibility_summary

PUSH_MAX = 30.0       # m/s^2: the largest uniform push in the training scenes (generate.random_scene)


def _scene(frames, material, pins=True, accel=(0.0, 0.0, 0.0), floor=None, velocity=(0.0, 0.0, 0.0)):
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, -9.81],
             "material": dict(material), "pins": [], "forces": [], "floor": floor,
             "initial": {"velocity": list(velocity)}}
    if pins:
        scene["pins"].append({"select": {"box": {"min": [0, 0, 0], "max": [0.15, 1, 1]}}, "strength": 1.0})
    if any(accel):
        scene["forces"].append({"select": {"box": {"min": [0, 0, 0], "max": [1, 1, 1]}}, "accel": list(accel),
                                "profile": {"type": "constant"}})
    return scene


def two_bodies(rng, target=1200):
    a = make_shape("sphere", rng, target // 2)
    b = make_shape("blob", rng, target // 2)
    shift = np.array([1.2 * (np.ptp(a.vertices[:, 0]) + np.ptp(b.vertices[:, 0])) / 2, 0.0, 0.0])
    bz = b.vertices + shift
    bz[:, 2] += a.vertices[:, 2].min() - b.vertices[:, 2].min()     # both rest on the same floor
    v = np.concatenate([a.vertices, bz])
    f = np.concatenate([a.faces, b.faces + len(a.vertices)])
    return Mesh(v - 0.5 * (v.min(0) + v.max(0)), f, name="two_bodies")


def thin_plate(rng, target=1200, thickness=0.04):
    m = make_shape("box", rng, target)
    v = m.vertices.copy()
    # flatten along the shortest axis of the bounding box to 4% of the longest side
    ext = np.ptp(v, axis=0)
    axis = int(np.argmin(ext))
    c = v[:, axis].mean()
    v[:, axis] = c + (v[:, axis] - c) * thickness * ext.max() / max(ext[axis], 1e-9)
    return Mesh(v, m.faces, name="thin_plate")


def stress_cases(cfg):
    """(name, group, parameter, mesh, scene, want truth) of the stress suite."""
    frames = cfg["stress_frames"]
    rubber = {"preset": "rubber"}
    blob = make_shape("blob", np.random.default_rng(5), 800)
    box = make_shape("box", np.random.default_rng(6), 800)
    cases = [("long: pinned swing", "long", cfg["long_frames"], blob,
              _scene(cfg["long_frames"], rubber, velocity=(0.0, 1.0, 0.5)), False),
             ("long: drop on floor", "long", cfg["long_frames"], box,
              _scene(cfg["long_frames"], {"preset": "jelly"}, pins=False, floor={"z": float(box.vertices[:, 2].min()) - 0.1},
                     velocity=(0.3, 0.0, -1.0)), False)]
    for s in cfg["force_scales"]:
        truth = cfg.get("truth_max_force") is None or s <= cfg["truth_max_force"]
        cases.append((f"force {s:g}x", "force", s, blob, _scene(frames, rubber, accel=(0.0, s * PUSH_MAX, 0.0)), truth))
    for E in (500.0, 1e7):
        cases.append((f"material E={E:g} Pa", "material", E, blob,
                      _scene(frames, {"preset": "rubber", "stiffness": E}, accel=(0.0, PUSH_MAX / 3, 0.0)), True))
    for n in cfg["resolutions"]:
        sphere = make_shape("sphere", np.random.default_rng(0), n)
        cases.append((f"resolution {len(sphere.vertices)} v", "resolution", len(sphere.vertices), sphere,
                      _scene(frames, rubber, accel=(0.0, PUSH_MAX / 3, 0.0)), len(sphere.vertices) <= cfg["truth_max_vertices"]))
    two = two_bodies(np.random.default_rng(7))
    cases.append(("two separate bodies", "topology", None, two,
                  _scene(frames, rubber, pins=False, accel=(0.0, PUSH_MAX / 3, 0.0),
                         floor={"z": float(two.vertices[:, 2].min())}), True))
    plate = thin_plate(np.random.default_rng(8))
    cases.append(("thin plate (4%)", "topology", None, plate, _scene(frames, rubber), True))
    skip = set(cfg.get("stress_without_truth", ()))
    return [(n, g, p, m, s, want and n not in skip) for n, g, p, m, s, want in cases]


def truth_job(mesh, scene):
    """The reference run of a stress case, at the data generator's settings."""
    return scene_job("reference", mesh, scene, lattice_cells=GENERATOR_LATTICE, substep=GENERATOR_SUBSTEP)


def stress_jobs(cfg):
    """The reference runs the stress suite compares against (`physics_cache.Job`)."""
    return [truth_job(mesh, scene) for _, _, _, mesh, scene, want in stress_cases(cfg) if want]


def run_stress(cfg, model_path, quiet=False, physics=None):
    """Every stress case; the reference runs come from `physics` (a PhysicsCache) when given."""
    engine = open_engine("neurok", model=model_path, device="cpu")
    cases = stress_cases(cfg)
    get = physics.get if physics else compute_now
    bar = None if quiet else ProgressBar(len(cases), "stress")
    rows, preds = [], {}
    for name, group, param, mesh, scene, want_truth in cases:
        setup = setup_from_scene(mesh, scene)
        t0 = time.perf_counter()
        pred, fault, err, ms = predict_neurok(engine, setup)
        t1 = time.perf_counter()
        row = {"name": name, "group": group, "param": param, "vertices": int(len(mesh.vertices)), "frames": setup.frames,
               "ms_per_frame": ms, "nan": bool(not np.all(np.isfinite(pred))), "fault": fault, "error": err,
               "seconds": round(t1 - t0, 2)}
        truth = None
        if want_truth:
            try:
                truth = get(truth_job(mesh, scene))
            except PhysicsRunFailed as e:   # no ground truth for this case
                row["truth_error"] = str(e)
        if truth is not None:
            m = sequence_metrics(pred, truth, setup, fault)
            still = rel_l2_curve(np.repeat(truth[:1], len(truth), 0), truth, bbox_diagonal(setup.rest))
            row.update(rel_l2_mean=m["rel_l2_mean"], rel_l2_last=float(m["curve"][-1]), chamfer_l1=m.get("chamfer_l1"),
                       plausibility=m["plausibility"], truth_plausibility=m["truth_plausibility"],
                       unstable=m["unstable"], hold_still_rel_l2_mean=float(still[1:].mean()),
                       truth_motion=float(still[-1]))
        else:
            bad = first_unstable_frame(pred, setup.rest)
            row["plausibility"] = plausibility_summary(plausibility_series(pred, setup))
            row["unstable"] = bool(fault is not None or bad is not None)
            row["truth"] = "not simulated (the reference is too slow for this case in this preset)"
        rows.append(row)
        if group == "resolution":
            preds[row["vertices"]] = (setup.rest, pred)
        if bar:
            bar.update(1, postfix=f"{name}: " + (f"rel_l2 {row['rel_l2_mean']:.4f}" if "rel_l2_mean" in row else
                                                 ("unstable" if row["unstable"] else "stable")))
    if bar:
        bar.close()
    consistency = resolution_consistency(preds)
    for row in rows:
        if row["group"] == "resolution" and row["vertices"] in consistency:
            row["cross_resolution_rel"] = consistency[row["vertices"]]
    summary = {"runs": len(rows), "nan_runs": sum(r["nan"] for r in rows),
               "unstable_runs": sum(bool(r.get("unstable")) for r in rows),
               "faults": sum(r["fault"] is not None for r in rows)}
    return {"rows": rows, "summary": summary, "push_max": PUSH_MAX}


def resolution_consistency(preds):
    """Mean distance (over frames and the smallest mesh's vertices) between each resolution's
    motion and the smallest one's, at the nearest rest vertices, / diagonal."""
    from scipy.spatial import cKDTree
    if len(preds) < 2:
        return {}
    sizes = sorted(preds)
    rest0, pred0 = preds[sizes[0]]
    diag = bbox_diagonal(rest0)
    out = {}
    for n in sizes[1:]:
        rest, pred = preds[n]
        idx = cKDTree(rest).query(rest0)[1]
        u0 = pred0 - rest0[None]
        u = pred[:, idx] - rest[idx][None]
        T = min(len(u0), len(u))
        out[n] = float(np.linalg.norm(u[:T] - u0[:T], axis=-1).mean() / diag)
    return out
