"""Checkpoints: weights + config + metadata, loaded without running code.

A checkpoint is a `torch.save` of plain tensors, numbers and strings only, read back with
`torch.load(weights_only=True)`, which refuses pickled objects: a crafted file cannot execute
code. The `format` entry is checked before anything else is used.
"""
from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path

import torch

from ..core.errors import FormatError, NeurokError
from ..core.formats import atomic_write_bytes
from ..core.scene import register_learned_presets
from .model import ModelConfig, NeurokModel

CHECKPOINT_FORMAT = "neurok.checkpoint/2"
# assets/ sits next to engine/ both in the repository and inside the built extension
ASSETS = Path(__file__).resolve().parents[2] / "assets"
DEFAULT_MODEL_NAME = "neurok_default.ckpt"


def default_model_path() -> Path:
    """The bundled checkpoint."""
    path = ASSETS / DEFAULT_MODEL_NAME
    if not path.is_file():
        raise NeurokError(f"the bundled model '{DEFAULT_MODEL_NAME}' is missing; pass --model or run 'make train'")
    return path


def save_checkpoint(path, model: NeurokModel, meta: dict | None = None, extra: dict | None = None) -> None:
    payload = {"format": CHECKPOINT_FORMAT, "config": json.dumps(model.cfg.to_dict()),
               "meta": json.dumps(meta or {}), "state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
               "presets": json.dumps(model.energy.preset_materials)}
    if extra:
        payload.update(extra)
    buf = io.BytesIO()
    torch.save(payload, buf)
    atomic_write_bytes(path, buf.getvalue())


def read_payload(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FormatError(f"{path}: no such checkpoint file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError, AttributeError, TypeError,
            OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FormatError(f"{path}: not a loadable NeuROK checkpoint (refused or corrupt: {first[:120]})") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        got = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise FormatError(f"{path}: checkpoint format is {got!r}, expected '{CHECKPOINT_FORMAT}'")
    return payload


def read_presets(payload) -> dict:
    """The learned materials a checkpoint carries: name -> the material (SI numbers) they refine."""
    try:
        table = json.loads(payload.get("presets", "{}"))
    except (TypeError, ValueError):
        raise FormatError("checkpoint: its table of learned materials is not valid JSON") from None
    if not isinstance(table, dict) or not all(isinstance(m, dict) for m in table.values()):
        raise FormatError("checkpoint: its table of learned materials is not a name -> material table")
    return table


def model_for_payload(payload) -> NeurokModel:
    """An untrained model of a checkpoint's shape: its config and its learned materials (at zero),
    ready for `load_state_dict(payload["state"])`."""
    model = NeurokModel(ModelConfig(**json.loads(payload["config"])))
    for name, material in read_presets(payload).items():
        model.energy.add_preset(name, material)
    return model


def load_state(model, state):
    """A checkpoint's weights into `model`. A checkpoint saved before the learned skinning weights
    or the dissipation or compression closures existed leaves them at zero (the eigenfunctions, the classical
    damping), which is what that model ran with; any other mismatch raises."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith(("weight_field.", "energy.dissipation.", "energy.compression.")) for k in missing):
        model.load_state_dict(state)   # raises with the mismatch


def load_checkpoint(path, device="cpu") -> tuple[NeurokModel, dict]:
    payload = read_payload(path)
    try:
        meta = json.loads(payload.get("meta", "{}"))
        model = model_for_payload(payload)
        load_state(model, payload["state"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise FormatError(f"{path}: checkpoint does not match the model ({type(e).__name__}: {' '.join(str(e).split())[:120]})") from None
    model.to(device).eval()
    register_learned_presets(model.energy.preset_materials)
    return model, meta
