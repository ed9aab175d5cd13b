"""A checkpoint's trained closures against its own classical prior on the held-out scenes
(`neurok prior-vs-trained`).

For each scene of the small evaluation preset (Blender primitives and the bundled samples,
`evaluation.scenes`): the reference simulator's converged ground truth, as the evaluation has it
(`scene_eval.ground_truth_settings`; read from `physics`, the physics `make eval-small` keeps, when it
is there, else computed and kept there: minutes per solid), then the learned engine twice: the
checkpoint as it is, and with every learned output layer set to zero (`NeurokModel.classical_prior`),
i.e. the classical material in the eigenfunction subspace. Reports rel_l2 over the whole rollout (mean
vertex distance / rest diagonal) beside hold-still, and the lowest volume / rest, the mean edge strain
and the largest share of flipped triangles of each (a run whose step cannot be solved is scored holding
its last good frame, and says so). This is the rule for the bundled model: until a trained model beats
its prior here, the bundled checkpoint is the prior (`require_closer`; `make train` copies a checkpoint
over the bundled one only then).

The sheets run without their full-space layer by default (`sheet_layer`): the closures make up for
the latent step's locking on its own, and under the layer they are off (`NeurokRun`), so there both
runs are the same.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np


def measures(pred, true, setup) -> dict:
    """rel_l2 over the rollout and the plausibility a viewer sees first, of `pred` against `true`."""
    from ..core.geometry import bbox_diagonal
    from ..core.measures import MeshMeasures
    diag = bbox_diagonal(setup.rest)
    n = min(len(pred), len(true))
    dist = np.linalg.norm(pred[:n] - true[:n], axis=-1).mean(axis=1) / diag
    frames = [MeshMeasures(setup.rest, setup.faces).frame(x) for x in pred[1:n]]
    volumes = [m["volume_ratio"] for m in frames if m["volume_ratio"] is not None]
    return {"rel_l2": float(dist[1:].mean()), "volume_min": min(volumes) if volumes else None,
            "strain": float(np.mean([m["edge_strain_mean"] for m in frames])),
            "flipped": float(max(m["flipped_share"] for m in frames)), "frames": int(n)}


def describe(m) -> str:
    volume = "n/a" if m["volume_min"] is None else f"{m['volume_min']:.2f}"
    fault = f", no step solved at frame {m['fault_frame']} (held from there)" if m.get("fault_frame") else ""
    return f"volume {volume}, strain {m['strain']:.1%}, flipped {m['flipped']:.0%}{fault}"


class WithSheetLayer:
    """An engine whose runs take the sheet layer as chosen ("auto", "on", "off")."""

    def __init__(self, engine, sheet_layer: str):
        self.engine, self.sheet_layer = engine, sheet_layer

    def prepare(self, setup):
        return self.engine.prepare(setup, sheet_layer=self.sheet_layer)


def prior_vs_trained(model=None, frames: int = 36, physics="eval_out/small/physics", sheets=None,
                     free_pins: bool = False, out=print, sheet_layer: str = "off") -> dict:
    """{"model", "scenes": {name: {"reference", "hold_still", "trained", "prior"}}, "mean": {...}};
    one line per scene to `out`. `free_pins`: both runs with the free body's handle weights (every
    handle moves the pins), as the model had them before the subspace held the pins."""
    import torch

    from ..core.scene import setup_from_scene
    from ..learned.checkpoint import default_model_path
    from ..learned.runtime import NeurokEngine
    from .metrics import predict
    from .physics_cache import KEPT, PhysicsCache, scene_job
    from .render import contact_sheet
    from .scene_eval import ground_truth_settings
    from .scenes import evaluation_scenes
    from .suite import SMALL_SCENES
    torch.set_num_threads(1)
    if free_pins:
        from ..learned import subspace
        subspace.HOLD_PINS = False
    path = model or default_model_path()
    engines = {"trained": NeurokEngine(path), "prior": NeurokEngine(path)}
    engines["prior"].model.classical_prior()
    engines = {label: WithSheetLayer(engine, sheet_layer) for label, engine in engines.items()}
    rows = {}
    cache = PhysicsCache(Path(physics), kept=KEPT)   # the ground truth kept in data/physics
    with tempfile.TemporaryDirectory() as tmp:    # Blender's primitives as make eval-small built them, where it did
        meshes = Path(physics).parent / "meshes"
        cases, _ = evaluation_scenes(SMALL_SCENES, frames, meshes if meshes.is_dir() else Path(tmp))
        for name, _, mesh, scene, _ in cases:
            setup = setup_from_scene(mesh, scene)
            true = cache.get(scene_job("reference", mesh, scene, **ground_truth_settings(None, name)))
            row = {"reference": measures(true, true, setup)}
            row["hold_still"] = measures(np.repeat(true[:1], len(true), 0), true, setup)["rel_l2"]
            runs = {}
            for label, engine in engines.items():   # a run that faults is held at its last good frame
                runs[label], fault, _, _ = predict(engine, setup)
                row[label] = dict(measures(runs[label], true, setup), fault_frame=fault)
            rows[name] = row
            if sheets:
                contact_sheet(dict(reference=true, **runs), setup.faces, Path(sheets) / f"{name}.png",
                              floor_z=setup.floor_z, title=f"{name}: reference | trained | classical prior")
            out(f"{name:11} hold still {row['hold_still']:.3f} | trained {row['trained']['rel_l2']:.3f} "
                f"({describe(row['trained'])}) | prior {row['prior']['rel_l2']:.3f} ({describe(row['prior'])}) "
                f"| reference ({describe(row['reference'])})")
    mean = {k: float(np.mean([r[k]["rel_l2"] for r in rows.values()])) for k in engines}
    out(f"mean rel_l2: trained {mean['trained']:.3f}, prior {mean['prior']:.3f}")
    return {"model": str(path), "sheet_layer": sheet_layer, "scenes": rows, "mean": mean}


def prior_vs_trained_command(model, frames, json_path, sheets, physics, free_pins, require_closer,
                             sheet_layer="off") -> int:
    """The command: print, write `json_path`, and return 1 when `require_closer` and the trained model is
    not closer to the reference than its prior."""
    result = prior_vs_trained(model, frames, physics, sheets, free_pins, out=lambda line: print(line, flush=True),
                              sheet_layer=sheet_layer)
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(result, indent=1))
    mean = result["mean"]
    if require_closer and not mean["trained"] < mean["prior"]:
        print(f"{result['model']}: not closer to the reference than its classical prior; keep the bundled checkpoint")
        return 1
    return 0


def kept_scenes(names, scenes="eval_out/small/scenes", frames: int = 36, out=print):
    """The held-out scenes whose reference frames `make eval-small` kept in `scenes` (NAME.npz), for the
    experiments: (name, mesh, scene, reference [T,N,3] float64) each, a line to `out` for each one missing,
    then the scene list's notes."""
    from .scenes import evaluation_scenes
    cases, notes = evaluation_scenes(list(names), frames, Path(scenes).parent / "meshes")
    for name, _, mesh, scene, _ in cases:
        path = Path(scenes) / f"{name}.npz"
        if not path.exists():
            out(f"{name}: no {path} (run make eval-small first)")
            continue
        yield name, mesh, scene, np.load(path)["reference"].astype(np.float64)
    for note in notes:
        out(note)
