"""Figures of issue 43: Coulomb friction and hanging rods, in both engines.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/friction_and_rods.py

Prints what tests/test_friction.py and tests/test_stiffness.py assert, with the numbers:
- a 0.2 x 0.2 x 0.1 m block sent at 2 m/s along the floor with mu = 0.5: where it stops
  (v^2 / 2 mu g = 0.408 m);
- the block on a 25 degree Collision ramp: its acceleration with mu = 0.3 (g (sin - mu cos) =
  1.479 m/s^2) and how far it moves in 1 s with mu = 0.6;
- 0.5 m rods (E = 200 kPa) hanging from their top face or cap: their sag (rho g L^2 / 2E = 6.13 mm).
The scenes are the tests' own (imported from tests/). About 1-2 minutes.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_module(name):
    """A module of tests/ loaded by its path and registered under its name (so the tests' modules
    that import each other, as test_stiffness imports test_reference, find one another)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    import torch
    test_module("test_reference")
    friction, stiffness = test_module("test_friction"), test_module("test_stiffness")
    G, SLOPE, ramp_setup, rollout, sliding_setup = (friction.G, friction.SLOPE, friction.ramp_setup, friction.rollout,
                                                    friction.sliding_setup)
    DENSITY, LENGTH, RODS, STIFFNESS, rod_setup, sag = (stiffness.DENSITY, stiffness.LENGTH, stiffness.RODS,
                                                         stiffness.STIFFNESS, stiffness.rod_setup, stiffness.sag)
    from engine.api import open_engine
    from engine.reference.simulator import ReferenceSimulator
    torch.set_num_threads(1)
    for engine in ("reference", "neurok"):
        x = rollout(engine, sliding_setup(0.5))
        stop = float(x[-1].mean(axis=0)[0] - x[0].mean(axis=0)[0])
        print(f"{engine}: block at 2 m/s, mu 0.5, stops after {stop:.3f} m (Coulomb {4 / (2 * 0.5 * G):.3f})")
        x = rollout(engine, ramp_setup(0.3))
        s = x.mean(axis=1)[:, 0] - x[0].mean(axis=0)[0]
        t = np.arange(len(s)) / 24
        late = t >= 0.25
        accel = 2 * np.polyfit(t[late], s[late], 2)[0]
        print(f"{engine}: 25 deg ramp, mu 0.3, slides at {accel:.3f} m/s^2 "
              f"(Coulomb {G * (np.sin(SLOPE) - 0.3 * np.cos(SLOPE)):.3f})")
        x = rollout(engine, ramp_setup(0.6))
        moved = float(np.linalg.norm(x.mean(axis=1) - x[0].mean(axis=0), axis=1).max())
        print(f"{engine}: 25 deg ramp, mu 0.6, moves {1000 * moved:.2f} mm in 1 s")
    theory = DENSITY * 9.81 * LENGTH ** 2 / (2 * STIFFNESS)
    for name, make in RODS.items():
        setup = rod_setup(make())
        ref = sag(setup, ReferenceSimulator(setup).solve_static())
        model = sag(setup, open_engine("neurok", device="cpu").prepare(setup).bake()[-1])
        print(f"{name} ({len(setup.rest)} vertices): sag {1000 * ref:.2f} mm (reference), {1000 * model:.2f} mm "
              f"(learned); rho g L^2 / 2E {1000 * theory:.2f} mm")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
