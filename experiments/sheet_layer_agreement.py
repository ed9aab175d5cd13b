"""Where the sheet layer and the reference simulator part, on the evaluation's pinned sheets.

1. *The laws.* The layer's incremental potential against the reference's
   (`ReferenceSimulator.incremental_potential`: inertia, springs and bending, external forces,
   pins, Rayleigh damping; no contact) at a trial state near a substep's inertia: the largest
   gradient difference over the largest inertial force (`tests/test_mesh_physics.py` holds it on
   a small sheet).
2. *Convergence.* One substep from the reference's own state at a frame: the reference's Newton
   answer against the layer's L-BFGS (from inertia) after 20, 200 and 2,000
   iterations: the energy above the reference's answer and the positions' distance (RMS, mm).
3. *The substep count.* The reference's and the learned run's substeps a frame at the scene's
   frame time: one law (`core.physics.substeps_per_frame`). Where they differ (a frame time written
   to six digits, 0.041667 s, once made the reference take 3 where the run took 2), the reference at
   both counts, and the learned engine against each (`--frames` frames).

    OMP_NUM_THREADS=1 python experiments/sheet_layer_agreement.py [--scenes grid flag_wind] [--frame 1] [--frames 36]

About 6 minutes on one core.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np


def advanced(sim, frames):
    """The reference simulator after `frames` frames."""
    for _ in range(frames):
        sim.step_frame()
    return sim


def laws(setup, frame):
    from engine.evaluation.scene_eval import REFERENCE_SETTINGS
    from engine.learned.quasi_newton import as_columns
    from engine.learned.sheet_layer import SheetLayer
    from engine.reference.simulator import ReferenceSimulator
    sim = advanced(ReferenceSimulator(setup, **REFERENCE_SETTINGS), frame)
    y_n, v_n, h = sim.y.copy(), sim.v.copy(), sim.h
    y = y_n + h * v_n + 1e-3 * np.random.default_rng(0).standard_normal(y_n.shape)
    expected = sim.incremental_potential(frame)[0](y.ravel(), need_hess=False)[1].reshape(-1, 3)
    inertial = np.abs(sim.M3 / h ** 2 * (y - y_n - h * v_n).ravel()).max()
    potential = SheetLayer(setup).incremental_potential(frame, y_n, v_n, h)
    return float(np.abs(np.asarray(potential(as_columns(y))[1]) - expected).max() / inertial), sim


def convergence(setup, frame, sim, iterations=(20, 200, 2000)):
    from engine.learned.quasi_newton import as_columns, quasi_newton
    from engine.learned.sheet_layer import SheetLayer
    y_n, v_n, h = sim.y.copy(), sim.v.copy(), sim.h
    sim._step(frame, end=1.0 / sim.substeps)
    answer = sim.y.copy()
    layer = SheetLayer(setup)
    potential = layer.incremental_potential(frame, y_n, v_n, h)
    e_answer = potential(as_columns(answer))[0]
    rows = []
    for n in iterations:
        trace = []
        x = quasi_newton(potential, as_columns(y_n + h * v_n), layer._factor(h).solve, n, layer.memory, [], trace)
        rms = 1e3 * float(np.sqrt(np.mean(np.sum((np.asarray(x) - answer) ** 2, axis=1))))
        rows.append((n, trace[-1][0] - e_answer, rms))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", nargs="*", default=["grid", "flag_wind"])
    p.add_argument("--frame", type=int, default=1, help="the frame whose first substep parts 1 and 2 take")
    p.add_argument("--frames", type=int, default=36, help="frames of part 3 (the flag)")
    args = p.parse_args(argv)
    import torch
    from engine.api import open_engine
    from engine.evaluation.scene_eval import REFERENCE_SETTINGS, distance_and_hold_still, reference_rollout, sheet_setups
    from engine.reference.simulator import ReferenceSimulator
    torch.set_num_threads(1)
    for name, setup in sheet_setups(args.scenes, args.frames):
        gap, sim = laws(setup, args.frame)
        print(f"{name} | laws: largest gradient difference {gap:.1e} of the largest inertial force", flush=True)
        for n, energy, rms in convergence(setup, args.frame, sim):
            print(f"{name} | frame {args.frame}'s first substep, L-BFGS {n} iterations: {energy:.2e} J above the "
                  f"reference's Newton answer, {rms:.3f} mm RMS from it", flush=True)
        counts = {dt: ReferenceSimulator(replace(setup, dt=dt), **REFERENCE_SETTINGS).substeps for dt in (setup.dt, 1.0 / 24.0)}
        run = open_engine("neurok", device="cpu").prepare(setup)
        print(f"{name} | substeps a frame at dt {setup.dt}: the reference {counts[setup.dt]}, the learned run "
              f"{run.config.substeps}", flush=True)
        if len(set(counts.values())) > 1:
            refs = {dt: reference_rollout(replace(setup, dt=dt)) for dt in counts}
            model = np.asarray(run.bake())
            (a, ref_a), (b, ref_b) = refs.items()
            print(f"{name} | the reference at dt {a} ({counts[a]} substeps a frame) against dt {b} ({counts[b]}): "
                  f"{distance_and_hold_still(ref_b, ref_a)[1]:.3f}x hold-still; the model against each: "
                  f"{distance_and_hold_still(model, ref_a)[1]:.3f}x, {distance_and_hold_still(model, ref_b)[1]:.3f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
