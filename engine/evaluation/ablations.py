"""Ablations (full preset) of model v2, all on the same evaluation sequences:

- integrator: backward Euler (the default) against implicit midpoint, same model;
- density: the checkpoint's learned strain energy density against classical-only (an untrained
  `NeurokModel` of the same configuration: its correction's last layers start at zero, so it is
  exactly stable neo-Hookean / the cloth membrane) and learned-from-scratch (no classical part;
  reported as not run: model v2 has no switch that drops the classical density, see
  `FROM_SCRATCH_NOT_RUN`);
- latent size: 4 / 6 / 8 / 12 affine handles (12 coordinates each). The learned part of v2 is a
  density at cubature samples, independent of the subspace, so each size runs the checkpoint's
  own density in a subspace of that many handles (no retraining: the density was trained at the
  checkpoint's size, which the row names).

A variant that fails to run stops the ablations with its error: a failure here is a bug to fix,
not a row to skip.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..training.generate import load_index
from .metrics import evaluate, pick_entries

ROOT = Path(__file__).resolve().parent.parent.parent
FROM_SCRATCH_NOT_RUN = ("model v2's density always contains the classical neo-Hookean / membrane part (strain_energy.py "
                        "has no switch to drop it), and an all-learned density starts at zero energy, so it needs its own "
                        "training run before it can be measured")


def _variant(model_path, out, name, handles=None, untrained=False):
    """A checkpoint next to the ablation output: the model at `model_path` with `handles`
    handles, and/or with an untrained (classical) density. It keeps the checkpoint's learned
    materials (at zero when untrained: the classical materials they name). At another number of
    handles the weight field starts afresh, i.e. the mesh's own eigenfunctions; the checkpoint's
    field is sized for its own handles, and a field whose learned layer is zero (the bundled
    one's) gives exactly those eigenfunctions at its own size."""
    import torch
    from ..learned.checkpoint import load_checkpoint, load_state, save_checkpoint
    from ..learned.model import ModelConfig, NeurokModel
    model, meta = load_checkpoint(model_path)
    cfg = dict(model.cfg.to_dict())
    if handles is not None:
        cfg["handles"] = int(handles)
    variant = NeurokModel(ModelConfig(**cfg))
    for preset, material in model.energy.preset_materials.items():
        variant.energy.add_preset(preset, material)
    if not untrained:
        state = model.state_dict()
        if variant.cfg.handles != model.cfg.handles:
            state = {k: v for k, v in state.items() if not k.startswith("weight_field.")}
        load_state(variant, state)
    else:
        torch.manual_seed(0)
    path = Path(out) / f"{name}.ckpt"
    save_checkpoint(path, variant, dict(meta, ablation=name, source=str(model_path)))
    return path, variant.cfg


def _trained(meta) -> bool:
    return bool(meta.get("steps"))


def run_ablations(cfg, model_path, data_dir, train_data, out, quiet=False):
    from ..learned.checkpoint import read_payload
    from ..learned.runtime import NeurokEngine
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    entries = pick_entries(load_index(data_dir), cfg["ablation_sequences"])
    files = [e["file"] for e in entries]
    meta = json.loads(read_payload(model_path).get("meta", "{}"))
    base_handles = NeurokEngine(model_path).model.cfg.handles
    rows = []

    def measure(name, engine=None, model=None, **extra):
        r = evaluate(model or model_path, data_dir, entries=entries, baselines=False, energy_steps=0, quiet=True,
                     engine=engine, chamfer=False)
        block = r["splits"]["all"]
        p = block.get("plausibility") or {}
        row = {"name": name, "status": "run", "sequences": len(entries),
               "rel_l2": block["rel_l2"], "horizons": block.get("horizons"), "unstable_share": block["unstable_share"],
               "volume_ratio_min": (block.get("plausibility_worst") or {}).get("volume_ratio_min"),
               "strain_mean": p.get("strain_mean"), "flipped_max": (block.get("plausibility_worst") or {}).get("flipped_max"),
               "heldout_rel_l2_mean": r["splits"].get("heldout", {}).get("rel_l2", {}).get("mean"),
               "ms_per_frame": r["ms_per_frame"]}
        row.update(extra)
        rows.append(row)
        if not quiet:
            print(f"ablation {name}: rel_l2 mean {row['rel_l2']['mean']:.4f}, unstable {row['unstable_share']:.2f}", flush=True)
        return row

    def not_run(name, group, reason, **extra):
        rows.append(dict({"name": name, "group": group, "status": "not run", "reason": reason}, **extra))

    # integrators on the default model
    default_row = measure("integrator: matched (the default: solids theta at 1/24 s, sheets backward Euler at 1/48 s)",
                          group="integrator")
    measure("integrator: backward_euler at 1/48 s", engine=NeurokEngine(model_path, integrator="backward_euler"),
            group="integrator")
    if not cfg.get("ablation_midpoint", True):
        not_run("integrator: implicit_midpoint", "integrator", "switched off for this run (ablation_midpoint=False)")
    else:
        measure("integrator: implicit_midpoint (default model)",
                engine=NeurokEngine(model_path, integrator="implicit_midpoint"), group="integrator")

    # densities
    learned_note = "" if _trained(meta) else " (this checkpoint is untrained: its density IS the classical one)"
    rows.append(dict(default_row, name=f"density: learned (the checkpoint){learned_note}; same run as the matched integrator",
                     group="density"))
    path, _ = _variant(model_path, out, "classical_only", untrained=True)
    measure("density: classical-only (untrained correction: stable neo-Hookean / cloth membrane)", model=path,
            group="density")
    not_run("density: learned from scratch (no classical part)", "density", FROM_SCRATCH_NOT_RUN)

    # latent sizes: the checkpoint's density in subspaces of 4 / 6 / 8 / 12 handles
    for H in cfg.get("ablation_handles", (4, 6, 8, 12)):
        name = f"latent: {H} handles ({12 * H} coordinates)"
        if H == base_handles:
            rows.append(dict(default_row, name=name + " = the checkpoint; same run as the matched integrator", group="latent",
                             handles=H, latent=12 * H))
            continue
        path, _ = _variant(model_path, out, f"handles_{H}", handles=H)
        measure(name + f", the density trained at {base_handles} handles", model=path, group="latent", handles=H,
                latent=12 * H)
    return {"rows": rows, "sequences": files, "model_handles": base_handles, "model_trained": _trained(meta)}
