"""What floor contact and friction cost the learned engine's latent step, and where it goes.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/contact_cost.py [--slip 0.001 0.01 0.05] [--frames 24]
        [--continuation K] [--capped-curvature K] [--exact-hessian] [--against-iterations 400]

Two solids thrown along a floor: `neurok bench`'s rubber sphere of 1,000 vertices (its contact row,
`bench.contact_setup`) and `experiments/balance.py`'s jelly ball. For each, ms a frame and, per latent
step, how many times Newton evaluated the incremental potential with its Hessian ("hessians"), without
("energies": the line search) and factorised its matrix, and how many Newton solves a step took
(`integrators.minimize_with_friction` solves again where friction's normal forces change):
frictionless, then with friction at each slip speed (`core.friction.FRICTION_SLIP_SPEED`, 1 mm/s in
both engines; other values here patch the learned engine's only, to see what the law's threshold costs).
Newton's matrix takes friction's majorizer, f1(y)/y in every tangential direction (IRLS: the
quadratic that touches the potential from above at the iterate; `terms.friction`). Variants:
`--exact-hessian`: friction's exact Hessian instead, whose curvature along a sliding contact's slide
is f1'(y) = 0 (what shipped before the majorizer); `--continuation K`: each solve first with a K times larger slip speed, then from its answer with the
law's own; `--capped-curvature K`: friction's curvatures capped at 1/(K eps). Each leaves the potential
and its gradient the law's, so only the path to the same minimum changes; with a variant each run is
also baked without it, and the mean and largest distance between the two bakes' vertices (mm,
over every frame) are printed. `--against-iterations N`: each run's mean distance (mm) from the
engine's own Newton allowed N iterations a step (near the minimum each step asks for; 20 ship).
"""
from __future__ import annotations

import argparse
import runpy
import time
from pathlib import Path

import numpy as np
import torch


class Counts:
    """Counts the Newton loop's calls, by wrapping `integrators`' functions while a run bakes."""

    def __init__(self):
        import engine.learned.integrators as integrators
        self.module, self.n = integrators, dict.fromkeys(("hessians", "energies", "factorisations", "solves"), 0)
        self.saved = {name: getattr(integrators, name) for name in ("total", "total_energy", "factorize", "minimize")}

    def __enter__(self):
        saved, n = self.saved, self.n

        def total(q, ctx, need_hess=True, elastic_hessian=None):
            n["hessians" if need_hess else "energies"] += 1
            return saved["total"](q, ctx, need_hess, elastic_hessian)

        def counted(name, key):
            def call(*args, **kwargs):
                n[key] += 1
                return saved[name](*args, **kwargs)
            return call
        self.module.total = total
        self.module.total_energy = counted("total_energy", "energies")
        self.module.factorize = counted("factorize", "factorisations")
        self.module.minimize = counted("minimize", "solves")
        return self

    def __exit__(self, *exc):
        for name, f in self.saved.items():
            setattr(self.module, name, f)
        return False


def continuation(factor):
    """`integrators.minimize` solving first with the slip speed `factor` times larger."""
    import engine.learned.integrators as integrators
    import engine.learned.terms as terms
    plain = integrators.minimize

    def minimize(ctx, q, *args):
        if ctx.slip is None:
            return plain(ctx, q, *args)
        law = terms.FRICTION_SLIP_SPEED
        terms.FRICTION_SLIP_SPEED = law * factor
        try:
            q1, ok, ctx1 = plain(ctx, q, *args)
        finally:
            terms.FRICTION_SLIP_SPEED = law
        return plain(ctx1, q1 if ok else q, *args)
    integrators.minimize = minimize
    return lambda: setattr(integrators, "minimize", plain)


def capped_curvature(factor):
    """`terms.friction` with its Hessian's curvatures capped at 1 / (factor eps)."""
    def matrix(weight, VT, Vu, eps, f1_over_y, f1_prime):
        across, along = (torch.clamp(f, max=1.0 / (factor * eps)) for f in (f1_over_y, f1_prime))
        return (torch.einsum("a,aid,aie->de", weight * across, VT, VT)
                + torch.einsum("a,ad,ae->de", weight * (along - across), Vu, Vu))
    return _friction_matrix(matrix)


def exact_hessian():
    """`terms.friction` with Newton's matrix the friction potential's own Hessian."""
    return _friction_matrix(lambda weight, VT, Vu, eps, f1_over_y, f1_prime:
                            torch.einsum("a,aid,aie->de", weight * f1_over_y, VT, VT)
                            + torch.einsum("a,ad,ae->de", weight * (f1_prime - f1_over_y), Vu, Vu))


def _friction_matrix(matrix):
    """`terms.friction` (its energy and gradient the law's) with Newton's matrix made by
    `matrix(mu lambda [A], (I - n n^T) V [A,3,d], u^T V / |u| [A,d], eps, f1(y)/y, f1'(y))`, in
    Newton's nonlinear terms; returns the undo."""
    import engine.learned.terms as terms
    law = terms.friction

    def friction(q, ctx, need_hess=True):
        t = law(q, ctx, need_hess=False)
        if t is None or not need_hess:
            return t
        c = ctx.slip
        n = c.normal
        slide = torch.einsum("aid,d->ai", c.V, q - ctx.q_n) - c.surface_slide
        u = slide - torch.sum(slide * n, dim=1, keepdim=True) * n
        y = torch.sqrt(torch.sum(u * u, dim=1) + 1e-300)
        eps = terms.FRICTION_SLIP_SPEED * ctx.h / ctx.scene.scale
        _, f1_over_y, f1_prime = terms.smoothed_slide(y, eps)
        VT = c.V - n[:, :, None] * torch.einsum("ai,aid->ad", n, c.V)[:, None, :]
        Vu = torch.einsum("ai,aid->ad", u / y[:, None], c.V)
        return terms.Terms(t.energy, t.grad, matrix(c.weight, VT, Vu, eps, f1_over_y, f1_prime))
    return _with_friction(friction)


def _with_friction(friction):
    """Newton's nonlinear terms with `friction` in the law's place; returns the undo."""
    import engine.learned.integrators as integrators
    import engine.learned.terms as terms
    plain = integrators.NONLINEAR_TERMS
    integrators.NONLINEAR_TERMS = tuple(friction if f is terms.friction else f for f in plain)
    return lambda: setattr(integrators, "NONLINEAR_TERMS", plain)


def converged_bake(engine, make, slip, shipped, iterations):
    """The case baked by the engine's own Newton allowed `iterations` a step, at slip speed `slip`."""
    import engine.learned.runtime as runtime
    import engine.learned.terms as terms
    cap = runtime.NEWTON_ITERATIONS
    runtime.NEWTON_ITERATIONS, terms.FRICTION_SLIP_SPEED = iterations, slip
    try:
        return engine.prepare(make()).bake()
    finally:
        runtime.NEWTON_ITERATIONS, terms.FRICTION_SLIP_SPEED = cap, shipped


def main(argv=None) -> int:
    import engine.learned.terms as terms
    from engine.api import open_engine
    from engine.core.scene import setup_from_scene
    from engine.evaluation.bench import bench_mesh, contact_setup
    from engine.evaluation.scenes import uv_sphere
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slip", type=float, nargs="*", default=[0.001, 0.01, 0.05], help="slip speeds (m/s)")
    p.add_argument("--frames", type=int, default=24)
    p.add_argument("--continuation", type=float, default=None, help="solve first with K times the slip speed")
    p.add_argument("--capped-curvature", type=float, default=None, help="cap friction's curvature at 1/(K eps)")
    p.add_argument("--exact-hessian", action="store_true", help="friction's exact Hessian in Newton's matrix")
    p.add_argument("--against-iterations", type=int, default=None,
                   help="also print the mean distance from the engine's Newton with this many iterations a step")
    args = p.parse_args(argv)
    variants = ([lambda: continuation(args.continuation)] if args.continuation else []) + \
        ([lambda: capped_curvature(args.capped_curvature)] if args.capped_curvature else []) + \
        ([exact_hessian] if args.exact_hessian else [])
    torch.set_num_threads(1)
    balance = runpy.run_path(str(Path(__file__).with_name("balance.py")))
    engine = open_engine("neurok", device="cpu")
    shipped = terms.FRICTION_SLIP_SPEED
    cases = {"rubber sphere, 1k vertices": lambda: contact_setup(bench_mesh(1000), args.frames),
             "jelly ball": lambda: setup_from_scene(uv_sphere(0.25), dict(balance["cases"](0.25)["throw jelly"],
                                                                          frames=args.frames))}
    for name, make in cases.items():
        for slip in [None] + args.slip:
            setup = make()
            if slip is None:
                setup.floor_friction = 0.0
            terms.FRICTION_SLIP_SPEED = shipped if slip is None else slip
            try:
                plain = engine.prepare(setup).bake() if variants else None
                undo = [apply() for apply in variants]
                try:
                    run = engine.prepare(setup)
                    with Counts() as counts:
                        t0 = time.perf_counter()
                        frames = run.bake()
                        ms = 1000 * (time.perf_counter() - t0) / args.frames
                finally:
                    for u in reversed(undo):
                        u()
            finally:
                terms.FRICTION_SLIP_SPEED = shipped
            steps = (args.frames - 1) * run.config.substeps
            per_step = ", ".join(f"{k} {v / steps:.1f}" for k, v in counts.n.items())
            label = "frictionless" if slip is None else f"friction, slip speed {slip * 1000:g} mm/s"
            apart = ""
            if plain is not None:
                d = 1000 * np.linalg.norm(frames - plain, axis=-1)
                apart = f"; from the engine's own Newton: mean {d.mean():.2f} mm, at most {d.max():.1f} mm"
            if args.against_iterations and slip is not None:
                near = converged_bake(engine, make, slip, shipped, args.against_iterations)
                runs = {"this run": frames} if plain is None else {"with the variant": frames, "without": plain}
                apart += "; from Newton at {} iterations: {}".format(args.against_iterations, ", ".join(
                    f"{k} {1000 * np.linalg.norm(x - near, axis=-1).mean():.2f} mm" for k, x in runs.items()))
            print(f"{name}, {label}: {ms:.0f} ms a frame; per step {per_step}{apart}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
