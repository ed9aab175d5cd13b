"""What one iteration of the sheet layer costs, piece by piece, on the bench's square sheet at
1k, 10k and 100k vertices and on the proxies a Medium run of the larger ones iterates on (one core): the prefactored solve as the layer takes it (single
precision, symmetric: no pivoting), with partial pivoting, in double precision, and with bending in the factor (and the factors' sizes), the fused incremental potential with its gradient, the L-BFGS two-loop
with a full history, and how much stiffer a membrane spring is than its vertex's inertia over a
substep (why motion across the sheet is hard for the isotropic rest system).

    OMP_NUM_THREADS=1 python experiments/sheet_solve_cost.py [--sizes 1000 10000 100000]
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def timed(f, repeat=10):
    f()
    t = time.perf_counter()
    for _ in range(repeat):
        f()
    return 1000 * (time.perf_counter() - t) / repeat


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000, 100000])
    args = p.parse_args(argv)
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla
    from engine.evaluation.bench import CLOTH_SCENE, bench_setup, bench_sheet
    from engine.learned.quasi_newton import FACTOR_OPTIONS, LAYER_MEMORY, two_loop as _two_loop
    from engine.learned.sheet_layer import SheetLayer
    from engine.core.setup import SHEET_PROXY_VERTICES
    from engine.learned.sheet_proxy import SheetProxy
    setups = []
    for n in args.sizes:
        setups.append(("", bench_setup(bench_sheet(n), 4, CLOTH_SCENE)))
        if n > SHEET_PROXY_VERTICES:      # what a Medium run iterates on
            setups.append((f" (the proxy of the {n:,}-vertex sheet)", SheetProxy(setups[-1][1]).setup))
    for label, setup in setups:
        layer = SheetLayer(setup)
        h = setup.dt / 2
        factor = layer._factor(h)
        double = spla.splu(layer._factor_matrix(h).tocsc(), **FACTOR_OPTIONS)
        with_bending = spla.splu((layer._factor_matrix(h) + layer.Q).tocsc(), **FACTOR_OPTIONS)
        pivoting = spla.splu(layer._factor_matrix(h).astype(np.float32).tocsc(), permc_spec="MMD_AT_PLUS_A")
        rng = np.random.default_rng(0)
        x_n = np.asarray(setup.x0, np.float64)
        v_n = 0.1 * rng.standard_normal(x_n.shape)
        layer._planes = []
        potential = layer.incremental_potential(0, x_n, v_n, h)
        g = rng.standard_normal(x_n.shape)
        history = [(rng.standard_normal(x_n.size), rng.standard_normal(x_n.size), 1.0) for _ in range(LAYER_MEMORY)]
        ratio = float(np.median(layer.springs.k) / np.median(layer.mass / h ** 2))
        g = np.asfortranarray(g)
        g32 = np.asfortranarray(g, dtype=np.float32)
        print(f"{len(x_n)} vertices{label}: solve {timed(lambda: factor.solve(g)):.2f} ms "
              f"(with partial pivoting, as before the factor was taken as symmetric: {timed(lambda: pivoting.solve(g32)):.2f} ms; "
              f"double precision {timed(lambda: double.solve(g)):.2f} ms; "
              f"factor {factor.lu.L.nnz + factor.lu.U.nnz:,} entries; with bending in it {timed(lambda: with_bending.solve(g)):.2f} ms, "
              f"{with_bending.L.nnz + with_bending.U.nnz:,}) | potential and gradient {timed(lambda: potential(x_n + 0.01 * g)):.2f} ms"
              f" | two-loop {timed(lambda: _two_loop(g, history, factor.solve)) - timed(lambda: factor.solve(g)):.2f} ms"
              f" | spring / inertia stiffness {ratio:,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
