"""What friction costs the reference, and whether friction's majorizer in Newton's matrix makes it
converge: the evaluation's contact scenes on a chosen lattice, frictionless, with friction and the
exact Hessian of the dissipation potential, and with friction and its majorizer.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/reference_friction.py \
        [--scenes ico_sphere,monkey,toy_drop] [--cells 12] [--frames 12] [--variants frictionless,exact,majorizer,hybrid]

The majorizer (`core.friction.slide_terms(majorize=True)`) is mu lambda f1(|u|)/|u| in every
tangential direction: the quadratic of IRLS, which lies above the potential and touches it at the
current slide; the exact Hessian has no curvature along a sliding contact's slide, so Newton's
model is wrong across the stick-slip kink. The potential and its gradient are the same, so a
converged step is the same step. `hybrid`: the exact Hessian until a line search in the substep
halves its step three times, the majorizer for the rest of that substep (the last column: the frames' distance to the exact run's, in
bounding-box diagonals).

Each row: seconds, Newton iterations and line-search halvings a substep (mean), the substeps
that ran out of Newton iterations (Newton stops there unconverged), and whether the run finished.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def run(setup, cells, variant):
    """(frames or None, seconds, SubstepWork list, why it stopped or None)."""
    from engine.core import friction
    from engine.evaluation.scene_eval import REFERENCE_SETTINGS
    from engine.reference.budget import WorkBudgetExceeded
    from engine.reference.simulator import ReferenceSimulator
    from engine.reference import simulator
    shipped, searched, newton = friction.slide_terms, simulator.line_search, simulator.ReferenceSimulator._newton
    if variant == "hybrid":       # the exact Hessian until a line search halves 3 times, then the majorizer
        state = {"majorize": False}

        def slide_terms(*args, **kwargs):
            return shipped(*args, **kwargs, majorize=state["majorize"])

        def line_search(*args, **kwargs):
            alpha = searched(*args, **kwargs)
            state["majorize"] = state["majorize"] or alpha < 0.125
            return alpha

        def fresh_substep(self, *args, **kwargs):
            state["majorize"] = False
            return newton(self, *args, **kwargs)
        friction.slide_terms, simulator.line_search = slide_terms, line_search
        simulator.ReferenceSimulator._newton = fresh_substep
    if variant == "frictionless":
        setup.floor_friction = 0.0
        for c in setup.colliders or []:
            c.friction = 0.0
    elif variant in ("exact", "majorizer"):
        def slide_terms(*args, **kwargs):
            return shipped(*args, **kwargs, majorize=variant == "majorizer")
        friction.slide_terms = slide_terms
    try:
        sim = ReferenceSimulator(setup, **{**REFERENCE_SETTINGS, "lattice_cells": cells})
        sim.work_log = []
        t0 = time.perf_counter()
        try:
            x = np.stack(list(sim.iter_frames()))
            why = None
        except WorkBudgetExceeded as e:
            x, why = None, str(e).split(":", 1)[-1].strip()[:80]
        return x, time.perf_counter() - t0, sim.work_log, why, sim.newton_iterations
    finally:
        friction.slide_terms, simulator.line_search, simulator.ReferenceSimulator._newton = shipped, searched, newton


def main(argv=None) -> int:
    import copy

    from engine.core.scene import setup_from_scene
    from engine.evaluation.distances import bbox_diagonal
    from engine.evaluation.scenes import evaluation_scenes
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", default="ico_sphere,monkey,toy_drop")
    p.add_argument("--cells", type=int, default=12)
    p.add_argument("--frames", type=int, default=12)
    p.add_argument("--variants", default="frictionless,exact,majorizer")
    p.add_argument("--cache", default="runs/reference_friction")
    args = p.parse_args(argv)
    scenes, _ = evaluation_scenes(args.scenes.split(","), args.frames, Path(args.cache) / "meshes")
    print(f"| scene ({args.cells} cells, {args.frames} frames) | variant | seconds | Newton iterations a substep | "
          "halvings a substep | substeps at the cap | finished | distance to exact |")
    print("|---|---|---|---|---|---|---|---|")
    for name, _, mesh, scene, _ in scenes:
        base = setup_from_scene(mesh, scene)
        if base.material.kind != "solid":
            continue
        diag = bbox_diagonal(base.rest)
        exact = None
        for variant in args.variants.split(","):
            x, seconds, log, why, cap = run(copy.deepcopy(base), args.cells, variant)
            its = np.array([w.newton_iterations for w in log]) if log else np.zeros(1)
            halv = np.array([w.line_search_halvings for w in log]) if log else np.zeros(1)
            if variant == "exact":
                exact = x
            far = ("" if x is None or exact is None or variant == "exact"
                   else f"{np.linalg.norm(x - exact, axis=-1).mean() / diag:.2e}")
            print(f"| {name} | {variant} | {seconds:.0f} | {its.mean():.1f} | {halv.mean():.1f} | "
                  f"{int((its >= cap).sum())} of {len(its)} | {'yes' if why is None else 'gave up: ' + why} | {far} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
