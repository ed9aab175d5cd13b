"""Why the scenes `make data` skips grind (issue 44): at the first Newton steps that self-contact
cuts short, how far the step bound (`LatticeSelfContact.safe_fraction`) is from what really
happens along the step, and where the body stands against the floor.

For each cut step it prints: the share the bound allowed; the share before any pair REALLY closes
KEEP of its gap (the distances measured at 201 points along the step); how many surface pairs
really come within d_hat along the whole step (a step that passes the surface through itself);
and how deep the iterate's lattice nodes are in the floor.

    python experiments/grinding_scenes.py [--seed 1] [--lattice 8] [--indices 42 21 13 71] [--cuts 3] [--frames 8]
    python experiments/grinding_scenes.py --loads [--sequences 120]

`--loads`: the load rho*a*L/E + v/c (the guard's `load_strain`) of every solid the data set draws,
against those of the indices (no simulation).

Default indices and lattice: the four sequences of data/train_l8 (seed 1, 8 lattice cells) whose
reference the work budget stops (two drops, two pokes).
"""
from __future__ import annotations

import argparse

import numpy as np

from engine.core.guard import load_strain
from engine.core.scene import setup_from_scene
from engine.reference import self_contact as sc
from engine.reference.budget import WorkBudgetExceeded
from engine.reference.simulator import ReferenceSimulator
from engine.training.generate import GENERATOR_SUBSTEP, draw_sequence

SAMPLES = 201


def reachable_pairs(con, y, dy):
    """The pairs `safe_fraction` weighs for the step dy: nodes, kinds, distances now and the bound
    on how much each can change along the step."""
    motion = np.linalg.norm(dy - dy[con.points].mean(axis=0), axis=1)
    nodes, is_pt = con._candidates(y, con.d_hat, 2.0 * motion)
    d0, _ = con.distance(y, nodes, is_pt)
    bound = con._reach(dy, nodes, is_pt)
    keep = d0 - bound < con.d_hat
    return nodes[keep], is_pt[keep], d0[keep]


def along_step(con, y, dy, nodes, is_pt, d0):
    """(closest distance of each pair along the whole step, the first share of the step at which a
    pair has really closed KEEP of its gap)."""
    closest, first = np.full(len(nodes), np.inf), 1.0
    for t in np.linspace(0.0, 1.0, SAMPLES):
        d, _ = con.distance(y + t * dy, nodes, is_pt)
        closest = np.minimum(closest, d)
        if first == 1.0 and (d < d0 - sc.KEEP * np.minimum(d0, con.d_hat)).any():
            first = float(t)
    return closest, first


def diagnose(seed, index, lattice, cuts, frames):
    d = draw_sequence(seed, index, 32, lattice_cells=lattice)
    scene = dict(d.scene)
    scene.pop("twist", None)
    setup = setup_from_scene(d.mesh, scene)
    sim = ReferenceSimulator(setup, lattice_cells=lattice, substep=GENERATOR_SUBSTEP)
    con = sim.self_contact
    half_cell = con.d_hat / sc.D_HAT
    floor = setup.floor_z
    print(f"seq {index}: {d.family} {d.scenario}, E {setup.material.stiffness / 1e3:.1f} kPa, "
          f"half-cell {half_cell * 1e3:.1f} mm (figures below in half-cells)", flush=True)
    bound_fraction = con.safe_fraction
    seen = []

    def traced(y, step):
        allowed = bound_fraction(y, step)
        if allowed < 0.1 and len(seen) < cuts:
            dy = step.reshape(-1, 3)
            nodes, is_pt, d0 = reachable_pairs(con, y, dy)
            closest, first = along_step(con, y, dy, nodes, is_pt, d0)
            depth = (floor - y[:, 2]).max() / half_cell if floor is not None else float("nan")
            seen.append(allowed)
            print(f"  frame {sim.frame + 1}: bound allows {allowed:.3f} of the step, a pair really closes KEEP of "
                  f"its gap at {first:.3f}; {int((closest < con.d_hat).sum())} of {len(nodes)} pairs really come "
                  f"within d_hat along it ({int((d0 < con.d_hat).sum())} were); deepest node in the floor "
                  f"{depth:.2f}, step's largest rise {dy[:, 2].max() / half_cell:.2f}", flush=True)
        return allowed

    con.safe_fraction = traced
    try:
        for _ in range(frames):
            sim.step_frame()
            if len(seen) >= cuts:
                return
        print(f"  no step cut below 0.1 in {frames} frames", flush=True)
    except WorkBudgetExceeded as stopped:
        print(f"  {str(stopped)[:160]}", flush=True)


def loads(seed, lattice, sequences, indices):
    rows = []
    for index in range(sequences):
        d = draw_sequence(seed, index, 32, lattice_cells=lattice)
        if d.kind != "solid":
            continue
        scene = dict(d.scene)
        scene.pop("twist", None)
        diagonal = float(np.linalg.norm(np.ptp(d.mesh.vertices, axis=0)))
        rows.append((load_strain(setup_from_scene(d.mesh, scene), diagonal), index, d.family, d.scenario))
    others = np.array([r[0] for r in rows if r[1] not in indices])
    print(f"{len(rows)} solids; the others' load: median {np.median(others):.2f}, {int((others > 1.3).sum())} above 1.3, "
          f"largest {others.max():.1f}")
    for load, index, family, scenario in rows:
        if index in indices:
            print(f"  seq {index} ({family} {scenario}): {load:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lattice", type=int, default=8)
    ap.add_argument("--indices", type=int, nargs="+", default=[42, 21, 13, 71])
    ap.add_argument("--cuts", type=int, default=3)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--loads", action="store_true")
    ap.add_argument("--sequences", type=int, default=120)
    args = ap.parse_args()
    if args.loads:
        loads(args.seed, args.lattice, args.sequences, set(args.indices))
        return
    for index in args.indices:
        diagnose(args.seed, index, args.lattice, args.cuts, args.frames)


if __name__ == "__main__":
    main()
