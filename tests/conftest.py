"""Fixtures shared by the test modules."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _register_blender_harness():
    """tools/blender_harness.py as the module `blender_harness`, for the Blender tests (their child processes
    run that file, which registers itself the same way)."""
    spec = importlib.util.spec_from_file_location("blender_harness", ROOT / "tools" / "blender_harness.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["blender_harness"] = module
    spec.loader.exec_module(module)


_register_blender_harness()


@pytest.fixture(scope="module")
def addon_zip(tmp_path_factory):
    """The extension zip without wheels (build.py --no-wheels), built once per test module."""
    import blender_harness
    return blender_harness.build_zip(tmp_path_factory.mktemp("dist"), tmp_path_factory.mktemp("stage"))


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module (many small ops: threads only add overhead), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
