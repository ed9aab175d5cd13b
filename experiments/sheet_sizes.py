"""The sheet layer on finer meshes of the same scenes: the flag in its gust (0.6 x 0.4 m, pinned
along its pole, with self-collision as its scene asks) and the cloth dropped on a table, at about
1,000 and 10,000 vertices, against the reference simulator on the same mesh (the flag at 10k: about
half an hour on one core; the tablecloth at 10k: more), with contact sheets (reference beside model).
The learned engine runs as a default (Medium) run does, above 2,000 vertices on its coarse proxy
(`learned/sheet_proxy.py`), and with the layer on every vertex (`--sheet-layer full`, High's).

    OMP_NUM_THREADS=1 python experiments/sheet_sizes.py [--sizes 1000 10000] [--scenes flag drape]
        [--frames 24] [--no-self-collision] [--iterations N ...] [--out eval_out/sheet_sizes]

`--iterations 40 60` also runs the proxy with that many layer iterations a substep (a default run
takes 20), to see what the first fall costs. Each proxy run is followed by the reference's own frames
seen through the proxy (restricted to its vertices and embedded back): what the proxy can show at best.

`--no-self-collision` runs the scenes without it (the flag's reference at 10k then takes about 7
minutes instead of more than an hour: the reference's self-contact at 10k vertices is slow).

Prints per scene, size and run what `sheet_layer_designs.py` prints (distance over the rollout and
over holding still, edge strain, flipped triangles, the far edge's fall by frame 4 or the
overhang's tilt), ms per frame of each engine, and writes `<scene>_<size>.png`. The reference's
frames are kept in the out folder (`<scene>_<size>_reference.npz`, stamped with the reference's
physics version, the mesh and the scene) and reused while the stamp holds.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def flag_mesh(vertices: int):
    """The bundled flag's rectangle (0.6 x 0.4 m in the xz plane) as a regular grid of about `vertices`."""
    from engine.core.formats import Mesh
    rows = max(2, int(round(np.sqrt(vertices / 1.5))))
    cols = max(2, int(round(1.5 * rows)))
    X, Z = np.meshgrid(np.linspace(-0.3, 0.3, cols), np.linspace(-0.2, 0.2, rows))
    v = np.stack([X.ravel(), np.zeros(X.size), Z.ravel()], axis=1)
    idx = np.arange(rows * cols).reshape(rows, cols)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, 1:].ravel(), idx[1:, :-1].ravel()
    return Mesh(v, np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)]).astype(np.int32), name="flag")


def case(scene_name: str, vertices: int, frames: int):
    from engine.api import read_scene
    from engine.evaluation.scenes import drape_case
    root = Path(__file__).resolve().parent.parent
    if scene_name == "flag":
        return flag_mesh(vertices), dict(read_scene(str(root / "assets/scenes/flag_wind.json")), frames=frames)
    return drape_case(frames, cells=max(2, int(round(np.sqrt(vertices))) - 1))


def kept_reference(setup, scene, path: Path, rollout):
    """The reference's frames of `setup` (made from `scene`), from `path` while its stamp holds,
    else run and kept: (frames, seconds the run took or None)."""
    from engine.reference.stamp import digest, physics_version
    stamp = digest(physics_version(setup.material.kind), np.asarray(setup.rest), np.asarray(setup.faces),
                   scene, setup.frames)
    if path.is_file():
        kept = np.load(path)
        if str(kept["stamp"]) == stamp:
            return kept["frames"], None
    t0 = time.perf_counter()
    frames = rollout(setup)
    seconds = time.perf_counter() - t0
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, frames=frames, stamp=stamp)
    return frames, seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000])
    p.add_argument("--scenes", nargs="*", default=["flag", "drape"], choices=["flag", "drape"])
    p.add_argument("--frames", type=int, default=24)
    p.add_argument("--no-self-collision", action="store_true", help="the scenes without self-collision")
    p.add_argument("--iterations", type=int, nargs="*", default=[],
                   help="also run the proxy with this many layer iterations a substep (default run: 20)")
    p.add_argument("--out", default="eval_out/sheet_sizes")
    args = p.parse_args(argv)
    import torch
    from engine.api import open_engine
    from engine.core.scene import setup_from_scene
    from engine.core.setup import SHEET_PROXY_VERTICES
    from engine.evaluation.render import contact_sheet
    from engine.evaluation.scene_eval import reference_rollout, sheet_summary as measures
    torch.set_num_threads(1)
    model = open_engine("neurok", device="cpu")
    for name in args.scenes:
        for n in args.sizes:
            mesh, scene = case(name, n, args.frames)
            if args.no_self_collision:
                scene = {k: v for k, v in scene.items() if k != "self_collision"}
            setup = setup_from_scene(mesh, scene)
            ref, seconds = kept_reference(setup, scene, Path(args.out) / f"{name}_{setup.num_vertices}_reference.npz",
                                          reference_rollout)
            label = "drape" if name == "drape" else "flag_wind"
            ran = "kept" if seconds is None else f"{1000 * seconds / (len(ref) - 1):.0f} ms/frame"
            print(f"{name} {setup.num_vertices} vertices: reference {ran}", flush=True)
            runs = {"reference": ref}
            proxied = setup.num_vertices > SHEET_PROXY_VERTICES
            variants = [("on", None), ("full", None)] if proxied else [("on", None)]
            variants += [("on", k) for k in args.iterations] if proxied else []
            for choice, iterations in variants:
                t1 = time.perf_counter()
                run = model.prepare(setup, sheet_layer=choice)
                if iterations is not None:
                    run.layer.iterations = iterations
                xs = np.asarray(run.bake())
                t2 = time.perf_counter()
                what = (f"layer on a {len(run.layer.rest):,}-vertex proxy" if run.proxy is not None
                        else "layer on every vertex")
                what += f", {run.config.substeps} x {run.layer.iterations} iterations a frame"
                print(f"  {what}: {measures(xs, ref, setup, label)} | "
                      f"{1000 * (t2 - t1) / (len(xs) - 1):.0f} ms/frame with its prepare", flush=True)
                if iterations is None:
                    runs["NeuROK, " + ("proxy" if run.proxy is not None else "every vertex")] = xs
                if run.proxy is not None and iterations is None:
                    # what the proxy can show at best: the reference's own frames at its vertices, embedded
                    through = np.stack([run.proxy.positions(x[run.proxy.keep]) for x in ref])
                    print(f"  the reference through the proxy: {measures(through, ref, setup, label)}", flush=True)
            path = Path(args.out) / f"{name}_{setup.num_vertices}.png"
            contact_sheet(runs, setup.faces, path, rows=5, floor_z=setup.floor_z,
                          title=f"{name}, {setup.num_vertices} vertices")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
