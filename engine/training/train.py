"""Training: `neurok train --data DIR --out CKPT [--init CKPT] [--steps N | --minutes M]`.

Two stages share the budget:
1. subspace (first 20%): the skinning-weight field (`model.WeightField`) is fitted so that the
   observed frames project onto each mesh's subspace with the least mass-weighted error;
2. dynamics (the rest): the strain energy density's invariant-based correction
   (`learned/strain_energy.py`; the classical Lame and bending scales stay at 1, see
   `trainable_parameters`) is trained from trajectories, by
   batches of short rollouts through the implicit step (gradient by the implicit-function
   trick, `integrators.differentiable_step`), compared with the encoded true frames, starting
   from noisy encoded states (DESIGN.md section 2: rollout training with noise injection is what
   made latent dynamics stable).
Forces, pins and materials are inputs, never outputs.

Resumable: the state (weights, optimiser, step, elapsed time) is saved to OUT.resume every
few minutes and when the run ends; running the same command again continues from there.
Under `torchrun` each process trains on its own batches and gradients are averaged (gloo on
CPU, nccl on GPU); only rank 0 writes files.
"""
from __future__ import annotations

import copy
import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from ..core.errors import NeurokError, SimulationFault
from ..core.formats import read_sequence
from ..core.material_params import Material
from ..core.physics import substeps_per_frame
from ..core.progress import ProgressBar
from ..core.scene import MATERIAL_PRESETS, register_learned_presets, resolve_material, setup_from_sequence
from ..learned.checkpoint import default_model_path, load_state, model_for_payload, read_payload, save_checkpoint
from ..learned.integrators import differentiable_step
from ..learned.latent_scene import LatentScene
from ..learned.strain_energy import DTYPE, PRESET_PARAMETERS
from ..learned.model import ModelConfig, NeurokModel
from ..learned.runtime import SUBSTEP, NeurokRun
from ..learned.subspace import handle_jacobian
from .generate import load_index

SUBSPACE_SHARE = 0.2
SUBSPACE_FRAMES = 8          # frames per sequence the subspace stage fits
BATCH = 4
ROLLOUT_FRAMES = (3, 6)      # rollout length grows from the first to the second over the run
START_NOISE = 1e-3           # std of the noise on the start latent (normalised lengths)
LEARNING_RATE = 3e-3
MATERIAL_LEARNING_RATE = 1e-2   # a learned material is six numbers of order one
DISSIPATION_LEARNING_RATE = 3e-2
MATERIAL_NUMBERS = tuple(n.removeprefix("log_") for n in PRESET_PARAMETERS)   # what --learn names
NUMERIC_MATERIAL_KEYS = ("stiffness", "density", "poisson", "damping", "air_damping", "bending", "i2_share")
CLOSURES = ("density", "dissipation", "compression")   # what a run without --material can learn (`trainable_parameters`)
DEFAULT_CLOSURES = ("density", "dissipation")
CLOSURE_MODULES = {"density": "correction", "dissipation": "dissipation", "compression": "compression"}   # their StrainEnergy modules
SAVE_EVERY_SECONDS = 300
REFRESH_DATA_SECONDS = 300   # sequences still being generated join the run as they appear


@dataclass
class TrainItem:
    setup: object
    scene: LatentScene
    qs: torch.Tensor       # [T,d] encoded true frames
    entry: dict
    positions: np.ndarray  # [T,N,3] true frames (metres)

    def rebuild(self, model):
        """The latent scene again, after the weight field changed the subspace."""
        with torch.no_grad():
            self.scene = LatentScene(model, self.setup)
        self.qs = encode_frames(self.scene, self.positions)
        self.__dict__.pop("_projection", None)


def data_index(data) -> list[dict]:
    """The index entries (each with its "path") of one data folder or of several (a list)."""
    folders = [data] if isinstance(data, (str, Path)) else list(data)
    return [e for folder in folders for e in load_index(folder)]


def load_items(model, data, splits=("train",), limit=None, skip=(), fixed=None, material=None) -> list[TrainItem]:
    """Training sequences of one data folder or several (`data_index`) with their latent scenes
    (built once: the subspace needs no training) and their encoded frames. `skip`: paths already
    loaded. `fixed`: one resolution for every mesh (`LatentScene`); `material`: the learned
    material every sequence is taken to be made of."""
    entries = [e for e in data_index(data) if e.get("split", "train") in splits and e["path"] not in skip]
    items = []
    for e in entries[:limit]:
        seq = read_sequence(e["path"])
        setup = setup_from_sequence(seq)
        if material:
            setup.material = replace(setup.material, preset=material)
        with torch.no_grad():
            scene = LatentScene(model, setup, fixed=fixed)
        items.append(TrainItem(setup, scene, encode_frames(scene, seq.positions), e, seq.positions))
    return [i for i in items if len(i.qs) >= ROLLOUT_FRAMES[0] + 2]   # short sequences get shorter rollouts


def encode_frames(scene: LatentScene, positions) -> torch.Tensor:
    return torch.stack([scene.encode(scene.sub.norm.forward(x)) for x in positions])


def projection_loss(model, item: TrainItem) -> torch.Tensor:
    """Mass-weighted mean squared distance (diagonals^2) between observed frames and their
    projection onto the subspace the weight field gives this mesh."""
    sub = item.scene.sub
    cache = item.__dict__.setdefault("_projection", {})
    if not cache:
        frames = np.linspace(0, len(item.qs) - 1, min(SUBSPACE_FRAMES, len(item.qs))).astype(int)
        cache.update(functions=torch.as_tensor(sub.functions, dtype=DTYPE), nodes=torch.as_tensor(sub.nodes, dtype=DTYPE),
                     centre=torch.as_tensor((sub.node_mass[:, None] * sub.nodes).sum(0), dtype=DTYPE),
                     W=torch.as_tensor(sub.W.toarray(), dtype=DTYPE), m=torch.as_tensor(np.repeat(sub.vertex_mass, 3), dtype=DTYPE),
                     U=torch.as_tensor(np.stack([(sub.norm.forward(item.positions[t]) - sub.rest).ravel() for t in frames], 1),
                                       dtype=DTYPE))
    c = cache
    w = model.weight_field.for_handles(c["functions"], sub.spectrum, sub.weights.shape[1])
    J = handle_jacobian(c["nodes"], c["centre"], w)
    B = (c["W"] @ J.reshape(len(c["nodes"]), -1)).reshape(-1, J.shape[-1])
    MB = c["m"][:, None] * B
    lhs = B.T @ MB
    lhs = lhs + 1e-9 * torch.diagonal(lhs).mean() * torch.eye(len(lhs), dtype=DTYPE)
    coeff = torch.linalg.solve(lhs, MB.T @ c["U"])
    r = c["U"] - B @ coeff
    return (c["m"][:, None] * r ** 2).sum(0).mean()


def rollout_loss(item: TrainItem, frames: int, rng=None, t0=None, noise=START_NOISE) -> torch.Tensor:
    """Mean squared latent error (mass-weighted RMS displacement, diagonals) of a short rollout
    from a noisy encoded true state (random start frame unless `t0`), against the encoded true frames."""
    setup, scene, qs = item.setup, item.scene, item.qs
    substeps = substeps_per_frame(setup.dt, SUBSTEP)
    h = setup.dt / substeps
    frames = min(frames, len(qs) - 2)
    t0 = int(rng.integers(1, len(qs) - frames)) if t0 is None else t0
    q = qs[t0] + (torch.as_tensor(rng.normal(0.0, noise, size=qs.shape[1]), dtype=DTYPE) if noise else 0.0)
    qd = (qs[t0] - qs[t0 - 1]) / setup.dt
    errors = []
    for k in range(frames):
        for _ in range(substeps):
            q, qd, ok = differentiable_step(scene, t0 + k, q, qd, h)
            if not ok or not bool(torch.isfinite(q).all()):   # a step that failed teaches nothing: stop here
                return torch.stack(errors).mean() if errors else None
        errors.append(torch.sum((q - qs[t0 + k + 1]) ** 2))
    return torch.stack(errors).mean()


# --------------------------------------------------------------------------- the loop

def distributed():
    """(rank, world) under torchrun, else (0, 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return int(os.environ.get("RANK", "0")), world


def average_gradients(model, world):
    if world == 1:
        return
    for p in model.parameters():
        if p.grad is not None:
            torch.distributed.all_reduce(p.grad)
            p.grad /= world


def data_statistics(items):
    """Material ranges of the training data, kept in the checkpoint for the out-of-distribution indicator."""
    omega = {"solid": [], "cloth": []}
    for item in items:
        omega[item.scene.kind].append(item.setup.material.omega2(item.scene.scale))
    return {"omega2_range": {k: [min(v), max(v)] for k, v in omega.items() if v}}


def train(data, out, init=None, steps=None, minutes=None, seed=0, quiet=False, log=None, progress=None, cancel=None,
          fit_weights=False, material=None, learn=None, material_base=None, closures=DEFAULT_CLOSURES, free_run=None):
    """Train (or fine-tune from `init`) and write the checkpoint `out`. `progress(fraction)` is
    called after each step; setting the `cancel` event stops early (the checkpoint is saved).

    `fit_weights`: spend the first SUBSPACE_SHARE of the run fitting the skinning weight field
    (stage 1). Off by default: the handle weights stay the mesh's own eigenfunctions. A fitted
    field reads each eigenfunction's values, but where eigenvalues repeat (a sphere's, a cube's)
    the eigenfunctions are any rotation of each other, so the field made symmetric bodies lopsided
    (a jelly ball at rest on the floor slid 78 mm in 3 s) and lost to the plain eigenfunctions on
    4 of the 6 held-out scenes (docs/MODEL_CARD.md).

    `material`: learn only that material preset (its few numbers, `strain_energy.PRESET_PARAMETERS`)
    from the data, everything else of `init` (the bundled checkpoint if None) kept as it is. A new
    name starts from the data's own median material; an existing learned one is refined. `learn`:
    which of its numbers (`MATERIAL_NUMBERS`) are learned, the others held (all if None): a material
    whose stiffness is known (reference data of a named law) learns only what the law leaves open.
    `material_base`: the material (a scene's material dict) a new learned one refines when a scene
    names it, instead of the data's median (training always uses each sequence's own numbers).
    `closures`: which of the learned closures (`CLOSURES`) a run without `material` trains; the
    others are held as `init` has them. `data`: one folder or a list of them.
    `free_run`: every rollout starts at a sequence's first frames and runs this many frames, as a
    user's bake does (None: short rollouts from random noisy frames, `ROLLOUT_FRAMES`). Short
    windows from encoded true states teach more damping than a whole bake wants: those states
    carry the stretch a locked subspace needs to show a fold, which damping hides (docs/MODEL_CARD.md)."""
    rank, world = distributed()
    torch.manual_seed(seed)                 # the same initial weights on every process
    rng = np.random.default_rng([seed, rank])   # each process its own batches
    torch.set_num_threads(1)  # many small ops: threads only add overhead
    if steps is None and minutes is None:
        steps = 200
    out = Path(out)
    resume = out.with_name(out.name + ".resume")
    if material:
        init = init or default_model_path()
        fit_weights = False
    model, state = _initial_model(init, resume)
    if material:
        base_meta = json.loads(read_payload(init).get("meta", "{}"))   # the model's record stays; the material is added
        params = [material_parameters(model, material, data, learn, material_base)]
    else:
        params = trainable_parameters(model, fit_weights, closures)
    # the data's scenes may name any material the model knows, learned ones included (and the one being learned)
    register_learned_presets(model.energy.preset_materials)
    # a run from `init` keeps the record of the learned materials it carries on
    # (and of the closures it learned: a run records those and its own; and of the data ranges)
    kept = {k: v for k, v in json.loads(read_payload(init).get("meta", "{}")).items()
            if k in ("materials", "closures", "omega2_range")} if init else {}
    share = SUBSPACE_SHARE if fit_weights else 0.0
    items = load_items(model, data, ("train",), material=material)
    if not items:
        raise NeurokError(f"{data}: no training sequences (split 'train')")
    val_items = load_items(model, data, ("validation",), limit=4, material=material)
    opt = torch.optim.Adam(parameter_groups(model, params, material), lr=LEARNING_RATE)
    if state:
        try:
            opt.load_state_dict(state["optimizer"])
        except ValueError:     # a run saved before the classical scales were held: a fresh optimiser
            pass
    step, elapsed = (state["step"], state["elapsed"]) if state else (0, 0.0)
    budget = ("steps", steps) if steps is not None else ("seconds", minutes * 60.0)
    bar = None if (quiet or rank) else ProgressBar(budget[1] if budget[0] == "steps" else int(budget[1]),
                                                   f"train ({len(items)} seq)")
    history = []
    rebuilt = (step / budget[1] if budget[0] == "steps" else elapsed / budget[1]) >= share
    t_start = time.perf_counter() - elapsed
    last_save = last_refresh = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - t_start
        fraction = step / budget[1] if budget[0] == "steps" else elapsed / budget[1]
        if fraction >= 1.0 or (cancel is not None and cancel.is_set()):
            break
        picks = rng.choice(len(items), size=min(BATCH, len(items)), replace=False)
        stage = "subspace" if fraction < share else "dynamics"
        if stage == "dynamics" and not rebuilt:     # the subspace is final: rebuild the scenes on it
            for item in items + val_items:
                item.rebuild(model)
            rebuilt = True
        if stage == "subspace":
            loss = torch.stack([projection_loss(model, items[i]) for i in picks]).mean()
        else:
            dyn = (fraction - share) / (1.0 - share)
            frames = ROLLOUT_FRAMES[0] + int(round((ROLLOUT_FRAMES[1] - ROLLOUT_FRAMES[0]) * min(1.0, dyn)))
            if free_run:
                rollouts = (rollout_loss(items[i], free_run, t0=1, noise=0.0) for i in picks)
            else:
                rollouts = (rollout_loss(items[i], frames, rng) for i in picks)
            losses = [loss for loss in rollouts if loss is not None]
            if not losses:
                continue
            loss = torch.stack(losses).mean()
        opt.zero_grad()
        loss.backward()
        average_gradients(model, world)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        if all(torch.isfinite(p.grad).all() for p in params if p.grad is not None):
            opt.step()
        step += 1
        history.append({stage: float(loss.detach()), "step": step, "stage": stage})
        if log:
            log(history[-1])
        if progress:
            progress(min(1.0, fraction))
        if bar:
            bar.update(done=step if budget[0] == "steps" else int(time.perf_counter() - t_start),
                       postfix=f"{stage}={history[-1][stage]:.3g}")
        if time.perf_counter() - last_refresh > REFRESH_DATA_SECONDS:
            try:   # sequences generated since the start join (on the current field)
                items.extend(load_items(model, data, ("train",), skip={i.entry["path"] for i in items}, material=material))
            except NeurokError:   # the data folder is being rewritten: go on with what is loaded
                pass
            last_refresh = time.perf_counter()
            if bar:
                bar.desc = f"train ({len(items)} seq)"
        if rank == 0 and time.perf_counter() - last_save > SAVE_EVERY_SECONDS:
            _save(out, resume, model, opt, step, time.perf_counter() - t_start, items, history, data, kept,
                  material=(material, base_meta) if material else None, closures=closures, free_run=free_run)
            last_save = time.perf_counter()
    if bar:
        bar.close()
    agree = ranks_agree(model, world)
    if rank == 0:
        _save(out, resume, model, opt, step, time.perf_counter() - t_start, items, history, data,
              dict(kept, **({"ranks": world, "ranks_identical": agree} if world > 1 else {})),
              material=(material, base_meta) if material else None, closures=closures, free_run=free_run)
        if val_items and not quiet:
            print(f"validation: {validation_summary(model, val_items)}")
    return model, history


def trainable_parameters(model, fit_weights=False, closures=DEFAULT_CLOSURES) -> list:
    """What training changes: the learned closures named in `closures` -- the density's correction
    ("density"), the damping's beta multiplier per kind of material ("dissipation"), a compressed
    cloth edge's share of the membrane stiffness ("compression") -- and the
    skinning weight field when `fit_weights` (else its learned layer is held at zero: the
    eigenfunctions). The classical
    Lame and bending scales are held at 1 (their learned layer at zero), so stiffness in Pa still
    means Pa after training (issue 24: 30 minutes of training had made every solid 5x softer
    than its slider). The correction enters the loss to first order from its start at zero
    (`strain_energy.StrainEnergy`), so it needs no random start."""
    unknown = set(closures) - set(CLOSURES)
    if unknown:
        raise NeurokError(f"--closures: unknown closure '{sorted(unknown)[0]}' (one of {', '.join(CLOSURES)})")
    scales = model.energy.scales
    held = [scales] if fit_weights else [scales, model.weight_field]
    held += [getattr(model.energy, CLOSURE_MODULES[c]) for c in CLOSURES if c not in closures]
    with torch.no_grad():
        scales[-1].weight.zero_()
        scales[-1].bias.zero_()
        if not fit_weights:
            model.weight_field.net[-1].weight.zero_()
            model.weight_field.net[-1].bias.zero_()
    for module in held:
        for p in module.parameters():
            p.requires_grad_(False)
    return [p for p in model.parameters() if p.requires_grad]


def parameter_groups(model, params, material=None) -> list[dict]:
    """Adam's groups: a learned material's numbers learn at MATERIAL_LEARNING_RATE, the dissipation
    and compression closures' (three numbers of order one each, from few long rollouts: `free_run`) at
    DISSIPATION_LEARNING_RATE, the networks at LEARNING_RATE."""
    if material:
        return [{"params": params, "lr": MATERIAL_LEARNING_RATE}]
    few = {id(p) for m in (model.energy.dissipation, model.energy.compression) for p in m.parameters()}
    groups = [{"params": [p for p in params if id(p) not in few]},
              {"params": [p for p in params if id(p) in few], "lr": DISSIPATION_LEARNING_RATE}]
    return [g for g in groups if g["params"]]


def material_parameters(model, name: str, data, learn=None, base=None) -> torch.nn.Parameter:
    """The one tensor a `--material` run trains: that learned material's numbers (created from
    the data's median material if it is new); every other parameter is held, and so are the
    material's numbers not named in `learn` (their gradient is zeroed, so Adam leaves them)."""
    if name in MATERIAL_PRESETS:
        raise NeurokError(f"'{name}' is a built-in material; give the learned one its own name (e.g. '{name}_mine')")
    if not name.replace("_", "").isalnum():
        raise NeurokError(f"material name '{name}': use letters, digits and underscores only")
    for p in model.parameters():
        p.requires_grad_(False)
    if name not in model.energy.presets:
        model.energy.add_preset(name, resolve_material(base, "--material-base") if base else median_material(data))
    param = model.energy.presets[name]
    param.requires_grad_(True)
    if learn is not None:
        unknown = set(learn) - set(MATERIAL_NUMBERS)
        if unknown:
            raise NeurokError(f"--learn: unknown material number '{sorted(unknown)[0]}' (one of {', '.join(MATERIAL_NUMBERS)})")
        mask = torch.tensor([n in learn for n in MATERIAL_NUMBERS], dtype=DTYPE)
        param.register_hook(lambda g: g * mask)
    return param


def median_material(data) -> Material:
    """The typical material of a data folder's training sequences: the median of each number,
    the kind (and solid law) they share. One clear error if they mix cloth and solids."""
    mats = [read_sequence(e["path"]).material for e in data_index(data) if e.get("split", "train") == "train"]
    if not mats:
        raise NeurokError(f"{data}: no training sequences (split 'train')")
    kinds = {m["kind"] for m in mats}
    if len(kinds) > 1:
        raise NeurokError(f"{data}: the sequences mix cloth and solids; one material is one kind")
    out = {k: float(np.median([m[k] for m in mats])) for k in NUMERIC_MATERIAL_KEYS if all(k in m for m in mats)}
    out["kind"] = mats[0]["kind"]
    if all(m.get("law") == "mooney_rivlin" for m in mats):
        out["law"] = "mooney_rivlin"
    else:
        out.pop("i2_share", None)
    return resolve_material(out)


def material_summary(model, name) -> dict:
    """What a learned material came out as, in words a user reads (multipliers of its base)."""
    p = model.energy.presets[name].detach()
    return {(f"{n.removeprefix('log_')}_x" if n.startswith("log_") else "i2_weight"):
            round(float(torch.exp(v) if n.startswith("log_") else torch.tanh(v)), 4) for n, v in zip(PRESET_PARAMETERS, p)}


def _initial_model(init, resume):
    source = resume if resume.is_file() else init
    if not source:
        return NeurokModel(ModelConfig()), None
    payload = read_payload(source)
    model = model_for_payload(payload)
    load_state(model, payload["state"])
    if source != resume:
        return model, None
    return model, {"optimizer": payload["optimizer"], "step": int(payload["step"]), "elapsed": float(payload["elapsed"])}


def ranks_agree(model, world) -> bool:
    """Whether every process ends with the same weights (gradient averaging keeps them in step)."""
    if world == 1:
        return True
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    torch.distributed.all_gather(gathered, flat)
    return all(torch.equal(gathered[0], g) for g in gathered[1:])


def _save(out, resume, model, opt, step, elapsed, items, history, data, extra_meta=None, material=None,
          closures=DEFAULT_CLOSURES, free_run=None):
    """Write the checkpoint and its resume state. `material`: (name, the initial checkpoint's
    metadata): a material run keeps that record (its data ranges feed the familiarity score) and
    adds what it learned under "materials"."""
    recent = history[-50:]
    record = {"data": str(data) if isinstance(data, (str, Path)) else ", ".join(map(str, data)), "sequences": len(items), "steps": step, "seconds": round(elapsed, 1),
              "final_losses": {k: float(np.mean([h[k] for h in recent if k in h]))
                               for k in ("subspace", "dynamics") if any(k in h for h in recent)}}
    if material:
        name, meta = material[0], dict(material[1])
        meta["materials"] = {**meta.get("materials", {}), name: {**material_summary(model, name), **record}}
        meta["material"] = {"name": name, **material_summary(model, name)}   # the run's own
    else:
        meta = data_statistics(items)
        earlier = dict(extra_meta or {})
        # a kind of material this data lacks keeps the range the initial checkpoint was trained on
        meta.update(earlier, omega2_range={**earlier.get("omega2_range", {}), **meta["omega2_range"]})
        learned = set(closures) | set(meta.get("closures") or ())
        meta.update(record, closures=[c for c in CLOSURES if c in learned], free_run=free_run)
    save_checkpoint(out, model, meta)
    save_checkpoint(resume, model, meta, extra={"optimizer": opt.state_dict(), "step": step, "elapsed": elapsed})


def validation_summary(model, items, frames=24):
    """Mean rel_l2 of runtime rollouts (first `frames` frames) on validation sequences, and
    the same for holding still at frame 0."""
    errs, still, faults = [], [], 0
    with torch.no_grad():
        for item in items:
            setup = copy.copy(item.setup)
            setup.frames = min(frames, item.setup.frames)
            true = np.stack([item.scene.decode_metres(q) for q in item.qs[:setup.frames]])
            try:
                pred = NeurokRun(model, setup).bake()
            except SimulationFault as fault:      # counted, and scored as holding its last good frame
                faults += 1
                good = fault.positions if fault.positions is not None and len(fault.positions) else true[:1]
                pred = np.concatenate([good, np.repeat(good[-1:], setup.frames - len(good), axis=0)])
            diag = item.scene.scale
            errs.append(np.linalg.norm(pred - true, axis=2).mean() / diag)
            still.append(np.linalg.norm(true[0][None] - true, axis=2).mean() / diag)
    return {"rel_l2": round(float(np.mean(errs)), 5), "hold_still": round(float(np.mean(still)), 5), "faults": faults}
