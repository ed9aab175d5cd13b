"""A stiff body (E = 200 kPa) sliding and tumbling down a tilted Collision box onto the floor, run
by the reference with its work budget off, printing each frame's most line-search halvings and
Newton iterations of any substep (issue 44: such a scene ran out of halvings, 106 > 100).

    python experiments/tumble_scan.py [--shape union] [--vertices 600] [--frames 96] [--lattice 6] [--friction 0.8]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


from engine.core.formats import Mesh  # noqa: E402
from engine.core.scene import setup_from_scene  # noqa: E402
from engine.reference.simulator import ReferenceSimulator  # noqa: E402
from engine.training.shapes import make_shape  # noqa: E402

RAMP_SIZE = (1.6, 1.0, 0.2)      # metres: a box, its long side tilted
RAMP_CENTRE = (0.0, 0.0, 0.6)
TILT = np.radians(30.0)
BODY_SIZE = 0.35                 # the body's bounding-box diagonal, metres


def ramp(size=RAMP_SIZE, tilt=TILT, centre=RAMP_CENTRE):
    """A closed box's vertices and triangles, turned by `tilt` about y (its +x end down)."""
    sx, sy, sz = size
    v = np.array([[x, y, z] for x in (-sx / 2, sx / 2) for y in (-sy / 2, sy / 2) for z in (-sz / 2, sz / 2)])
    c, s = np.cos(tilt), np.sin(tilt)
    v = v @ np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]).T + np.asarray(centre)
    faces = [[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
             [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]]
    return v, faces


def body_on_ramp(shape="union", vertices=600, seed=0) -> Mesh:
    """A procedural shape scaled to BODY_SIZE, held 0.2 m above the ramp's upper end."""
    mesh = make_shape(shape, np.random.default_rng(seed), vertices)
    v = mesh.vertices - mesh.vertices.mean(0)
    v = v / np.linalg.norm(np.ptp(v, axis=0)) * BODY_SIZE
    x = -0.45
    surface = RAMP_CENTRE[2] + RAMP_SIZE[2] / 2 / np.cos(TILT) - x * np.tan(TILT)
    return Mesh(v + np.array([x, 0.0, surface + 0.2 - v[:, 2].min()]), mesh.faces, name=shape)


def tumble_scene(frames=96, friction=0.8, stiffness=2.0e5) -> dict:
    v, faces = ramp()
    return {"format": "neurok.scene/1", "frames": int(frames), "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, -9.81],
            "material": {"preset": "rubber", "stiffness": float(stiffness)}, "floor": {"z": 0.0},
            "colliders": [{"name": "ramp", "vertices": v.tolist(), "faces": faces, "friction": float(friction)}]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="union")
    p.add_argument("--vertices", type=int, default=600)
    p.add_argument("--frames", type=int, default=96)
    p.add_argument("--lattice", type=int, default=6)
    p.add_argument("--friction", type=float, default=0.8)
    args = p.parse_args()
    mesh = body_on_ramp(args.shape, args.vertices)
    sim = ReferenceSimulator(setup_from_scene(mesh, tumble_scene(args.frames, args.friction)),
                             lattice_cells=args.lattice, substep=1.0 / 48.0, budget=None)
    sim.work_log, t0, peak = [], time.perf_counter(), 0
    for frame, x in enumerate(sim.iter_frames()):
        if frame == 0:
            continue
        work, sim.work_log = sim.work_log, []
        halvings = max(w.line_search_halvings for w in work)
        peak = max(peak, halvings)
        print(f"frame {frame}: halvings {halvings}, Newton {max(w.newton_iterations for w in work)}, "
              f"lowest z {x[:, 2].min():.3f}, centre x {x[:, 0].mean():.3f}, {time.perf_counter() - t0:.0f} s", flush=True)
    print(f"most line-search halvings in a substep: {peak}")


if __name__ == "__main__":
    main()
