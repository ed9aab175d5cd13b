"""Frame by frame, where a held-out scene's model and oracle part from the reference.

    .venv/bin/python experiments/scene_frames.py [flag_wind grid ...] [--scenes eval_out/small/scenes] [--every 1] [--frames 14]
        [--compression C]

Reads the frames `make eval-small` keeps (eval_out/small/scenes/NAME.npz: the reference, the
model and the oracle, exact physics in the model's coordinates) and prints, per frame, the
displacement of each one's centroid from its frame 0 (mm), the same for its far edge where the
scene is pinned (the twentieth of the vertices farthest from those the reference holds),
and the model's and the oracle's distance to the reference (mean over vertices, over the rest bounding box's diagonal: the
evaluation's rel_l2 of that frame). A scene whose error grows while the centroids agree is
out of phase or out of shape; one whose centroid lags is held back as a whole.
`--compression C`: the model's frames baked again by the bundled model with a sheet's compressed
edges at C of the membrane's stiffness (`StrainEnergy.cloth_compression`; see learning_headroom.py).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from engine.evaluation.scene_eval import far_edge


def bake_with_compression(name: str, scenes: Path, frames: int, compression: float) -> np.ndarray:
    """The scene baked by the bundled model with `cloth_compression` set."""
    import torch
    from engine.api import open_engine
    from engine.core.scene import setup_from_scene
    from engine.evaluation.scenes import evaluation_scenes
    torch.set_num_threads(1)
    cases, _ = evaluation_scenes([name], frames, scenes.parent / "meshes")
    engine = open_engine("neurok", model=None, device="cpu")
    engine.model.energy.cloth_compression = compression
    _, _, mesh, scene, _ = cases[0]
    return engine.prepare(setup_from_scene(mesh, scene)).bake()


def frame_table(path: Path, every: int, frames: int, compression: float | None = None) -> list[str]:
    data = dict(np.load(path))
    if compression is not None:
        data["neurok"] = bake_with_compression(path.stem, path.parent, len(data["reference"]), compression)
    ref = data["reference"]
    diagonal = float(np.linalg.norm(ref[0].max(0) - ref[0].min(0)))
    far = far_edge(ref)
    runs = ("reference", "neurok", "oracle")
    rows = [f"{path.stem}{'' if compression is None else f' (model: compressed edges at {compression})'}: frame | centroid moved (mm x, y, z): reference / model / oracle"
            + (" | far edge moved: reference / model / oracle" if far is not None else "") + " | distance: model, oracle"]
    for t in range(0, min(frames, len(ref)), every):
        moved = [np.round(1000.0 * (data[k][t] - data[k][0]).mean(0), 1) for k in runs]
        distance = [float(np.linalg.norm(data[k][t] - ref[t], axis=-1).mean()) / diagonal for k in runs[1:]]
        edge = "" if far is None else " | " + " / ".join(
            str(np.round(1000.0 * (data[k][t][far] - data[k][0][far]).mean(0), 1)) for k in runs)
        rows.append(f"  {t:3d} | {moved[0]} / {moved[1]} / {moved[2]}{edge} | {distance[0]:.3f}, {distance[1]:.3f}")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=["flag_wind", "grid"])
    p.add_argument("--scenes", default="eval_out/small/scenes")
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--frames", type=int, default=14)
    p.add_argument("--compression", type=float, default=None, help="bake the model again with this cloth_compression")
    args = p.parse_args(argv)
    for name in args.names:
        path = Path(args.scenes) / f"{name}.npz"
        if not path.is_file():
            print(f"{path} is missing: run make eval-small first")
            return 1
        print("\n".join(frame_table(path, args.every, args.frames, args.compression)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
