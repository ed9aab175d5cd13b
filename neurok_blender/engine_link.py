"""The one place the add-on reaches the engine.

Installed from the extension zip, the engine is vendored next to this file (`<addon>/engine/`);
in a development checkout (`python -m neurok_blender.demo`, or the repo's folder linked into
Blender) it is the repository's top-level `engine` package. The add-on uses `engine.api` and the
core formats/scene types (and the pure-numpy core helpers for colliders and force fields), nothing
else.

`api` needs torch; when Blender's Python cannot import it, `api` is None and `ENGINE_PROBLEM`
says why in one sentence, so the panel can tell the user before any click.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
VENDORED = (_HERE / "engine" / "__init__.py").is_file()

if VENDORED:
    from .engine.core import colliders as ecolliders
    from .engine.core import fields as efields
    from .engine.core import formats, scene
    from .engine.core.errors import Cancelled, NeurokError, SimulationFault
    from .engine.core.setup import SHEET_LAYER_MS_PER_1000_VERTICES, SHEET_PROXY_VERTICES, cloth_detail_note, profile_value
else:  # development checkout: the repo root holds `engine/` next to `neurok_blender/`
    if importlib.util.find_spec("engine") is None:
        sys.path.insert(0, str(_HERE.parent))
    from engine.core import colliders as ecolliders
    from engine.core import fields as efields
    from engine.core import formats, scene
    from engine.core.errors import Cancelled, NeurokError, SimulationFault
    from engine.core.setup import SHEET_LAYER_MS_PER_1000_VERTICES, SHEET_PROXY_VERTICES, cloth_detail_note, profile_value


def missing_module_sentence(error: ImportError, what: str = "The NeuROK engine cannot run") -> str:
    """One sentence for a module Blender's Python lacks (torch, scipy), and what to install instead."""
    missing = getattr(error, "name", None) or str(error)
    return (f"{what}: the Python module '{missing}' is missing from Blender's Python; "
            "install the self-contained NeuROK build for your platform.")


ENGINE_PROBLEM: str | None = None
try:
    if VENDORED:
        from .engine import api
    else:
        from engine import api
except ImportError as e:  # torch (or scipy) missing from Blender's Python
    api = None
    ENGINE_PROBLEM = missing_module_sentence(e)

ASSETS_DIR = Path(formats.__file__).resolve().parents[2] / "assets"
SAMPLES_DIR = ASSETS_DIR / "samples"

__all__ = ["ASSETS_DIR", "Cancelled", "ENGINE_PROBLEM", "ecolliders", "efields", "NeurokError", "SAMPLES_DIR",
           "SimulationFault", "api", "bundled_model", "formats", "learned_engine_status", "missing_module_sentence",
           "profile_value", "scene"]


def bundled_model() -> Path | None:
    """The engine's default model (`api.default_model_path`), or None when this build has none or the engine
    cannot load."""
    if api is None:
        return None
    try:
        return api.default_model_path()
    except NeurokError:
        return None


def learned_engine_status(model_path: str = "") -> str | None:
    """None when the learned engine can run; otherwise one sentence saying why not."""
    if ENGINE_PROBLEM:
        return ENGINE_PROBLEM
    if model_path:
        if not Path(model_path).is_file():
            return f"The model file '{model_path}' does not exist."
        return None
    if bundled_model() is None:
        return "The bundled model is missing from this build; pick a model file or switch Engine to Reference."
    return None


