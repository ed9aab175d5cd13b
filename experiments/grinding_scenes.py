"""Why the scenes `make data` skips grind (issue 44): at the first Newton steps that self-contact
cuts short, how far the step bound (`LatticeSelfContact.safe_fraction`) is from what really
happens along the step, and where the body stands against the floor.

For each cut step it prints: the share the bound allowed; the share before any pair REALLY closes
KEEP of its gap (the distances measured at 201 points along the step); how many surface pairs
really come within d_hat along the whole step (a step that passes the surface through itself);
and how deep the iterate's lattice nodes are in the floor.

    python experiments/grinding_scenes.py [--seed 1] [--lattice 8] [--indices 42 21 13 71] [--cuts 3] [--frames 8]
    python experiments/grinding_scenes.py --loads [--sequences 120]
    python experiments/grinding_scenes.py --remedies [--no-friction] [--indices 42] [--frames 8]
    python experiments/grinding_scenes.py --trace [--abs] [--no-friction] [--cap 20] [--indices 42] [--frames 3]
    python experiments/grinding_scenes.py --trace --scene monkey --lattice 12 --cap 100 [--no-friction] [--frames 5]

`--loads`: the load rho*a*L/E + v/c (the guard's `load_strain`) of every solid the data set draws,
against those of the indices (no simulation).

`--remedies`: the scene run with two changes patched in here (not in the engine): Newton's inertial
guess stops at the floor, and the self-contact step bound is followed by conservative advancement
(the real distances measured again at the allowed share, and the step advanced while no pair has
closed KEEP of its gap); `--no-friction` also takes the floor's friction away. Per frame: seconds,
the most Newton iterations of any substep, the contact cuts, and the share of the elastic
Hessian's quadrature points whose negative curvature the PSD projection clamps.

`--trace`: the scene run as the engine runs it, with the retry's Newton iterations capped at `--cap`
(the engine's RETRY_NEWTON_ITERATIONS is 100); a retry substep that does not converge prints each of
its iterations: the share self-contact allowed, the line search's share, the step's size over the
body's, and the Newton decrement. `--abs`: the elastic Hessian's negative eigenvalues flipped to their
absolute value instead of clamped to zero.

Default indices and lattice: the four sequences of data/train_l8 (seed 1, 8 lattice cells) whose
reference the work budget stops (two drops, two pokes).
"""
from __future__ import annotations

import argparse

import numpy as np

from engine.core.guard import load_strain
from engine.core.scene import setup_from_scene
import time

import engine.reference.solid as solid
from engine.reference import lattice_contact as sc
from engine.reference.budget import WorkBudgetExceeded
from engine.reference.simulator import ReferenceSimulator
from engine.training.generate import GENERATOR_SUBSTEP, draw_sequence

SAMPLES = 201


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
            nodes, is_pt = con._along[2]          # the pairs the bound just weighed as reachable
            d0, _ = con.distance(y, nodes, is_pt)
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


class FloorGuess(ReferenceSimulator):
    """Newton's inertial guess stops at the floor (a node already below it stays where it is)."""

    def _newton_iterations(self, total, y0, h, v0, must_converge, work):
        if self.setup.floor_z is None:
            return super()._newton_iterations(total, y0, h, v0, must_converge, work)
        guess = (y0 + self._allowed(y0, h * v0) * h * v0).reshape(-1, 3)
        start = y0.reshape(-1, 3)
        guess[:, 2] = np.maximum(guess[:, 2], np.minimum(self.setup.floor_z, start[:, 2]))
        # the parent starts from y0 + allowed * h * v0: hand it a velocity that lands on the guess
        return super()._newton_iterations(total, y0, h, (guess.ravel() - y0) / h, must_converge, work)


def advancing(con):
    """`safe_fraction` followed by conservative advancement along the step."""
    bound_fraction = con.safe_fraction

    def fraction(y, step):
        allowed = bound_fraction(y, step)
        if allowed >= 1.0:
            return allowed
        dy = step.reshape(-1, 3)
        nodes, is_pt = con._along[2]
        d0, _ = con.distance(y, nodes, is_pt)
        bound = con._reach(dy, nodes, is_pt)
        target = d0 - sc.KEEP * np.minimum(d0, con.d_hat)
        t = 0.0
        for _ in range(30):
            margin = con.distance(y + t * dy, nodes, is_pt)[0] - target
            if (margin < 0).any():
                break
            grow = float(np.min(np.where(bound > 0, margin / np.maximum(bound, 1e-300), np.inf)))
            t = min(1.0, t + grow)
            if t >= 1.0 or grow < 0.005 * (1.0 - t):
                break
        return max(allowed, t)
    return fraction


def remedies(seed, index, lattice, frames, friction):
    d = draw_sequence(seed, index, 32, lattice_cells=lattice)
    scene = dict(d.scene)
    scene.pop("twist", None)
    setup = setup_from_scene(d.mesh, scene)
    if not friction:
        setup.floor_friction = 0.0
    clamped = []
    projected = solid.projected_pointwise_hessian

    def counting(F, mu, c, a, clamp=True):
        H = projected(F, mu, c, a, clamp=False)
        w = np.linalg.eigvalsh(0.5 * (H + np.swapaxes(H, 1, 2)))
        clamped.append(float((w.min(axis=1) < -1e-9 * np.maximum(w, 0).sum(axis=1)).mean()))
        return projected(F, mu, c, a, clamp)

    solid.projected_pointwise_hessian = counting
    sim = FloorGuess(setup, lattice_cells=lattice, substep=GENERATOR_SUBSTEP)
    sim.self_contact.safe_fraction = advancing(sim.self_contact)
    sim.work_log = []
    print(f"seq {index}: {d.family} {d.scenario}, guess at the floor, conservative advancement, "
          f"floor friction {'on' if friction else 'off'}", flush=True)
    try:
        for _ in range(frames - 1):
            t0, clamped[:] = time.perf_counter(), []
            sim.step_frame()
            work, sim.work_log = sim.work_log, []
            print(f"  frame {sim.frame}: {time.perf_counter() - t0:.1f} s, {len(work)} substeps, Newton iterations at most "
                  f"{max(w.newton_iterations for w in work)}, contact cuts {max(w.contact_cut_halvings for w in work)}, "
                  f"quadrature points with negative curvature clamped {np.mean(clamped):.0%}", flush=True)
    except WorkBudgetExceeded as stopped:
        print(f"  {str(stopped)[:160]}", flush=True)
    finally:
        solid.projected_pointwise_hessian = projected


def evaluation_scene(name):
    """(title, mesh, scene, the reference's substep) of a full-preset evaluation scene."""
    from pathlib import Path
    import tempfile
    from engine.evaluation.scene_eval import scenes_physics
    from engine.evaluation.suite import PRESETS
    [((_, title, mesh, scene, _), jobs)] = scenes_physics(dict(PRESETS["full"], scenes=(name,)),
                                                          Path(tempfile.mkdtemp()))[0]
    return title, mesh, scene, jobs["reference"].options["substep"]


def trace(seed, index, lattice, frames, friction, cap, flip, scene_name=None):
    import engine.reference.simulator as simulator
    if scene_name:
        title, mesh, scene, substep = evaluation_scene(scene_name)
        label = f"{scene_name} ({title}, {lattice} cells)"
    else:
        d = draw_sequence(seed, index, 32, lattice_cells=lattice)
        mesh, scene, substep, label = d.mesh, dict(d.scene), GENERATOR_SUBSTEP, f"seq {index}: {d.family} {d.scenario}"
        scene.pop("twist", None)
    setup = setup_from_scene(mesh, scene)
    if not friction:
        setup.floor_friction = 0.0
    projected = solid.projected_pointwise_hessian

    def absolute(F, mu, c, a, clamp=True):
        H = projected(F, mu, c, a, clamp=False)
        w, v = np.linalg.eigh(0.5 * (H + np.swapaxes(H, 1, 2)))
        return (v * np.abs(w)[:, None, :]) @ np.swapaxes(v, 1, 2)

    rows = []
    searched = simulator.line_search

    def recorded(total, x, energy, slope, step, alpha=1.0):
        found = searched(total, x, energy, slope, step, alpha)
        rows.append((alpha, found, np.max(np.abs(step)) / sim.diagonal, -slope))
        return found

    class Traced(ReferenceSimulator):
        """The engine's own Newton loop, its line searches recorded; a retry substep that runs out
        prints them."""

        def _newton_iterations(self, total, y0, h, v0, must_converge, work):
            rows.clear()
            try:
                return super()._newton_iterations(total, y0, h, v0, must_converge, work)
            except simulator.OutOfWork as out:
                if must_converge:
                    print(f"  a retry substep {out}:")
                    for row in rows:
                        print("    allowed %.3g  line search %.3g  |step|/size %.3g  decrement %.3g" % row)
                raise

    if flip:
        solid.projected_pointwise_hessian = absolute
    retry_cap = simulator.RETRY_NEWTON_ITERATIONS
    simulator.line_search, simulator.RETRY_NEWTON_ITERATIONS = recorded, cap
    sim = Traced(setup, lattice_cells=lattice, substep=substep)
    print(f"{label}, retry cap {cap}, floor friction {'on' if friction else 'off'}, "
          f"negative curvature {'flipped' if flip else 'clamped'}", flush=True)
    try:
        for _ in range(frames - 1):
            t0 = time.perf_counter()
            x = sim.step_frame()
            print(f"  frame {sim.frame}: {time.perf_counter() - t0:.1f} s, lowest point {x[:, 2].min() - setup.floor_z:+.4f} m "
                  f"from the floor, most Newton iterations {sim.work_peak.newton_iterations}", flush=True)
    except WorkBudgetExceeded as stopped:
        print(f"  {str(stopped)[:200]}", flush=True)
    finally:
        solid.projected_pointwise_hessian = projected
        simulator.line_search, simulator.RETRY_NEWTON_ITERATIONS = searched, retry_cap


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lattice", type=int, default=8)
    ap.add_argument("--indices", type=int, nargs="+", default=[42, 21, 13, 71])
    ap.add_argument("--cuts", type=int, default=3)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--loads", action="store_true")
    ap.add_argument("--sequences", type=int, default=120)
    ap.add_argument("--remedies", action="store_true")
    ap.add_argument("--no-friction", action="store_true")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--abs", action="store_true")
    ap.add_argument("--cap", type=int, default=20)
    ap.add_argument("--scene", help="--trace a full-preset evaluation scene (e.g. monkey, ico_sphere) instead")
    args = ap.parse_args()
    if args.trace:
        for index in ([None] if args.scene else args.indices):
            trace(args.seed, index, args.lattice, args.frames, not args.no_friction, args.cap, args.abs, args.scene)
        return
    if args.remedies:
        for index in args.indices:
            remedies(args.seed, index, args.lattice, args.frames, not args.no_friction)
        return
    if args.loads:
        loads(args.seed, args.lattice, args.sequences, set(args.indices))
        return
    for index in args.indices:
        diagnose(args.seed, index, args.lattice, args.cuts, args.frames)


if __name__ == "__main__":
    main()
