"""What a full-space layer for solids could reach (issue 43): the reference's own physics on a
coarse lattice with a few Newton iterations per substep, against the converged reference.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/solid_layer_ceiling.py [torus] [cone] [throw] [--json OUT]

The dents, hinges and rolling that the learned engine misses are the state space's (the oracle in
the same space misses them too; docs/DESIGN_NOTES.md §5). Sheets got a full-space layer for the
same reason (`learned/sheet_layer.py`). A solid's layer would run on a lattice in full space,
started from the latent step's prediction: at best as close as the reference on that lattice with
that many iterations, and at about its cost. This measures that bound, per lattice and Newton
limit, on three of issue 43's cases:

- torus: the evaluation's poked torus (36 frames; truth: the kept 12-cell reference); distance
  over hold-still's (target <= 0.3x);
- cone: experiments/pinned_swing.py's pushed cone; motion amplitude over the reference's (target
  within 30 %);
- throw: experiments/balance.py's jelly ball thrown at 2 m/s; distance travelled over the
  reference's (target within 20 %).
Each row: the figure, and ms per frame of one core (the learned engine's budget: 8 ms at 10k
vertices; the sheet layer's: 60 ms at 1k).
"""
from __future__ import annotations

import argparse
import json
import runpy
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ((4, 2), (6, 2), (6, 20), (8, 3), (8, 20))     # (lattice cells, Newton iterations per substep)


def run(setup, cells, iterations):
    from engine.reference.simulator import ReferenceSimulator
    from engine.training.generate import GENERATOR_SUBSTEP
    sim = ReferenceSimulator(setup, lattice_cells=cells, substep=GENERATOR_SUBSTEP, newton_iterations=iterations,
                             budget=None)
    t0 = time.process_time()
    frames = np.stack(list(sim.iter_frames())).astype(np.float32)
    return frames, 1000 * (time.process_time() - t0) / max(1, len(frames) - 1)


def torus_case():
    from engine.core.scene import setup_from_scene
    from engine.evaluation.physics_cache import DATA, PhysicsCache
    from engine.evaluation.scene_eval import scene_jobs
    from engine.evaluation.scenes import evaluation_scenes
    from engine.evaluation.suite import PRESETS
    cfg = PRESETS["small"]
    (name, _, mesh, scene, _), = evaluation_scenes(["torus"], cfg["scene_frames"], ROOT / "eval_out" / "meshes")[0]
    truth = PhysicsCache(ROOT / "eval_out" / "small" / "physics", kept=DATA / "physics").get(
        scene_jobs(cfg, name, mesh, scene)["reference"])
    setup = setup_from_scene(mesh, scene)

    def figures(x):
        still = np.linalg.norm(truth[:1] - truth, axis=2).mean()
        return {"over_hold_still": float(np.linalg.norm(x - truth, axis=2).mean() / still)}
    return setup, truth, figures


def cone_case():
    from engine.core.scene import setup_from_scene
    from engine.evaluation.scene_eval import reference_rollout
    swing = runpy.run_path(str(ROOT / "experiments" / "pinned_swing.py"))
    mesh, scene, _, _ = swing["cases"]()["cone"]
    setup = setup_from_scene(mesh, scene)
    truth = reference_rollout(setup)
    z = setup.rest[:, 2]
    upper = z > 0.5 * (z.min() + z.max())

    def amplitude(x):
        d = x[:, upper, 0].mean(axis=1)
        return float(d.max() - d.min())

    def figures(x):
        still = np.linalg.norm(truth[:1] - truth, axis=2).mean()
        return {"amplitude_ratio": amplitude(x) / amplitude(truth),
                "over_hold_still": float(np.linalg.norm(x - truth, axis=2).mean() / still)}
    return setup, truth, figures


def throw_case():
    from engine.core.scene import setup_from_scene
    from engine.evaluation.scene_eval import reference_rollout
    from engine.evaluation.scenes import uv_sphere
    balance = runpy.run_path(str(ROOT / "experiments" / "balance.py"))
    setup = setup_from_scene(uv_sphere(0.25), balance["cases"](0.25)["throw jelly"])
    truth = reference_rollout(setup)
    travel = lambda x: float(x[-1, :, 0].mean() - x[0, :, 0].mean())    # noqa: E731
    return setup, truth, lambda x: {"travel_ratio": travel(x) / travel(truth), "travel_m": travel(x)}


CASES = {"torus": torus_case, "cone": cone_case, "throw": throw_case}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", default=list(CASES))
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    out = {}
    for name in args.cases:
        setup, truth, figures = CASES[name]()
        out[name] = {"truth": figures(truth)}
        print(name, "truth", json.dumps(out[name]["truth"]), flush=True)
        for cells, iterations in VARIANTS:
            x, ms = run(setup, cells, iterations)
            row = dict(figures(x), ms_per_frame=round(ms, 1))
            out[name][f"{cells} cells, {iterations} Newton"] = row
            print(name, f"{cells} cells, {iterations} Newton", json.dumps(row), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
