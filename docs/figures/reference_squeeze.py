"""Contact sheet of one squeeze row of the stress sweep (docs/PHYSICS.md (o)), vertices lying inside
another part of the body marked in black.

    .venv/bin/python docs/figures/reference_squeeze.py 10 0.45 docs/figures/reference_squeeze_10x.png

Arguments: multiple of the training top, Poisson ratio, output; `--cells` sets the lattice (3, as
the sweep); `--weightless` adds two frames after gravity and the floor are taken away at the end
(1 and 2.5 s later; stress.weightless_after measures the same). Top row: side view; bottom: from
below.
"""
import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from engine.core.formats import read_mesh  # noqa: E402
from engine.core.scene import setup_from_scene  # noqa: E402
from engine.reference.simulator import ReferenceSimulator  # noqa: E402
from engine.evaluation.reference_stress import inside_another_part, on_floor, squeeze_scene, training_squeeze  # noqa: E402

FRAMES = (0, 2, 4, 8, 12, 16, 30, 60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("multiple", type=float)
    ap.add_argument("poisson", type=float)
    ap.add_argument("out")
    ap.add_argument("--cells", type=int, default=3)
    ap.add_argument("--weightless", action="store_true")
    args = ap.parse_args()
    mesh = read_mesh("assets/samples/jelly.obj")
    faces = np.asarray(mesh.faces)
    scene = squeeze_scene(args.multiple * training_squeeze(mesh), args.poisson)
    setup = setup_from_scene(mesh, on_floor(mesh, scene))
    sim = ReferenceSimulator(setup, lattice_cells=args.cells)
    x = list(sim.iter_frames())
    frames = [f for f in FRAMES if f < len(x)]
    titles = [f"frame {f}" for f in frames]
    if args.weightless:
        setup.gravity, setup.floor_z = np.zeros(3), None
        end = len(x) - 1
        for k in range(1, 61):
            x.append(sim.step_frame())
            if k in (24, 60):
                frames.append(end + k)
                titles.append(f"+{k / 24:g} s weightless")
    x = np.array(x)
    lo, hi = x.min(axis=(0, 1)), x.max(axis=(0, 1))
    fig = plt.figure(figsize=(2.2 * len(frames), 4.6))
    for i, f in enumerate(frames):
        bad = inside_another_part(x[f], faces)
        for row, (elev, azim) in enumerate(((15, -60), (-30, -100))):
            ax = fig.add_subplot(2, len(frames), row * len(frames) + i + 1, projection="3d")
            ax.plot_trisurf(x[f, :, 0], x[f, :, 1], x[f, :, 2], triangles=faces, color="#e07a5f",
                            edgecolor="none", shade=True, alpha=0.5)
            if bad.any():
                ax.scatter(*x[f, bad].T, c="k", s=2)
            ax.set_xlim(lo[0], hi[0]); ax.set_ylim(lo[1], hi[1]); ax.set_zlim(lo[2], hi[2])
            ax.set_box_aspect(hi - lo)
            ax.view_init(elev=elev, azim=azim)
            ax.set_axis_off()
            if row == 0:
                ax.set_title(f"{titles[i]}\n{bad.sum()} inside", fontsize=8)
    fig.suptitle(f"jelly squeezed at {args.multiple:g}x the training top (rho a L / E = {0.25 * args.multiple:g}) "
                 f"for 12 frames, nu {args.poisson}, {args.cells}-cell lattice, reference with self-contact", fontsize=9)
    plt.tight_layout()
    plt.savefig(args.out, dpi=80)


if __name__ == "__main__":
    main()
