"""A sheet's distance and stretch against how exactly its membrane energy is integrated.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/sheet_integration.py [--scenes eval_out/small/scenes]
        [--only flag_wind,grid] [--details medium,high]

For the sheets `make eval-small` kept (their reference frames in `eval_out/small/scenes`), the
learned engine at each detail with three integrations of its membrane energy: the fitted
cubature as shipped (`subspace.fitted_cubature`: at most max(200, coordinates / 2) triangles),
as many triangles as coordinates, and every triangle (full integration). Prints the cubature's
held-out force error, rel_l2 over the whole rollout (x hold-still), the mean edge strain over the
reference's, the largest share of flipped (folded-over) triangles (`engine.evaluation.prior_vs_trained.measures`),
and ms per frame (timed beside whatever else runs).
"""
from __future__ import annotations

import argparse
import copy
import time

import numpy as np


def main(argv=None) -> int:
    import torch
    import engine.learned.subspace as subspace
    from engine.api import open_engine
    from engine.core.scene import setup_from_scene
    from engine.evaluation.distances import bbox_diagonal, rel_l2_curve
    from engine.evaluation.prior_vs_trained import measures, kept_scenes
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", default="eval_out/small/scenes")
    p.add_argument("--only", default="flag_wind,grid")
    p.add_argument("--details", default="medium,high")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    shipped = subspace.fitted_cubature

    def with_samples(per_coordinate):
        def fit(kind, node_basis, nodes, node_mass, elements, full_weights, cell_size, samples, full=False):
            if per_coordinate is None:
                return shipped(kind, node_basis, nodes, node_mass, elements, full_weights, cell_size, samples, True)
            wanted = max(samples, int(per_coordinate * node_basis.shape[2]))
            return shipped(kind, node_basis, nodes, node_mass, elements, full_weights, cell_size, wanted, full)
        return fit

    integrations = {"fitted (shipped)": shipped, "samples = coordinates": with_samples(1.0),
                    "every triangle": with_samples(None)}
    engine = open_engine("neurok", model=None, device="cpu")
    for name, mesh, scene, true in kept_scenes(args.only.split(","), args.scenes):
        diag = bbox_diagonal(true[0])
        still = rel_l2_curve(np.repeat(true[:1], len(true), 0), true, diag)[1:].mean()
        reference = measures(true, true, setup_from_scene(mesh, scene))
        for detail in args.details.split(","):
            for label, fit in integrations.items():
                subspace.fitted_cubature = fit
                subspace._SUBSPACES._items.clear()       # each integration prepares its own subspace
                try:
                    setup = setup_from_scene(mesh, dict(copy.deepcopy(scene), detail=detail))
                    run = engine.prepare(setup)
                    t = time.perf_counter()
                    x = run.bake()
                    ms = 1000 * (time.perf_counter() - t) / len(x)
                finally:
                    subspace.fitted_cubature = shipped
                sub, m = run.scene.sub, measures(x, true, setup)
                print(f"{name} {detail} ({sub.weights.shape[1]} handles, {sub.dims} coordinates) | {label}: "
                      f"{len(run.scene.weights)} triangles, force error {sub.cubature_error:.3f} | rel_l2 {m['rel_l2']:.4f} "
                      f"({m['rel_l2'] / still:.2f}x hold-still) | strain {m['strain'] / reference['strain']:.2f}x the "
                      f"reference's, flipped {m['flipped']:.0%} (reference {reference['flipped']:.0%}) | {ms:.0f} ms/frame",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
