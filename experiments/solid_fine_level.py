"""The learned engine's fine level for solids (`learned/solid_layer.py`, issue 55) against the
reference, on the cases it was built for: the poked torus and the jelly ball thrown along the floor.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/solid_fine_level.py [torus] [throw]
        [--cells 0 16] [--iterations 20 60] [--truth nodes|body] [--json OUT] [--sheet DIR]

- torus: the evaluation's poked torus against its 12-cell reference (`--truth body`: the one
  `make eval-small` keeps, eval_out/small/scenes/torus.npz, the body alone on the floor; `--truth
  nodes`: the same reference with its lattice nodes on the floor too, so the torus stands on its
  lattice's flat sole, as before solid physics 4, made once into eval_out/fine_level/, about 4 minutes); distance
  over the whole rollout and the first 24 frames over hold-still's (target <= 0.3x), and the centre's
  sag under its own weight before the poke (frame 4, mm);
- throw: `experiments/balance.py`'s jelly ball thrown at 2 m/s; where its centre is after 3 s (m;
  the 8-cell reference's: 0.44 m on its lattice's sole, 0.98 m with the body alone on the floor).
For each fine lattice (`--cells`: 0 = the subspace's own, else a finer one of that many cells along
the longest side) and iteration count: the figure, the lowest vertex below the floor (mm), and ms
per frame on one core, beside the lowest volume (share of the rest volume), the mean edge strain and
the most triangles turned inside out (`evaluation.plausibility`; the torus's reference's too); first the
learned engine without the fine level. `--sheet DIR`: a contact
sheet per case in DIR (the reference beside each run).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


SHEETS = {}     # case -> {"faces", "floor", optional "reference", (cells, iterations): frames}


def with_fine_level(engine, setup, cells, iterations):
    """The learned run of `setup` with its fine level on `cells` (0: the subspace's lattice)."""
    from engine.learned.solid_layer import SolidLayer
    run = engine.prepare(setup, solid_layer="on" if iterations else "off")
    if iterations:
        if cells:
            run.layer = SolidLayer(setup, run.scene, cells=cells)
            run._encode_layer_velocity = run.scene.velocity_encoder(run.layer.W)
        run.layer.iterations = iterations
    return run


def plausibility(frames, setup, prefix=""):
    """The rollout's lowest volume ratio, mean edge strain and largest share of flipped triangles."""
    from engine.evaluation.plausibility import plausibility_series, plausibility_summary
    p = plausibility_summary(plausibility_series(frames, setup))
    return {f"{prefix}volume_min": p["volume_ratio_min"], f"{prefix}strain_mean": p["strain_mean"],
            f"{prefix}flipped_max": p["flipped_max"]}


def timed_bake(run):
    t0 = time.perf_counter()
    frames = run.bake()
    return frames, 1000 * (time.perf_counter() - t0) / len(frames)


def torus_truth(setup, truth: str, kept: Path) -> np.ndarray:
    """The torus's 12-cell reference frames: the kept ones ("body"), or made once with the lattice's
    nodes on the floor too ("nodes")."""
    if truth == "body":
        return np.load(kept)["reference"]
    from engine.evaluation.scene_eval import REFERENCE_SETTINGS, reference_rollout
    cached = Path("eval_out/fine_level/torus_nodes.npy")
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        np.save(cached, reference_rollout(setup, dict(REFERENCE_SETTINGS, lattice_floor="nodes")))
    return np.load(cached)


def torus_case(engine, cells, iterations, truth):
    from engine.core.scene import setup_from_scene
    from engine.evaluation.scenes import evaluation_scenes
    kept = Path("eval_out/small/scenes/torus.npz")
    frame_count = len(np.load(kept)["reference"])
    cases, _ = evaluation_scenes(["torus"], frame_count, kept.parent.parent / "meshes")
    _, _, mesh, scene, _ = cases[0]
    setup = setup_from_scene(mesh, scene)
    ref = torus_truth(setup, truth, kept)
    frames, ms = timed_bake(with_fine_level(engine, setup, cells, iterations))
    diagonal = float(np.linalg.norm(np.ptp(ref[0], axis=0)))

    def distance(x, n):
        return float(np.mean(np.linalg.norm(x[:n] - ref[:n], axis=-1))) / diagonal
    hold = np.repeat(ref[:1], len(ref), axis=0)
    SHEETS.setdefault("torus", {"faces": setup.faces, "floor": setup.floor_z, "reference": ref})
    SHEETS["torus"][(cells, iterations)] = frames
    return {"whole_over_hold_still": distance(frames, len(ref)) / distance(hold, len(ref)),
            "first_24_over_hold_still": distance(frames, 24) / distance(hold, 24),
            "sag_mm_frame_4": float(1000 * (frames[0, :, 2].mean() - frames[4, :, 2].mean())),
            "reference_sag_mm_frame_4": float(1000 * (ref[0, :, 2].mean() - ref[4, :, 2].mean())),
            "lowest_mm_below_floor": float(1000 * max(0.0, setup.floor_z - float(frames[:, :, 2].min()))),
            "ms_per_frame": ms, **plausibility(frames, setup), **plausibility(ref, setup, "reference_")}


def throw_case(engine, cells, iterations, truth):
    import runpy
    from engine.core.scene import setup_from_scene
    from engine.evaluation.scenes import uv_sphere
    balance = runpy.run_path(str(Path(__file__).with_name("balance.py")))
    setup = setup_from_scene(uv_sphere(0.25), balance["cases"](0.25)["throw jelly"])
    frames, ms = timed_bake(with_fine_level(engine, setup, cells, iterations))
    SHEETS.setdefault("throw", {"faces": setup.faces, "floor": setup.floor_z})
    SHEETS["throw"][(cells, iterations)] = frames
    centre = frames.mean(axis=1)
    return {"x_m_end": float(centre[-1, 0] - centre[0, 0]), "x_m_most": float((centre[:, 0] - centre[0, 0]).max()),
            "lowest_mm_below_floor": float(1000 * max(0.0, setup.floor_z - float(frames[:, :, 2].min()))),
            "ms_per_frame": ms, **plausibility(frames, setup)}


def main(argv=None) -> int:
    import torch
    from engine.api import open_engine
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", default=["torus", "throw"])
    p.add_argument("--cells", type=int, nargs="*", default=[0])
    p.add_argument("--iterations", type=int, nargs="*", default=[20])
    p.add_argument("--truth", choices=("nodes", "body"), default="body",
                   help="the torus's reference: the body alone meets the floor (kept), or its lattice's nodes too")
    p.add_argument("--json", default=None)
    p.add_argument("--sheet", default=None, help="write a contact sheet per case into this folder")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    engine = open_engine("neurok", device="cpu")
    runs = {"torus": torus_case, "throw": throw_case}
    out = {}
    for case in args.cases:
        settings = [(0, 0)] + [(c, i) for c in args.cells for i in args.iterations]
        for cells, iterations in settings:
            key = f"{case}, " + ("latent step alone" if not iterations else
                                 f"fine level on {'the subspace lattice' if not cells else f'{cells} cells'}, "
                                 f"{iterations} iterations")
            out[key] = runs[case](engine, cells, iterations, args.truth)
            print(key, json.dumps({k: None if v is None else round(v, 4) for k, v in out[key].items()}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.sheet:
        from engine.evaluation.render import contact_sheet
        for case, kept in SHEETS.items():
            columns = {"reference": kept["reference"]} if "reference" in kept else {}
            for key, frames in kept.items():
                if isinstance(key, tuple):
                    cells, iterations = key
                    columns["latent step" if not iterations else f"fine {cells or 'own'} x {iterations}"] = frames
            path = Path(args.sheet) / f"{case}.png"
            contact_sheet(columns, kept["faces"], path, floor_z=kept["floor"], title=case + (f" ({args.truth} truth)" if case == "torus" else ""))
            print(f"contact sheet: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
