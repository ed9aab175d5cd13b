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
else:  # development checkout: the repo root holds `engine/` next to `neurok_blender/`
    if importlib.util.find_spec("engine") is None:
        sys.path.insert(0, str(_HERE.parent))
    from engine.core import colliders as ecolliders
    from engine.core import fields as efields
    from engine.core import formats, scene
    from engine.core.errors import Cancelled, NeurokError, SimulationFault

ENGINE_PROBLEM: str | None = None
try:
    if VENDORED:
        from .engine import api
    else:
        from engine import api
except ImportError as e:  # torch (or scipy) missing from Blender's Python
    api = None
    missing = getattr(e, "name", None) or str(e)
    ENGINE_PROBLEM = (f"The NeuROK engine cannot run: the Python module '{missing}' is missing from Blender's Python. "
                      "Install the self-contained NeuROK build for your platform.")

ASSETS_DIR = Path(formats.__file__).resolve().parents[2] / "assets"
SAMPLES_DIR = ASSETS_DIR / "samples"

__all__ = ["ASSETS_DIR", "Cancelled", "ENGINE_PROBLEM", "ecolliders", "efields", "NeurokError", "SAMPLES_DIR", "SimulationFault", "api",
           "default_model_path", "formats", "learned_engine_status", "scene"]


def default_model_path() -> Path | None:
    """The bundled checkpoint, or None when this build has none."""
    path = ASSETS_DIR / "neurok_default.ckpt"
    return path if path.is_file() else None


def learned_engine_status(model_path: str = "") -> str | None:
    """None when the learned engine can run; otherwise one sentence saying why not."""
    if ENGINE_PROBLEM:
        return ENGINE_PROBLEM
    if model_path:
        if not Path(model_path).is_file():
            return f"The model file '{model_path}' does not exist."
        return None
    if default_model_path() is None:
        return "The bundled model is missing from this build; pick a model file or switch Engine to Reference."
    return None


