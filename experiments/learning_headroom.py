"""What a learned density or a learned material scale could buy at best on the held-out scenes.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/learning_headroom.py [--scenes eval_out/small/scenes]
        [--only torus,jelly_poke,toy_drop] [--correction "-0.3,0;0.3,0"] [--material "damping=0.5;stiffness=0.5"]

The bundled model (its classical prior) on the scenes `make eval-small` keeps, against their
reference frames, changed one way at a time:
- `--correction "m1,m2;..."`: the density's correction with constant weights (m1, m2) on its
  two terms (`strain_energy.solid_correction_terms` / `cloth_correction_terms`), at most
  +-CORRECTION_BOUND: what a density correction the same everywhere would do. A trained one
  varies with the invariants and the material, but if no constant weights help, training has
  little to find there;
- `--material "key=factor,...;..."`: the scene's material numbers scaled (stiffness, bending,
  damping, air_damping) in the model only: what a learned material scale would do;
- `--compression "c;..."`: a sheet's membrane with compressed edges at c of its stiffness (a
  tension-field membrane, `StrainEnergy.cloth_compression`): the usual stand-in for wrinkles a
  coarse sheet cannot form.
Prints rel_l2 over the whole rollout and over frames 1..24 (x hold-still), and beside them the lowest
volume / rest, the mean edge strain (and it over the reference's) and the largest share of flipped
triangles (`engine.evaluation.prior_vs_trained.measures`), per scene; a run whose step cannot be solved says so.
"""
from __future__ import annotations

import argparse
import copy
import math

import numpy as np


def main(argv=None) -> int:
    import torch
    from engine.api import open_engine
    from engine.core.errors import SimulationFault
    from engine.core.scene import MATERIAL_PRESETS, setup_from_scene
    from engine.evaluation.distances import bbox_diagonal, rel_l2_curve
    from engine.learned.strain_energy import CORRECTION_BOUND
    from engine.evaluation.prior_vs_trained import describe, measures, kept_scenes
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", default="eval_out/small/scenes")
    p.add_argument("--only", default="toy_drop,jelly_poke,flag_wind,torus,grid")
    p.add_argument("--correction", default="", help='constant weights "m1,m2;m1,m2"')
    p.add_argument("--material", default="", help='model-only material factors "key=f,key=f;key=f"')
    p.add_argument("--compression", default="", help='a compressed cloth edge\'s share of the membrane stiffness "0.5;0.25"')
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    engine = open_engine("neurok", model=None, device="cpu")
    last = engine.model.energy.correction[-1]
    variants = [("prior", None, {})]
    variants += [(f"correction {c}", [float(v) for v in c.split(",")], {}) for c in args.correction.split(";") if c]
    variants += [(f"material {m}", None, dict((kv.split("=")[0], float(kv.split("=")[1])) for kv in m.split(",")))
                 for m in args.material.split(";") if m]
    variants += [(f"compression {c}", None, {"compression": float(c)}) for c in args.compression.split(";") if c]
    for name, mesh, scene, true in kept_scenes(args.only.split(","), args.scenes):
        setup = setup_from_scene(mesh, scene)
        diag = bbox_diagonal(true[0])
        still = rel_l2_curve(np.repeat(true[:1], len(true), 0), true, diag)
        strain = measures(true, true, setup)["strain"]
        material = dict(MATERIAL_PRESETS.get(scene["material"].get("preset"), {}),
                        **{k: v for k, v in scene["material"].items() if k != "preset"})
        for label, weights, factors in variants:
            with torch.no_grad():
                last.weight.zero_()
                last.bias.copy_(torch.tensor([math.atanh(w / CORRECTION_BOUND) for w in (weights or (0.0, 0.0))],
                                             dtype=last.bias.dtype))
            factors = dict(factors)
            engine.model.energy.cloth_compression = factors.pop("compression", 1.0)
            if "compression" in label and material.get("kind") != "cloth":
                continue
            if factors and not all(k in material for k in factors):
                continue                         # e.g. bending on a solid
            changed = copy.deepcopy(scene)
            changed["material"] = dict(changed["material"], **{k: material[k] * f for k, f in factors.items()})
            try:
                x = engine.prepare(setup_from_scene(mesh, changed)).bake()
            except SimulationFault as e:
                print(f"{name} | {label} | no step solved from frame {e.frame}")
                continue
            c, m = rel_l2_curve(x, true, diag), measures(x, true, setup)
            print(f"{name} | {label} | rel_l2 {m['rel_l2']:.4f} ({m['rel_l2'] / still[1:].mean():.3f}x hold-still), "
                  f"1..24 {c[1:25].mean() / still[1:25].mean():.3f}x | {describe(m)}, strain {m['strain'] / strain:.2f}x "
                  "the reference's", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
