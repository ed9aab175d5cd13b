"""Contact sheet of the jelly demo baked by the reference simulator (docs/PHYSICS.md).

    .venv/bin/python -m engine simulate --mesh assets/samples/jelly.obj \
        --scene assets/scenes/jelly_poke.json --engine reference --out /tmp/jelly_ref.npz
    .venv/bin/python docs/figures/reference_jelly_poke.py /tmp/jelly_ref.npz docs/figures/reference_jelly_poke.png

Top row: the surface at chosen frames (side view); bottom: enclosed volume and height over time.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from engine.core.formats import read_sequence  # noqa: E402
from engine.core.measures import MeshMeasures  # noqa: E402

FRAMES = (0, 6, 8, 10, 14, 20, 30, 47)


def main(src, out):
    seq = read_sequence(src)
    x, faces = np.asarray(seq.positions), np.asarray(seq.faces)
    measures = MeshMeasures(seq.rest, faces)
    volume = [measures.frame(f)["volume_ratio"] for f in x]
    height = np.ptp(x[:, :, 2], axis=1)
    frames = [f for f in FRAMES if f < len(x)]
    fig = plt.figure(figsize=(2.0 * len(frames), 5.2))
    lo, hi = x.min(axis=(0, 1)), x.max(axis=(0, 1))
    for i, f in enumerate(frames):
        ax = fig.add_subplot(2, len(frames), i + 1, projection="3d")
        ax.plot_trisurf(x[f, :, 0], x[f, :, 1], x[f, :, 2], triangles=faces, color="#e07a5f",
                        edgecolor="none", shade=True)
        ax.set_xlim(lo[0], hi[0]); ax.set_ylim(lo[1], hi[1]); ax.set_zlim(lo[2], hi[2])
        ax.set_box_aspect(hi - lo)
        ax.view_init(elev=12, azim=-60)
        ax.set_axis_off()
        ax.set_title(f"frame {f}\nvol {volume[f]:.2f}", fontsize=9)
    ax = fig.add_subplot(2, 1, 2)
    t = np.arange(len(x))
    ax.plot(t, volume, label="enclosed volume / rest")
    ax.plot(t, height / height[0], label="height / rest height")
    ax.axvspan(6, 8, color="0.85", label="150 m/s² impulse")
    ax.set_xlabel("frame (1/24 s)"); ax.set_ylim(0, 1.2); ax.legend(loc="lower right", fontsize=8)
    ax.set_title("jelly demo, reference simulator (stable neo-Hookean, quadratic tetrahedra)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    main(*sys.argv[1:3])
