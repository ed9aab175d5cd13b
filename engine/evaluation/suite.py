"""`neurok evalsuite --preset small|full [--out DIR] [--model CKPT]`: the evaluation report and its
figures file (the full preset's into docs/, the small one's into OUT/small; `report_folder`).

The runner only: each step lives in its own module and writes JSON under OUT/<preset>, so the
report can be rebuilt and checked.
1. an evaluation set (`make_eval_set`), seed 2 (training data uses seed 1), always including the
   held-out shape families (capsule, torus);
   then every physics run the later steps compare against (the reference's ground truth, the
   physics-exact oracle, the noise floor; `physics_cache.py`), one process per core (`workers`),
   kept in OUT/<preset>/physics so a run after a model change reuses them;
2. the latent-MLP baseline (`baselines.py`), trained in the model's latent space;
3. `eval.json` (`metrics.py`, the `neurok eval` contract): the model, hold-still, PCA-modal,
   latent-MLP and the reduced oracle (`oracle.py`) per split, family and scenario, with
   plausibility, horizons, the noise floor (`noise.py`) and energy drift (`energy.py`);
4. `scenes.json` (`scene_eval.py`): reference | model | oracle on meshes that are no procedural
   family (Blender primitives, bundled samples; `heldout.py`, `scenes.py`), with contact sheets
   and GIFs (`render.py`) in the report's figures/;
5. `beam.json`: sag, frequency and damping of a pinned beam (`physical.py`);
6. `stress.json` (`stress.py`): a 1,000-frame stability run, force scales, materials, resolutions;
7. `bench.json` (`bench.py`); 8. `ablations.json` (`ablations.py`, full preset);
9. EVALUATION.md (`report.py` fills `report_template.md`; plots from `plots.py`) and
   EVALUATION.json, the run's figures in one file (`key_figures.py`), which the tables of README.md
   and docs/MODEL_CARD.md are made from (`neurok figures`).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from ..api import default_model_path
from ..core.formats import NeurokError
from ..core.progress import ProgressBar
from ..training.generate import (CONVERGED_LATTICE, GENERATOR_LATTICE, HELDOUT_FAMILIES, DataSetPlan, load_index,
                                 make_sequences)
from ..training.shapes import FAMILIES
from .ablations import run_ablations
from .baselines import load_latent_mlp, model_training_data, train_latent_mlp
from .bench import bench
from .key_figures import collect, write_figures
from .metrics import drift_jobs, eval_jobs, evaluate, write_json
from .physics_cache import DATA, PhysicsCache
from .report import write_report
from .scene_eval import EVALUATION_LATTICE, beam_jobs, run_beam, run_scenes, scenes_physics
from .stress import run_stress, stress_jobs

ROOT = Path(__file__).resolve().parent.parent.parent

# The dropped monkey is the full preset's only: its tumble is not converged on any lattice the
# reference finishes (0.077 between 8 and 12 cells, docs/MODEL_CARD.md) and costs 12 minutes.
SMALL_SCENES = ("toy_drop", "jelly_poke", "flag_wind", "torus", "grid", "drape")
ALL_SCENES = ("toy_drop", "jelly_poke", "flag_wind", "monkey", "cone", "torus", "cylinder", "uv_sphere", "ico_sphere", "grid", "drape")

# The evaluation set's lattice (`set_lattice`): the converged one the model's solid training data is made
# on. On the generator's 4 cells a body stood on its lattice's flat sole before solid physics 4: the squeezed
# union of the small set stayed upright there (5 deg) where on 8 and 12 cells it tips over and rolls, as the model's does, and
# the dropped superquadric's path was 0.60 from its 8-cell path (`experiments/ground_truth_convergence.py
# --data data/eval/small`). The full preset's set is still the generator's: made again on 8 cells it is
# about 3 hours of one core (left for a run of its own).
PRESETS = {
    # the small preset's baseline learns from the first 24 of the model's training sequences: encoding
    # all 75 cloth sequences took 99 s, the longest piece of make eval-small
    "small": {"sequences": 6, "heldout": 2, "frames": 60, "seed": 2, "set_lattice": CONVERGED_LATTICE,
              "mlp_minutes": 1.0, "mlp_sequences": 24,
              "bench_sizes": (1000, 10000), "bench_frames": 24,   # the push's first frames take more Newton iterations: 6 overstated a frame
              "bench_reference_frames": 3,                        # the reference's cost per frame is steady
              "long_frames": 1000, "force_scales": (0.1, 1.0, 10.0, 100.0), "stress_frames": 24,
              "resolutions": (1000, 10000), "truth_max_vertices": 2000, "truth_max_force": 1.0,
              # the reference's slowest stress runs (205 and 120 s at the generator's lattice): full preset only
              "stress_without_truth": ("material E=500 Pa", "thin plate (4%)"),
              "scenes": SMALL_SCENES, "scene_frames": 36, "noise_scenes": ("jelly_poke",), "noise_frames": 12, "noise_sequences": 1,
              "beam_frames": 72, "oracle_handles": None, "truth_lattice": EVALUATION_LATTICE, "gif_frames": 36, "ablations": False, "energy_steps": 1000,
              "energy_tight": None, "workers": None},
    "full": {"sequences": 24, "heldout": 6, "frames": 201, "seed": 2, "set_lattice": GENERATOR_LATTICE,   # frame 0..200
             "mlp_minutes": 6.0, "mlp_sequences": None,
             "bench_sizes": (1000, 10000, 100000), "bench_frames": 24, "bench_reference_frames": None,
             "long_frames": 1000, "force_scales": (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0), "stress_frames": 48,
             "resolutions": (1000, 10000, 100000), "truth_max_vertices": 12000, "truth_max_force": None,
             "stress_without_truth": (),
             "scenes": ALL_SCENES, "scene_frames": 120, "noise_scenes": ("toy_drop", "torus", "grid"), "noise_frames": 48,
             "noise_sequences": 2,
             "beam_frames": 96, "oracle_handles": None, "truth_lattice": EVALUATION_LATTICE, "gif_frames": 60,
             "ablations": True, "ablation_sequences": 8, "ablation_handles": (4, 6, 8, 12), "energy_steps": 1000,
             "energy_tight": 1e-8, "workers": None},
}


# =========================================================================== the evaluation set

def pick_indices(seed, sequences, heldout):
    """Sequence indices of a data set made with `seed` whose shape families give `heldout`
    held-out and `sequences - heldout` other sequences (the family is the first random draw)."""
    chosen, held, other, i = [], 0, 0, 0
    while len(chosen) < sequences and i < 100000:
        family = str(np.random.default_rng([seed, i]).choice(FAMILIES))
        if family in HELDOUT_FAMILIES and held < heldout:
            chosen.append(i); held += 1
        elif family not in HELDOUT_FAMILIES and other < sequences - heldout:
            chosen.append(i); other += 1
        i += 1
    return chosen


def eval_set_plan(out, seed, sequences, heldout, frames, lattice_cells=GENERATOR_LATTICE) -> DataSetPlan:
    """The evaluation set in `out` sorted into kept and to make (`plan.todo`: missing or stale), solids
    on a lattice of `lattice_cells` (`generate.DataSetPlan`); nothing is written."""
    out = Path(out)
    indices = pick_indices(seed, sequences, heldout)
    plan = DataSetPlan(out, out / "index.json", seed, max(indices) + 1, None, lattice_cells)
    plan.settle(indices, frames, 1.0 / 24.0)
    return plan


def make_eval_set(out, seed, sequences, heldout, frames, workers=None, quiet=False, lattice_cells=GENERATOR_LATTICE):
    """Generate (or resume) the chosen sequences into `out` with an `index.json`, solids on a lattice
    of `lattice_cells`: sequences whose stamp still matches are kept, missing and stale ones made
    (`eval_set_plan`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plan = eval_set_plan(out, seed, sequences, heldout, frames, lattice_cells)
    todo = list(plan.todo)
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
    bar = None if quiet or not todo else ProgressBar(len(todo), f"eval set ({len(todo)} to make)")
    make_sequences(plan, todo, frames, 1.0 / 24.0, workers, bar)
    return out


# =========================================================================== the suite

def suite_jobs(cfg, data, out, model_path):
    """Every physics run the suite compares against (`physics_cache`): the oracle and noise floor
    of the evaluation set, the model's energy drift, the scenes' ground truth, oracle and noise
    floor, the beam's and the stress cases' reference runs."""
    entries = load_index(data)
    jobs = list(eval_jobs(entries, cfg.get("oracle_handles"), cfg["noise_sequences"], cfg["noise_frames"]).values())
    cases, _ = scenes_physics(cfg, out / "meshes")
    jobs += [job for _, scene_jobs in cases for job in scene_jobs.values()]
    if cfg["energy_steps"]:
        jobs += list(drift_jobs(model_path, cfg["energy_steps"], True, cfg["energy_tight"]).values())
    return jobs + list(beam_jobs(cfg).values()) + stress_jobs(cfg)


def make_kept_physics(preset="small", out_dir="eval_out", model_path=None, data_dir=None) -> dict:
    """Only what the evaluation keeps in data/ (the evaluation set, the reference's, the oracle's
    and the noise floor's answers), made or resumed, longest first; nothing of the model runs.
    For building the kept physics ahead, across sessions. Then the kept answers that neither
    preset reads any more are deleted (the physics of sequences made again, say)."""
    cfg = PRESETS[preset]
    kept = Path(data_dir) if data_dir else DATA
    data = make_eval_set(kept / "eval" / preset, cfg["seed"], cfg["sequences"], cfg["heldout"], cfg["frames"],
                         workers=cfg.get("workers"), lattice_cells=cfg["set_lattice"])
    model_path = str(model_path or default_model_path())
    physics = PhysicsCache(Path(out_dir) / preset / "physics", kept=kept / "physics")
    jobs = [j for j in suite_jobs(cfg, data, Path(out_dir) / preset, model_path) if physics.keeps(j)]
    info = physics.prefetch(jobs, workers=cfg.get("workers"))
    print(f"[evalsuite] kept physics of the {preset} preset: {info['computed']} of {info['jobs']} made "
          f"({info['stale']} stale) in {info['seconds'] / 60:.1f} min", flush=True)
    if all((kept / "eval" / name / "index.json").is_file() for name in PRESETS):   # else its answers look unused
        others = [j for name, other in PRESETS.items() if name != preset
                  for j in suite_jobs(other, kept / "eval" / name, Path(out_dir) / name, model_path)]
        unused = physics.prune_kept(jobs + others)
        if unused:
            print(f"[evalsuite] deleted {len(unused)} kept answer(s) no preset reads", flush=True)
    return info


def run_suite(preset="small", out_dir="eval_out", model_path=None, docs_dir=None, data_dir=None, **overrides):
    """`data_dir`: where the evaluation set and the model-free physics are kept (default data/, in
    the repository: `physics_cache.DATA`); everything that depends on the model goes under `out_dir`."""
    # noise_scenes: the scenes whose noise floor is measured (each costs two reference runs, one
    # at twice the resolution: minutes for a solid)
    if preset not in PRESETS:
        raise NeurokError(f"unknown preset '{preset}' (small or full)")
    unknown = set(overrides) - set(PRESETS[preset])
    if unknown:
        raise NeurokError(f"unknown evalsuite setting(s): {', '.join(sorted(unknown))}")
    cfg = dict(PRESETS[preset], **overrides)
    model_arg = model_path
    model_path = str(model_path or default_model_path())
    out = Path(out_dir) / preset
    out.mkdir(parents=True, exist_ok=True)
    docs = report_folder(preset, out, docs_dir)
    started = time.time()
    timings = {}

    def step(name):
        timings[name] = time.perf_counter()

    def done(name):
        timings[name] = round(time.perf_counter() - timings[name], 1)
        print(f"[evalsuite] {name}: {timings[name]:.0f} s", flush=True)

    step("eval set")
    kept = Path(data_dir) if data_dir else DATA
    data = make_eval_set(kept / "eval" / preset, cfg["seed"], cfg["sequences"], cfg["heldout"], cfg["frames"],
                         workers=cfg.get("workers"), lattice_cells=cfg["set_lattice"])
    done("eval set")

    # the latent-MLP baseline trains on one worker while the other starts on the physics
    step("physics and latent-MLP baseline")
    train_data, meta = model_training_data(model_path, str(data))
    mlp_path = out / "latent_mlp.pt"
    mlp_ok = False
    if mlp_path.is_file():
        try:
            mlp_ok = load_latent_mlp(mlp_path).meta.get("model") == model_path
        except NeurokError:
            mlp_ok = False
    also = [("latent-MLP baseline", train_mlp_file, (model_path, train_data, cfg["mlp_minutes"], str(mlp_path),
                                                    cfg.get("mlp_sequences")))
            ] if not mlp_ok and train_data else []
    physics = PhysicsCache(out / "physics", kept=kept / "physics")
    physics_info = physics.prefetch(suite_jobs(cfg, data, out, model_path), workers=cfg.get("workers"), also=also)
    done("physics and latent-MLP baseline")

    step("eval")
    result = evaluate(model_path, data, latent_mlp=str(mlp_path) if mlp_path.is_file() else None,
                      json_path=str(out / "eval.json"), energy_curves=True, oracle_handles=cfg.get("oracle_handles"),
                      noise_sequences=cfg["noise_sequences"], noise_frames=cfg["noise_frames"],
                      energy_steps=cfg["energy_steps"], energy_tight=cfg["energy_tight"], physics=physics)
    write_json(out / "eval.json", result)
    done("eval")

    step("scenes")
    scenes = run_scenes(cfg, model_path, out, docs / "figures", physics=physics)
    write_json(out / "scenes.json", scenes)
    done("scenes")

    step("beam")
    beam = run_beam(cfg, model_path, physics)
    write_json(out / "beam.json", beam)
    done("beam")

    step("stress")
    stress = run_stress(cfg, model_path, physics=physics)
    write_json(out / "stress.json", stress)
    done("stress")

    step("bench")
    bench_result = bench(model_path, cfg["bench_sizes"], cfg["bench_frames"],
                         reference_frames=cfg.get("bench_reference_frames"))
    write_json(out / "bench.json", bench_result)
    done("bench")

    if cfg.get("ablations"):
        step("ablations")
        ablations = run_ablations(cfg, model_path, data, train_data if train_data != str(data) else None, out / "ablations")
        write_json(out / "ablations.json", ablations)
        done("ablations")
    else:
        ablations = {"rows": [], "skipped": "the small preset runs no ablations (use --preset full)" if preset == "small"
                     else "the ablations were switched off for this run (ablations=False)"}
        write_json(out / "ablations.json", ablations)
    suite = {"preset": preset, "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
             "overrides": {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()},
             "model": model_path, "model_arg": model_arg,
             "model_meta": {k: meta.get(k) for k in ("data", "sequences", "steps", "seconds", "final_losses", "density", "closures", "free_run")},
             "training_data": train_data, "eval_data": str(data), "out": str(out), "timings_s": timings, "physics": physics_info,
             "source": source_description(),
             "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
             "wall_minutes": round((time.time() - started) / 60.0, 1)}
    write_json(out / "suite.json", suite)
    # the report reads the JSON as written (plain numbers and lists)
    loaded = {name: json.loads((out / f"{name}.json").read_text()) for name in ("eval", "scenes", "beam", "stress", "bench")}
    path = write_report(suite, loaded["eval"], loaded["scenes"], loaded["beam"], loaded["stress"], loaded["bench"],
                        ablations, docs)
    write_figures(docs / "EVALUATION.json", collect(suite, loaded["eval"], loaded["scenes"], loaded["beam"],
                                                    loaded["stress"], loaded["bench"]))
    print(f"[evalsuite] wrote {path} ({suite['wall_minutes']} min)")
    return path


def train_mlp_file(model_path, data, minutes, out, sequences=None):
    """Train the latent-MLP baseline into the file `out` (a worker process's task), on the first
    `sequences` training sequences of `data` (all when None)."""
    train_latent_mlp(model_path, data, minutes=minutes, out=out, quiet=True, sequences=sequences)


def source_description() -> str:
    """Which code ran: the git commit (and whether the tree had changes), when there is git."""
    import subprocess
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "engine", "assets"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    if not commit:
        return ""
    return f"Code: commit {commit}" + (" with uncommitted changes under engine/ or assets/." if dirty else ".")


def rebuild_report(preset="small", out_dir="eval_out", docs_dir=None, source=None):
    """docs/EVALUATION.md again from the JSON of an earlier run (no simulation); `source`
    replaces the recorded description of the code that ran."""
    out = Path(out_dir) / preset
    j = {name: json.loads((out / f"{name}.json").read_text())
         for name in ("suite", "eval", "scenes", "beam", "stress", "bench", "ablations")}
    if source is not None:
        j["suite"]["source"] = source
    docs = report_folder(preset, out, docs_dir)
    write_figures(docs / "EVALUATION.json", collect(j["suite"], j["eval"], j["scenes"], j["beam"], j["stress"], j["bench"]))
    return write_report(j["suite"], j["eval"], j["scenes"], j["beam"], j["stress"], j["bench"], j["ablations"], docs)


def report_folder(preset, out, docs_dir=None) -> Path:
    """Where a run's report, its figures file and its pictures go: the full preset's into docs/
    (committed: the documents' tables are made from it), the small preset's beside its JSON in
    OUT/small, so that it never overwrites the full run's."""
    if docs_dir:
        return Path(docs_dir)
    return ROOT / "docs" if preset == "full" else Path(out)
