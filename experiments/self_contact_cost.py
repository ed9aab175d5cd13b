"""What a sheet's self-contact costs (engine/core/self_contact.py), on the bench's 1 m square sheet
folded in half so that its two halves lie 3 mm apart, inside a 5 mm thickness layer (every vertex in
contact: the worst case, where every patch meets another that is not its neighbour at rest and the
whole sheet is searched), one core: the pairs a substep takes (`SheetSelfContact.pairs`: the
patches' rigid fits and frames, the search over the motion to the inertial guess, closest points
and directions), the penalty's energy and gradient an iteration takes, and the same with its
Hessian assembled (the reference's Newton). The issue's budget: self-contact adds at most 50 % to a
10k sheet's frame (about 200 ms: 2 substeps x 20 iterations), so 2 searches and 40 energies should
stay under about 100 ms on a realistic sheet.

    OMP_NUM_THREADS=1 python experiments/self_contact_cost.py [--sizes 1000 10000]

Measured (one core, beside another job): a substep's pairs 32 / 367 ms at 1k / 10k vertices (57 /
770 ms before the patches and frames), energy and gradient 0.10 / 1.2 ms, with the Hessian 2.4 / 42
ms. The realistic case is the bench's sheet in its gust, where nearly every patch's neighbourhood
moves as its rest shape does and next to nothing is searched: `neurok bench` runs it with self-collision on beside the row
without (`neurok_cloth_self_collision_over_layer`): 1.23-1.32x at 1k (about 8 ms a frame),
1.29-1.49x at 10k (about 70 ms a frame: 31 ms of pairs a substep, 7 ms of penalty a frame).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from sheet_solve_cost import timed      # this folder's: ms per call, after one warm-up call


def folded(rest, gap):
    """The sheet (xz plane, z in 0..1) folded at z = 0.5 by a half-turn of diameter `gap`: its
    upper half lies `gap` in front of its lower half, upside down."""
    x = rest.copy()
    over = rest[:, 2] > 0.5
    x[over, 1] = gap
    x[over, 2] = 1.0 - rest[over, 2]
    return x


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000])
    p.add_argument("--distance", type=float, default=0.005, help="the thickness, metres (default 5 mm)")
    args = p.parse_args(argv)
    from engine.core.geometry import lumped_vertex_areas
    from engine.core.scene import MATERIAL_PRESETS
    from engine.core.self_contact import SheetSelfContact, self_contact_penalty
    from engine.evaluation.bench import bench_sheet
    h = 1.0 / 48.0                                        # the sheet layer's substep at 1/24 s frames
    for n in args.sizes:
        sheet = bench_sheet(n)
        rest = np.asarray(sheet.vertices, np.float64)
        mass = MATERIAL_PRESETS["cloth"]["density"] * lumped_vertex_areas(rest, sheet.faces)
        x_n = folded(rest, 0.6 * args.distance)
        # the upper half moving towards the lower one at 0.1 m/s, the whole sheet drifting sideways at 0.2 m/s
        guess = x_n + h * (np.array([0.2, 0.0, 0.0]) - [0.0, 0.1, 0.0] * (x_n[:, 1:2] > 0))
        t = time.perf_counter()
        contact = SheetSelfContact(rest, sheet.faces, args.distance, mass)
        setup_ms = 1000 * (time.perf_counter() - t)
        pairs = contact.pairs(x_n, guess)
        trial = guess - [0.0, 0.5 * args.distance, 0.0] * (x_n[:, 1:2] > 0)  # the upper half pressed in
        depth = self_contact_penalty(trial, pairs, args.distance, need_hess=False)[3]
        search = timed(lambda: contact.pairs(x_n, guess), 5)
        penalty = timed(lambda: self_contact_penalty(trial, pairs, args.distance, need_hess=False), 20)
        with_hessian = timed(lambda: contact.terms(trial, pairs), 10)
        parts = [f"{len(rest)} vertices: {len(pairs):,} pairs ({int((depth > 0).sum()):,} in the layer)",
                 f"set up once {setup_ms:.1f} ms", f"search a substep {search:.1f} ms",
                 f"energy and gradient {penalty:.2f} ms", f"with the Hessian assembled {with_hessian:.1f} ms",
                 f"a frame of 2 substeps x 20 iterations {2 * search + 40 * penalty:.0f} ms"]
        print(" | ".join(parts), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
