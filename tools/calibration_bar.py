"""Stiffness in Pa means Pa: Blender's 0.1 x 0.1 x 1 m bar hanging from its top face.

    .venv/bin/python tools/calibration_bar.py [--model CKPT] [--trained]

E = 100 kPa, rho = 1000 kg/m^3, nu = 0.3, pinned at its top face, under gravity
(`engine.evaluation.physical.hanging_bar`). Prints how far its bottom face drops (mm) for:
- the learned engine with the checkpoint's learned layers zeroed (the classical prior in the
  model's subspace, fitted cubature and all; `--trained` also runs the checkpoint as it is);
- the reference simulator (static solve);
- rho g L^2 / (2E), the textbook figure for a hanging column (nu = 0).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    from engine.evaluation.physical import bar_stretch, bar_theory, hanging_bar
    from engine.learned.checkpoint import default_model_path, load_checkpoint
    from engine.learned.runtime import NeurokRun
    from engine.reference.simulator import ReferenceSimulator
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--trained", action="store_true", help="also run the checkpoint's learned layers as they are")
    args = p.parse_args(argv)
    setup = hanging_bar()
    path = args.model or default_model_path()
    reference = bar_stretch(setup, ReferenceSimulator(setup).solve_static())
    prior = bar_stretch(setup, NeurokRun(load_checkpoint(path)[0].classical_prior(), setup).bake()[-1])
    print("hanging bar 0.1x0.1x1 m, E 100 kPa, rho 1000, nu 0.3: its bottom drops")
    print(f"  learned engine, classical prior: {1e3 * prior:.1f} mm ({100 * (prior / reference - 1):+.1f} % of the reference)")
    if args.trained:
        trained = bar_stretch(setup, NeurokRun(load_checkpoint(path)[0], setup).bake()[-1])
        print(f"  learned engine, checkpoint as trained: {1e3 * trained:.1f} mm ({100 * (trained / reference - 1):+.1f} %)")
    print(f"  reference simulator (static): {1e3 * reference:.1f} mm")
    print(f"  rho g L^2 / 2E: {1e3 * bar_theory():.1f} mm")
    return 0


if __name__ == "__main__":
    sys.exit(main())
