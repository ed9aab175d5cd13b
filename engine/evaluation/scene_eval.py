"""Reference | model | oracle on the evaluation scenes (`scenes.py`) and the pinned beam
(`physical.py`): distances at the three horizons, plausibility of all three, the noise floor,
and the pictures (contact sheet + GIF per scene, `render.py`).

Ground truth is the reference simulator on a lattice fine enough that its answer no longer
changes with it (`EVALUATION_LATTICE`; the data generator's coarser 4 cells are for making data
fast); the oracle runs on the same discretisation, so its error is the subspace's alone.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..api import open_engine
from ..core.progress import ProgressBar
from ..core.scene import setup_from_scene
from ..reference.simulator import ReferenceSimulator
from ..training.generate import GENERATOR_SUBSTEP
from .distances import bbox_diagonal, rel_l2_curve
from .metrics import predict, sequence_metrics, truth_measures
from .physics_cache import PhysicsCache, PhysicsRunFailed, compute_now, scene_job
from .physical import beam_quantities, compare
from .render import animation, contact_sheet
from .plausibility import crossing_triangle_pairs
from .scenes import DRAPE_TABLE, beam_mesh, beam_scene, evaluation_scenes, overhang_tilt

# Quadratic cells along a solid's longest side for the ground truth (the reference caps a body at
# 500 occupied cells). At the generator's 4 the soft toy is 24 cells and (before solid physics 4) its
# bottom layer of nodes held it upright on a flat sole wider than its feet, and the torus has one cell through
# its tube; at 12 the solids' paths are within 0.003 (toy) of their 16-cell paths, where 4 cells
# were 0.24 from them (`experiments/ground_truth_convergence.py`, docs/EVALUATION.md).
EVALUATION_LATTICE = 12
# Scenes whose path is converged on a coarser lattice, and that lattice: the jelly cube at 4 cells
# is 0.003 from its 12-cell path (`experiments/ground_truth_convergence.py`, docs/MODEL_CARD.md), at a
# fifth of the reference's time and the oracle's.
CONVERGED_COARSER = {"jelly_poke": 4}
# Scenes whose reference does not finish on the evaluation's lattice, and the lattice where it does:
# the jelly Suzanne dropped and the jelly ico sphere poked, both on the floor with its friction, stop
# on the work budget at frames 4 and 6 (a retry's substep spent its 300 line-search halvings, or did
# not converge in 100 Newton iterations; without the floor's friction the Suzanne's frame 2 passes in
# its first attempt, and the ico sphere's frames 5-7 do: docs/RELIABILITY.md). The ico sphere is
# capped at 8 cells already (500 occupied cells), so its path is the 6-cell one. Neither is converged
# (the Suzanne's tumble differs by 0.077 between 8 and 12 cells), so their figures say less than the
# other solids'.
FINISHED_COARSER = {"monkey": 8, "ico_sphere": 6}


def ground_truth_settings(cfg=None, scene=None) -> dict:
    """The reference's settings for ground truth: a preset's `truth_lattice` (else
    EVALUATION_LATTICE), or a coarser one where `scene`'s path is converged there already or the
    reference finishes only there."""
    cells = (cfg or {}).get("truth_lattice", EVALUATION_LATTICE)
    coarser = min(CONVERGED_COARSER.get(scene, cells), FINISHED_COARSER.get(scene, cells))
    return {"lattice_cells": min(cells, coarser), "substep": GENERATOR_SUBSTEP}


REFERENCE_SETTINGS = ground_truth_settings()


def reference_rollout(setup, settings=None):
    sim = ReferenceSimulator(setup, **(settings or REFERENCE_SETTINGS))
    return np.stack(list(sim.iter_frames())).astype(np.float32)


def _summary(m):
    keep = ("rel_l2_mean", "horizons", "unstable", "unstable_frame", "plausibility", "plausibility_24",
            "centroid_path_error", "amplitude_ratio", "end_turn_degrees", "chamfer_l1")
    return {k: m.get(k) for k in keep}


def scene_jobs(cfg, name, mesh, scene) -> dict:
    """The physics one evaluation scene needs (`physics_cache.Job`): its ground truth, the oracle
    on the same lattice and, for the preset's `noise_scenes`, the noise floor."""
    settings = ground_truth_settings(cfg, name)
    jobs = {"reference": scene_job("reference", mesh, scene, **settings),
            "oracle": scene_job("oracle", mesh, scene, handles=cfg.get("oracle_handles"), **settings)}
    if name in cfg.get("noise_scenes", ()):
        jobs["noise_floor"] = scene_job("noise_floor", mesh, scene, lattice_cells=settings["lattice_cells"],
                                        frames=min(cfg.get("noise_frames", 48), int(scene["frames"])))
    return jobs


def scenes_physics(cfg, cache_dir):
    """[(case, its jobs)] for the preset's scenes (`evaluation_scenes`) and the notes on what
    could not be made."""
    cases, notes = evaluation_scenes(cfg["scenes"], cfg["scene_frames"], cache_dir)
    return [(case, scene_jobs(cfg, case[0], case[2], case[3])) for case in cases], notes


def run_scenes(cfg, model_path, out, fig_dir, quiet=False, physics=None) -> dict:
    """Every evaluation scene: {"scenes": [row], "notes": [...], "oracle": {...}}; frames are kept
    in `out/scenes/<name>.npz`, pictures in `fig_dir/eval_<name>_sheet.png` and `.gif`. The
    reference, oracle and noise floor come from `physics` (a PhysicsCache; default `out/physics`)."""
    out, fig_dir = Path(out), Path(fig_dir)
    (out / "scenes").mkdir(parents=True, exist_ok=True)
    physics = physics or PhysicsCache(out / "physics")
    engine = open_engine("neurok", model=model_path, device="cpu")
    prior = open_engine("neurok", model=model_path, device="cpu")   # the same checkpoint, learned layers at zero
    prior.model.classical_prior()
    handles = cfg.get("oracle_handles")            # None: per mesh, as many as the model's
    cases, notes = scenes_physics(cfg, out / "meshes")
    bar = None if quiet else ProgressBar(len(cases), "scenes")
    rows = []
    for (name, title, mesh, scene, source), jobs in cases:
        setup = setup_from_scene(mesh, scene)
        t0 = time.perf_counter()
        row = {"name": name, "title": title, "source": source, "vertices": int(len(mesh.vertices)),
               "frames": int(setup.frames), "kind": setup.material.kind,
               "truth_lattice": jobs["reference"].options["lattice_cells"]}
        try:
            true = physics.get(jobs["reference"])
            po, fo, eo, ms_o, oracle_handles = physics.get(jobs["oracle"])
        except PhysicsRunFailed as e:
            row["error"] = f"reference failed: {e}"
            rows.append(row)
            continue
        truth = truth_measures(true, setup)
        pred, fault, err, ms = predict(engine, setup)
        diag = bbox_diagonal(setup.rest)
        still = rel_l2_curve(np.repeat(true[:1], len(true), 0), true, diag)
        mm = sequence_metrics(pred, true, setup, fault, truth=truth, keep_series=True)
        mo = sequence_metrics(po, true, setup, fo, truth=truth, keep_series=True)
        pp, fp, _, _ = predict(prior, setup)
        row.update(handles=oracle_handles, prior=_summary(sequence_metrics(pp, true, setup, fp, truth=truth)))
        row.update(neurok=_summary(mm), oracle=_summary(mo), reference={"plausibility": truth["summary"]},
                   hold_still={"rel_l2_mean": float(still[1:].mean()), "horizons": {
                       "24": float(still[1:25].mean()) if len(still) > 24 else None,
                       "100": float(still[1:101].mean()) if len(still) > 100 else None, "all": float(still[1:].mean())}},
                   ms_per_frame=ms, oracle_ms_per_frame=ms_o, model_error=err, oracle_error=eo,
                   series={"neurok": mm["series"], "oracle": mo["series"], "reference": mm["truth_series"],
                           "rel_l2": {"neurok": mm["curve"], "oracle": mo["curve"], "hold_still": still}})
        row["noise_floor"] = (physics.get(jobs["noise_floor"]) if "noise_floor" in jobs
                              else {"available": False, "note": "not measured for this scene in this preset"})
        np.savez_compressed(out / "scenes" / f"{name}.npz", reference=true, neurok=pred, oracle=po, faces=setup.faces)
        columns = {"reference": true, "neurok": pred, "oracle": po}
        if setup.material.kind == "cloth":
            row["cloth"] = cloth_measures(columns, setup, name)
        floor = setup.floor_z
        row["sheet"] = str(contact_sheet(columns, setup.faces, fig_dir / f"eval_{name}_sheet.png", floor_z=floor,
                                         title=f"{name}: reference | NeuROK model | oracle, {oracle_handles} handles"))
        row["gif"] = str(animation(columns, setup.faces, fig_dir / f"eval_{name}.gif", dt=setup.dt, floor_z=floor,
                                   max_frames=cfg.get("gif_frames", 48)))
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        if bar:
            bar.update(1, postfix=f"{name}: model {mm['rel_l2_mean']:.3f} oracle {mo['rel_l2_mean']:.3f} "
                                  f"hold {still[1:].mean():.3f}")
    if bar:
        bar.close()
    same = "as many handles (12 coordinates each) as the model has on each mesh"
    return {"scenes": rows, "notes": notes,
            "oracle": {"handles": handles or "per mesh", "dofs": 12 * handles if handles else same,
                       "model_latent": "per mesh (its handles, `learned/subspace.resolution`)"},
            "reference_settings": ground_truth_settings(cfg),
            "converged_coarser": {n: c for n, c in CONVERGED_COARSER.items() if n in cfg["scenes"]},
            "finished_coarser": {n: c for n, c in FINISHED_COARSER.items() if n in cfg["scenes"]}}


def far_edge(reference) -> np.ndarray | None:
    """The twentieth of the vertices farthest from those the reference holds still (its pins
    move under a millimetre), or None when it holds none."""
    held = np.abs(reference - reference[0]).max(axis=(0, 2)) < 1e-3
    if not held.any():
        return None
    distance = np.linalg.norm(reference[0] - reference[0][held].mean(0), axis=-1)
    return np.argsort(distance)[-max(1, len(distance) // 20):]


def sheet_setups(names, frames, drape_frames=48):
    """[(name, Setup)] of the evaluation's scenes `names` at `frames` frames, the drape at
    `drape_frames` (the evaluation's: the cloth lands and settles), their meshes made in a
    temporary folder (the experiments' sheets)."""
    import tempfile
    with tempfile.TemporaryDirectory() as meshes:
        cases, _ = evaluation_scenes([n for n in names if n != "drape"], frames, meshes)
        if "drape" in names:
            cases += evaluation_scenes(["drape"], drape_frames, meshes)[0]
        return [(name, setup_from_scene(mesh, scene)) for name, _, mesh, scene, _ in cases]


def distance_and_hold_still(xs, ref) -> tuple[float, float]:
    """A rollout's distance to the reference `ref` (rel_l2 over frames 1..), and that distance as a
    multiple of a mesh's that holds the reference's first frame."""
    diagonal = bbox_diagonal(ref[0])
    distance = lambda a: float(rel_l2_curve(a, ref, diagonal)[1:].mean())
    d = distance(xs)
    return d, d / distance(np.repeat(ref[:1], len(ref), 0))


def sheet_summary(xs, ref, setup, name) -> str:
    """One line of what a viewer judges a sheet's rollout `xs` by against the reference's `ref`:
    distance over the rollout (and over holding still), mean edge strain, flipped triangles, the
    far edge's fall by frame 4 (pinned sheets), the overhang's tilt at the end ("drape")."""
    from ..core.measures import MeshMeasures
    mm = MeshMeasures(np.asarray(setup.rest), np.asarray(setup.faces))
    strain = lambda a: 100 * float(np.mean([np.abs(mm.edge_strain(x)).mean() for x in a[1:]]))
    flipped = lambda a: 100 * float(np.mean([mm.flipped_share(x) for x in a[1:]]))
    d, multiple = distance_and_hold_still(xs, ref)
    out = f"{d:.4f} ({multiple:.3f}x hold-still) | strain {strain(xs):.2f} % (ref {strain(ref):.2f}) | flipped {flipped(xs):.0f} % (ref {flipped(ref):.0f})"
    shape = _fall_and_tilt({"model": xs, "reference": ref}, setup, name)
    if "far_edge_fall_4" in shape:
        fall = {k: 1000 * v for k, v in shape["far_edge_fall_4"].items()}
        out += f" | far edge falls {fall['model']:.0f} mm by frame 4 (ref {fall['reference']:.0f})"
    if "overhang_tilt" in shape:
        tilt = shape["overhang_tilt"]
        out += f" | overhang {tilt['model']:.0f} deg from vertical (ref {tilt['reference']:.0f})"
    return out


def cloth_measures(columns, setup, name) -> dict:
    """What a viewer judges a sheet by, per run ({run: value}): how far its far edge falls in the
    first four frames (m; pinned sheets), how many triangle pairs pass through each other per frame
    (mean over frames), and for the drape the overhang's tilt from vertical in the last frame (degrees)."""
    out = {"crossing_pairs": {k: float(np.mean([crossing_triangle_pairs(x, setup.faces) for x in xs[1:]]))
                              for k, xs in columns.items()}}
    out.update(_fall_and_tilt(columns, setup, name))
    return out


def _fall_and_tilt(columns, setup, name) -> dict:
    """`cloth_measures`' far-edge fall by frame 4 (pinned sheets) and, for the drape, overhang tilt."""
    reference = columns["reference"]
    far = far_edge(reference)
    out = {}
    if far is not None and len(reference) > 4:
        out["far_edge_fall_4"] = {k: float(-(xs[4][far, 2] - xs[0][far, 2]).mean()) for k, xs in columns.items()}
    if name == "drape":
        out["overhang_tilt"] = {k: overhang_tilt(xs[-1], setup.rest, setup.faces, DRAPE_TABLE / 2)
                                for k, xs in columns.items()}
    return out


def beam_jobs(cfg) -> dict:
    """The beam's ground truth and oracle (`physics_cache.Job`)."""
    mesh, scene, settings = beam_mesh(), beam_scene(cfg["beam_frames"]), ground_truth_settings(cfg)
    return {"reference": scene_job("reference", mesh, scene, **settings),
            "oracle": scene_job("oracle", mesh, scene, handles=cfg.get("oracle_handles"), **settings)}


def run_beam(cfg, model_path, physics=None) -> dict:
    """Sag, first frequency and damping ratio of the pinned beam: reference, model, oracle (the
    two physics runs from `physics`, a PhysicsCache, when given)."""
    setup = setup_from_scene(beam_mesh(), beam_scene(cfg["beam_frames"]))
    engine = open_engine("neurok", model=model_path, device="cpu")
    jobs = beam_jobs(cfg)
    get = physics.get if physics else compute_now
    runs = {"reference": (get(jobs["reference"]), None, None)}
    pred, fault, err, _ = predict(engine, setup)
    runs["neurok"] = (pred, fault, err)
    po, fo, eo, _, handles = get(jobs["oracle"])
    runs["oracle"] = (po, fo, eo)
    quantities = {n: beam_quantities(x, setup.rest, setup.dt) for n, (x, _, _) in runs.items()}
    signals = {n: q.pop("signal") for n, q in quantities.items()}
    for n, (_, f, e) in runs.items():
        quantities[n].update(fault=f, error=e)
    return {"frames": setup.frames, "vertices": int(setup.num_vertices), "material": setup.material.to_dict(),
            "handles": handles, "length": 0.5, "width": 0.08, "quantities": quantities, "relative_errors": compare(quantities),
            "tip_signal": signals, "dt": setup.dt}
