"""The one place the add-on reaches the engine.

Installed from the extension zip, the engine is vendored next to this file (`<addon>/engine/`) and
imported relatively; in a development checkout (`python -m neurok_blender.demo`, or the repo's
folder linked into Blender) it is the repository's top-level `engine` package.
Nothing else in the add-on imports `engine` directly.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent

if (_HERE / "engine" / "__init__.py").is_file():
    from . import engine  # noqa: F401  (vendored copy inside the extension)
    VENDORED = True
else:  # development checkout: the repo root holds `engine/` next to `neurok_blender/`
    if importlib.util.find_spec("engine") is None:
        sys.path.insert(0, str(_HERE.parent))
    import engine  # noqa: F401
    VENDORED = False

formats = importlib.import_module(engine.__name__ + ".formats")
scene = importlib.import_module(engine.__name__ + ".scene")
api = importlib.import_module(engine.__name__ + ".api")

NeurokError = formats.NeurokError
Cancelled = api.Cancelled
SimulationFault = api.SimulationFault

ENGINE_DIR = Path(engine.__file__).resolve().parent
ASSETS_DIR = ENGINE_DIR.parent / "assets"
SAMPLES_DIR = ASSETS_DIR / "samples"

_SPEC_CACHE: dict[str, bool] = {}


def has_module(name: str) -> bool:
    """Whether the engine ships the submodule `name` (checked without importing it)."""
    if name not in _SPEC_CACHE:
        try:
            _SPEC_CACHE[name] = importlib.util.find_spec(f"{engine.__name__}.{name}") is not None
        except (ImportError, ValueError):
            _SPEC_CACHE[name] = False
    return _SPEC_CACHE[name]


def module(name: str):
    """Import an engine submodule (e.g. 'runtime', 'specialize') by name."""
    return importlib.import_module(f"{engine.__name__}.{name}")


def default_model_path() -> Path | None:
    """The bundled checkpoint, or None when this build has none."""
    try:
        return Path(api.default_model_path())
    except NeurokError:
        return None


def learned_engine_status(model_path: str = "") -> str | None:
    """None when the learned engine can run; otherwise one sentence saying why not."""
    if not has_module("runtime"):
        return "The learned engine is not part of this build yet; switch Engine to Reference."
    if model_path:
        if not Path(model_path).is_file():
            return f"The model file '{model_path}' does not exist."
        return None
    if default_model_path() is None:
        return "The bundled model is missing from this build; pick a model file or switch Engine to Reference."
    return None


def forget_cache() -> None:
    _SPEC_CACHE.clear()
