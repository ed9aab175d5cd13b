"""Is the reference's lattice mirror-symmetric? With one Kuhn split in every cell it was not, and a
symmetric body under a symmetric load drifted along the cells' shared diagonal; the reference now
mirrors the split in every other cell (PHYSICS_VERSION solid 3).

    OMP_NUM_THREADS=1 .venv/bin/python experiments/lattice_symmetry.py [rest] [poke] [--cells 6] [--frames 36]

The split the reference used before put six tetrahedra around the diagonal (0,0,0)-(1,1,1) of every
cell, the same in every cell, so the discretised body was stiffer along that diagonal than across it:
squashed straight down it sheared sideways along (1,1). Mirroring the split in every other cell along
each axis (the cells meet face to face as before) makes the lattice symmetric under the three axis
mirrors. This runs the reference with the old split and with the mirrored one (today's):
- rest: a jelly ball (r = 0.25 m) set on the floor under gravity;
- poke: the bundled jelly cube poked straight down at the centre of its top (jelly_poke.json);
and prints how far the centre of the vertices (and the centre of the top) moves sideways (mm, x and
y) by the last frame, and the learned engine's distance from each reference over hold-still's.
"""
from __future__ import annotations

import argparse
import runpy
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def kuhn_tetrahedra(self):
    """The split the reference used before (PHYSICS_VERSION solid 2): every cell the same Kuhn split."""
    from engine.reference.lattice import KUHN_AXIS_ORDERS, kuhn_tetrahedron
    return np.concatenate([self.cell_nodes[:, kuhn_tetrahedron(order, (0, 0, 0), self.order)]
                           for order in KUHN_AXIS_ORDERS])


def cases(frames):
    from engine.api import read_mesh, read_scene
    from engine.evaluation.scenes import uv_sphere
    balance = runpy.run_path(str(ROOT / "experiments" / "balance.py"))
    rest = dict(balance["cases"](0.25)["rest jelly"], frames=frames)
    poke = dict(read_scene(str(ROOT / "assets/scenes/jelly_poke.json")), frames=frames)
    return {"rest": (uv_sphere(0.25), rest), "poke": (read_mesh(str(ROOT / "assets/samples/jelly.obj")), poke)}


def reference_frames(setup, cells, mirrored):
    from engine.reference.lattice import Lattice
    from engine.reference.simulator import ReferenceSimulator
    from engine.training.generate import GENERATOR_SUBSTEP
    original = Lattice._tetrahedra
    Lattice._tetrahedra = original if mirrored else kuhn_tetrahedra
    try:
        sim = ReferenceSimulator(setup, lattice_cells=cells, substep=GENERATOR_SUBSTEP)
        x = np.stack(list(sim.iter_frames()))
    finally:
        Lattice._tetrahedra = original
    return x


def sideways(setup, x):
    rest = np.asarray(setup.rest)
    top = rest[:, 2] > rest[:, 2].max() - 0.02 * np.ptp(rest[:, 2])
    centre = 1000 * (x[-1].mean(axis=0) - x[0].mean(axis=0))
    top_moved = 1000 * (x[-1][top].mean(axis=0) - x[0][top].mean(axis=0))
    return centre[:2], top_moved[:2]


def main(argv=None) -> int:
    import torch
    from engine.api import open_engine
    from engine.core.scene import setup_from_scene
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", default=["rest", "poke"])
    p.add_argument("--cells", type=int, default=6)
    p.add_argument("--frames", type=int, default=36)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    for name, (mesh, scene) in cases(args.frames).items():
        if name not in args.cases:
            continue
        setup = setup_from_scene(mesh, scene)
        model = open_engine("neurok", device="cpu").prepare(setup).bake()
        for label, mirrored in (("one Kuhn split (before)", False), ("mirrored (the reference's)", True)):
            x = reference_frames(setup, args.cells, mirrored)
            centre, top = sideways(setup, x)
            distance = lambda y: float(np.linalg.norm(y[1:] - x[1:], axis=2).mean())    # noqa: E731
            ratio = distance(model) / distance(np.repeat(x[:1], len(x), axis=0))
            print(f"{name}, {args.cells} cells, {label}: centre moved sideways {np.round(centre, 1)} mm, "
                  f"top {np.round(top, 1)} mm; learned engine {ratio:.2f}x hold-still", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
