"""How close the model's state space can come to the reference, beside how close its dynamics come.

    .venv/bin/python experiments/subspace_reach.py [--scenes eval_out/small/scenes] [--handles 8,16,24] [--only torus,flag_wind] [--free-pins]

For each evaluation scene `make eval-small` kept (`eval_out/small/scenes/NAME.npz`: the
reference's frames, the model's and the oracle's), the **reach** of a skinning subspace: the
closest its coordinates come to each reference frame (least squares over the vertices), scored
like the model (rel_l2 = mean vertex distance / rest bounding-box diagonal, frames 1..T-1, and
over hold-still). It is a floor no dynamics in that subspace can go under. Printed at the
model's own handle count (`subspace.resolution`, medium detail) and at each of `--handles`, with
the mean edge strain of those nearest states beside the reference's own (`edge_strain`), and for
a pinned scene how many of the model's coordinates leave every pin still (the motions its pins
do not fight; the model's handles hold the pins, `--free-pins` measures the free body's handles).

Read it as: reach far below the model and the oracle (the physics-exact reduced model with as
many handles) with the nearest states' strain near the reference's -> the subspace can show the
motion and the reduced dynamics miss it (Galerkin projection of the full physics is not the
projection of its motion); reach near them, or nearest states strained far beyond the
reference's (a locking subspace: it comes near a fold only by stretching, which its own energy
forbids) -> the subspace is the limit, and more handles or other weights are what would help.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


SHEETS = ("flag_wind", "grid")


def rel_l2(pred, true, diag) -> float:
    return float((np.linalg.norm(pred - true, axis=-1).mean(axis=-1) / diag)[1:].mean())


def edge_strain(frames, faces) -> float:
    """Mean |l/L - 1| over the mesh's edges and frames 1..T-1: what it costs a membrane to be there."""
    edges = np.unique(np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), 1), axis=0)
    rest = np.linalg.norm(frames[0][edges[:, 0]] - frames[0][edges[:, 1]], axis=-1)
    length = np.linalg.norm(frames[1:, edges[:, 0]] - frames[1:, edges[:, 1]], axis=-1)
    return float(np.abs(length / rest - 1.0).mean())


def held(frames) -> np.ndarray | None:
    """The vertices the reference holds (moving under a millimetre: its pins), as pin weights; None if none."""
    still = (np.abs(frames - frames[0]).max(axis=(0, 2)) < 1e-3).astype(np.float64)
    return still if still.any() else None


def subspace_of(frames, faces, kind, handles, lattice_cells, free_pins=False):
    """The subspace of `handles` eigenfunction handles whose handles after the first leave the
    held vertices where they are, as the model's do (`free_pins`: the free body's eigenfunctions)."""
    from engine.learned.subspace import build_subspace
    return build_subspace(frames[0], faces, kind, handles, lattice_cells, samples=1, contact_samples=1,
                          full_integration=True,   # the cubature plays no part in the basis
                          held=None if free_pins else held(frames))


def reach(frames, faces, kind, handles, lattice_cells, free_pins=False) -> np.ndarray:
    """The frames' nearest states in that subspace [T,N,3]."""
    rest = frames[0]
    sub = subspace_of(frames, faces, kind, handles, lattice_cells, free_pins)
    B = sub.vertex_basis.reshape(-1, sub.dims)
    U = ((frames - rest) / sub.norm.scale).reshape(len(frames), -1).T
    q, *_ = np.linalg.lstsq(B, U, rcond=None)
    return rest + (B @ q).T.reshape(frames.shape) * sub.norm.scale


def free_coordinates(frames, faces, kind, own, free_pins) -> str:
    """' | coordinates: d, left free by the pins: k' for a pinned scene (k: those that leave every held vertex still)."""
    import scipy.linalg
    pins = held(frames)
    if pins is None:
        return ""
    sub = subspace_of(frames, faces, kind, own.handles, own.lattice_cells, free_pins)
    rows = sub.vertex_basis[pins > 0].reshape(-1, sub.dims)
    free = scipy.linalg.null_space(rows, rcond=1e-8).shape[1]
    return f" | coordinates: {sub.dims}, left free by the pins: {free}"


def main(argv=None) -> int:
    from engine.learned.model import ModelConfig
    from engine.learned.subspace import resolution
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", default="eval_out/small/scenes", help="folder of NAME.npz from make eval-small")
    p.add_argument("--handles", default="8,16,24", help="handle counts to measure besides the model's own")
    p.add_argument("--only", default=None, help="comma-separated scene names (default: every file)")
    p.add_argument("--free-pins", action="store_true", help="handles of the free body's eigenfunctions, which move the pins too (the model's before it held them)")
    args = p.parse_args(argv)
    files = sorted(Path(args.scenes).glob("*.npz"))
    if args.only:
        files = [f for f in files if f.stem in args.only.split(",")]
    if not files:
        print(f"no scenes in {args.scenes}: run make eval-small first", file=sys.stderr)
        return 1
    cfg = ModelConfig()
    counts = [int(h) for h in args.handles.split(",") if h]
    print("scene | handles (model's) | model | oracle | reach at the model's handles | reach at " +
          " / ".join(map(str, counts)) + " handles  (x hold-still) | mean edge strain: reference, nearest states at the model's handles / at each count")
    for f in files:
        d = np.load(f)
        true = d["reference"].astype(np.float64)
        faces = d["faces"]
        kind = "cloth" if f.stem in SHEETS else "solid"
        diag = float(np.linalg.norm(np.ptp(true[0], axis=0)))
        still = rel_l2(np.repeat(true[:1], len(true), 0), true, diag)
        own = resolution(true[0], faces, kind, cfg.handles, cfg.lattice_cells)
        nearest = reach(true, faces, kind, own.handles, own.lattice_cells, args.free_pins)
        row = [rel_l2(d["neurok"].astype(np.float64), true, diag), rel_l2(d["oracle"].astype(np.float64), true, diag),
               rel_l2(nearest, true, diag)]
        more = [reach(true, faces, kind, h, max(own.lattice_cells, int(np.ceil(2.5 * np.sqrt(h)))), args.free_pins) for h in counts]
        row += [rel_l2(m, true, diag) for m in more]
        cells = " | ".join(f"{v:.4f} ({v / still:.2f}x)" for v in row[:3]) + " | " + \
            " / ".join(f"{v / still:.2f}x" for v in row[3:])
        strain = f"{100 * edge_strain(true, faces):.2f} %, " + " / ".join(
            f"{100 * edge_strain(m, faces):.2f} %" for m in [nearest] + more)
        print(f"{f.stem} | {own.handles} | {cells} | {strain}{free_coordinates(true, faces, kind, own, args.free_pins)}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
