"""The self-contained extension zip (torch CPU + scipy wheels bundled).

`test_bundle_installs_and_bakes_in_clean_blender_python` runs tools/check_bundle.py: build the zip for
this platform, make a fresh venv with only bpy (no torch, no scipy, as Blender ships), install the zip
into throwaway Blender user folders, bake with the learned engine and the reference simulator. It
downloads wheels through pip (about 240 MB) and takes about two minutes, so it runs only with
NEUROK_CHECK_BUNDLE=1 (`make check-bundle` runs the same script directly).

The other tests check, without network or Blender, that build.py asks pip for the CPU torch build on
Linux and stops before downloading anything that pulls CUDA packages.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_build():
    spec = importlib.util.spec_from_file_location("neurok_build_script", ROOT / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_pip(requires: dict, asked: list):
    """A stand-in for `pip download --no-deps`: writes a tiny wheel whose METADATA lists `requires[name]`."""
    def run(cmd, capture_output=True, text=True):
        spec = cmd[-1]
        name = spec.split("=")[0].split("<")[0].split(">")[0].split("!")[0].split("~")[0]
        asked.append((spec, cmd))
        dest = Path(cmd[cmd.index("--dest") + 1])
        version = spec.split("==")[1] if "==" in spec else "1.0"
        whl = dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            meta = f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires.get(name, []))
            z.writestr(f"{name}-{version}.dist-info/METADATA", meta)
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


def test_linux_bundle_pins_cpu_torch(tmp_path, monkeypatch):
    build = _load_build()
    asked = []
    monkeypatch.setattr(build.subprocess, "run", _fake_pip({"torch": ["filelock", "sympy>=1.13"], "sympy": ["mpmath"],
                                                             "scipy": ["numpy>=1.25"]}, asked))
    wheels = build.download_wheels("linux-x64", tmp_path / "wheels", ["3.11"])
    specs = [s for s, _ in asked]
    assert specs[0] == f"torch=={build.TORCH_VERSION}+cpu", specs
    assert "--extra-index-url" in asked[0][1] and build.TORCH_CPU_INDEX in asked[0][1]
    assert not [s for s in specs if s.startswith("numpy")], specs  # Blender ships numpy
    assert any(Path(w).name.startswith("torch-") and "+cpu" in w for w in wheels), wheels
    assert build.torch_pin("windows-x64") == f"torch=={build.TORCH_VERSION}"
    assert build.torch_pin("macos-arm64") == f"torch=={build.TORCH_VERSION}"


def test_cuda_dependency_stops_the_build(tmp_path, monkeypatch):
    build = _load_build()
    asked = []
    monkeypatch.setattr(build.subprocess, "run", _fake_pip(
        {"torch": ['nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux"', "filelock"]}, asked))
    with pytest.raises(build.BuildError, match="CUDA"):
        build.download_wheels("linux-x64", tmp_path / "wheels", ["3.11"])
    assert not [s for s, _ in asked if s.startswith("nvidia")], asked  # stopped before asking pip for it


@pytest.mark.blender
@pytest.mark.skipif(os.environ.get("NEUROK_CHECK_BUNDLE") != "1",
                    reason="set NEUROK_CHECK_BUNDLE=1 to build the ~240 MB self-contained zip and install it into a "
                           "clean bpy venv (downloads wheels, about 2 minutes; or run `make check-bundle`)")
def test_bundle_installs_and_bakes_in_clean_blender_python():
    if importlib.util.find_spec("bpy") is None:
        pytest.skip("build.py needs bpy (Blender's extension builder) in this Python")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "check_bundle.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and " 0 failed" in out, out[-6000:]
