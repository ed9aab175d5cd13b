#!/usr/bin/env python3
"""Stage and zip the NeuROK Blender extension.

    python build.py                              # for users: self-contained zip for THIS platform (torch + scipy)
    python build.py --bundle-torch linux-x64     # the same for another platform: dist/neurok-0.1.0-linux_x64.zip
    python build.py --no-wheels                  # small developer/CI zip, dist/neurok-0.1.0.zip: the engine cannot
                                                 # run unless Blender's Python already has torch and scipy
    python build.py --out-dir /tmp/x --stage-dir /tmp/stage

Staging layout (the zip root):
    blender_manifest.toml, __init__.py, ... (neurok_blender/*)
    engine/   the engine package, vendored (imported as `from . import engine`)
    assets/   default checkpoint, model card, sample meshes
    wheels/   only with --bundle-torch

The zip is made by Blender's own builder (`blender_ext.py build`, shipped inside the bpy wheel),
which also validates the manifest. Errors are one line on stderr and a non-zero exit.
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
ADDON_SRC = ROOT / "neurok_blender"
ENGINE_SRC = ROOT / "engine"
ASSETS_SRC = ROOT / "assets"
MANIFEST = ROOT / "blender_manifest.toml"

TORCH_VERSION = "2.13.0"
# PyPI's Linux torch wheels are CUDA builds that pull multi-GB nvidia-* (and triton) wheels. Linux bundles
# take the CPU build (`+cpu`), which pip finds in PyTorch's CPU index or in a local find-links folder; Windows and
# macOS wheels on PyPI are CPU builds already. A CUDA dependency anywhere stops the build before it is downloaded.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CUDA_PREFIXES = ("nvidia-", "triton", "cuda-")
# The reference simulator needs scipy; Blender already ships numpy, so numpy is not bundled.
EXTRA_PACKAGES = ["scipy"]
SKIP_PACKAGES = {"numpy"}

# Blender platform name -> pip platform tags (first is preferred) and whether torch exists there.
PLATFORMS = {
    "linux-x64": ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"],
    "linux-arm64": ["manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"],
    "windows-x64": ["win_amd64"],
    "windows-arm64": ["win_arm64"],
    "macos-arm64": ["macosx_11_0_arm64", "macosx_12_0_arm64", "macosx_13_0_arm64", "macosx_14_0_arm64"],
}

# What Blender needs from the engine: the runtime (core, both engines, the facade) and training,
# because the add-on's Specialize fine-tunes on the user's mesh and Learn Material from Bake
# learns from the user's own simulation (with the importers' Blender-cloth unit conversion).
# Evaluation, benchmarks and the command line stay in the repository.
ENGINE_RUNTIME = ("__init__.py", "api.py", "core", "reference", "learned", "training")
ENGINE_LEFT_OUT = ()

IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".*", "*.egg-info", "tests")


class BuildError(Exception):
    pass


def blender_ext_script() -> Path:
    """Blender's extension builder, shipped inside the bpy wheel (found without importing bpy)."""
    spec = importlib.util.find_spec("bpy")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError("the 'bpy' module is not installed in this Python; run 'make venv' (bpy==5.0.1) first")
    for base in spec.submodule_search_locations:
        for candidate in sorted(Path(base).glob("*/scripts/addons_core/bl_pkg/cli/blender_ext.py")):
            return candidate
    raise BuildError("Blender's blender_ext.py was not found inside the installed bpy package")


def manifest_version() -> str:
    text = MANIFEST.read_text(encoding="utf-8")
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    if not m:
        raise BuildError(f"{MANIFEST}: no version line")
    return m.group(1)


def stage(stage_dir: Path) -> Path:
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    stage_dir.mkdir(parents=True)
    for item in sorted(ADDON_SRC.iterdir()):
        if item.name.startswith(".") or item.name in ("__pycache__",) or item.name.endswith(".egg-info"):
            continue
        if item.is_dir():
            shutil.copytree(item, stage_dir / item.name, ignore=IGNORE)
        else:
            shutil.copy2(item, stage_dir / item.name)
    if (stage_dir / "engine").exists():
        raise BuildError("neurok_blender/ must not contain its own 'engine' folder (it is vendored from the repo)")
    vendor_engine(stage_dir / "engine")
    assets = stage_dir / "assets"
    assets.mkdir()
    if ASSETS_SRC.is_dir():
        for item in sorted(ASSETS_SRC.iterdir()):
            if item.name.startswith("."):
                continue
            if item.is_dir():
                if item.name == "samples":
                    shutil.copytree(item, assets / item.name, ignore=IGNORE)
            elif item.suffix.lower() in (".ckpt", ".pt", ".md", ".json", ".txt", ".obj", ".ply"):
                shutil.copy2(item, assets / item.name)
    shutil.copy2(MANIFEST, stage_dir / "blender_manifest.toml")
    return stage_dir


def vendor_engine(dest: Path) -> None:
    dest.mkdir()
    for name in ENGINE_RUNTIME:
        src = ENGINE_SRC / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=IGNORE)
        else:
            shutil.copy2(src, dest / name)
    for name in ENGINE_LEFT_OUT:
        (dest / name).unlink()


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_env(platform: str, python: str) -> dict:
    system, machine = {"linux-x64": ("Linux", "x86_64"), "linux-arm64": ("Linux", "aarch64"),
                       "windows-x64": ("Windows", "AMD64"), "windows-arm64": ("Windows", "ARM64"),
                       "macos-arm64": ("Darwin", "arm64")}[platform]
    return {"platform_system": system, "platform_machine": machine, "python_version": python,
            "python_full_version": python + ".0", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "os_name": "nt" if system == "Windows" else "posix",
            "sys_platform": {"Linux": "linux", "Windows": "win32", "Darwin": "darwin"}[system], "extra": ""}


def _wheel_requirements(whl: Path) -> list[str]:
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", errors="replace")
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def _find_wheel(wheel_dir: Path, name: str, python: str):
    tag = "cp" + python.replace(".", "")
    found = [w for w in wheel_dir.glob("*.whl") if _canonical(w.name.split("-")[0]) == name]
    exact = [w for w in found if f"-{tag}-" in w.name]
    return (exact or found or [None])[0]


def torch_pin(platform: str) -> str:
    """The torch requirement for one platform: the CPU build on Linux (see TORCH_CPU_INDEX)."""
    return f"torch=={TORCH_VERSION}+cpu" if platform.startswith("linux") else f"torch=={TORCH_VERSION}"


def download_wheels(platform: str, wheel_dir: Path, python_versions: list[str]) -> list[str]:
    """Download torch (and scipy) with their dependencies for `platform`, resolving environment markers for
    that platform (pip itself evaluates markers for the machine it runs on, so dependencies are followed here
    one package at a time with --no-deps)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip vendors it
        from pip._vendor.packaging.requirements import Requirement
    if platform not in PLATFORMS:
        raise BuildError(f"unknown platform '{platform}' (one of {', '.join(PLATFORMS)})")
    wheel_dir.mkdir(parents=True, exist_ok=True)
    for py in python_versions:
        env = _marker_env(platform, py)
        queue, seen = [torch_pin(platform), *EXTRA_PACKAGES], set()
        while queue:
            req = Requirement(queue.pop(0))
            name = _canonical(req.name)
            if name in seen or name in SKIP_PACKAGES or (req.marker is not None and not req.marker.evaluate(env)):
                continue
            if name.startswith(CUDA_PREFIXES):
                raise BuildError(f"the {platform} bundle would pull the CUDA package '{req.name}' (a CUDA torch build?); "
                                 f"the self-contained zip bundles the CPU build {torch_pin(platform)}")
            seen.add(name)
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                   "--only-binary=:all:", "--dest", str(wheel_dir), "--python-version", py,
                   "--implementation", "cp", "--abi", "cp" + py.replace(".", ""), "--abi", "abi3", "--abi", "none"]
            for tag in PLATFORMS[platform] + ["any"]:
                cmd += ["--platform", tag]
            if name == "torch" and platform.startswith("linux"):
                cmd += ["--extra-index-url", TORCH_CPU_INDEX]
            cmd.append(f"{req.name}{req.specifier}")
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
                raise BuildError(f"could not download {req.name}{req.specifier} for {platform} (Python {py}): {last}")
            whl = _find_wheel(wheel_dir, name, py)
            if whl is None:
                raise BuildError(f"pip reported success but no wheel for {req.name} appeared in {wheel_dir}")
            queue.extend(_wheel_requirements(whl))
    wheels = [f"./wheels/{w.name}" for w in sorted(wheel_dir.glob("*.whl"))]
    torch_wheels = [w for w in wheels if Path(w).name.startswith("torch-")]
    if not torch_wheels:
        raise BuildError(f"pip did not produce a torch wheel for {platform}")
    if platform.startswith("linux") and not all("+cpu" in w for w in torch_wheels):
        raise BuildError(f"the {platform} bundle got a torch wheel that is not the CPU build: {torch_wheels}")
    cuda = [w for w in wheels if _canonical(Path(w).name.split("-")[0]).startswith(CUDA_PREFIXES)]
    if cuda:
        raise BuildError(f"the {platform} bundle holds CUDA wheels: {cuda}")
    return wheels


def add_wheels_to_manifest(manifest: Path, platform: str, wheels: list[str]) -> None:
    text = manifest.read_text(encoding="utf-8")
    block = f'platforms = ["{platform}"]\nwheels = [\n' + "".join(f'  "{w}",\n' for w in wheels) + "]\n\n"
    m = re.search(r"^\[", text, re.M)  # top-level keys must come before the first table
    text = text[:m.start()] + block + text[m.start():] if m else text + "\n" + block
    manifest.write_text(text, encoding="utf-8")


def run_blender_ext(args: list[str]) -> str:
    proc = subprocess.run([sys.executable, str(blender_ext_script()), *args], capture_output=True, text=True)
    out = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or "error" in out.lower().split("\n")[-1]:
        raise BuildError("Blender's extension builder failed: " + " | ".join(out.splitlines()[-3:]))
    return out


def build(out_dir: Path, stage_dir: Path, bundle: str | None = None, python_versions=("3.11",), verbose=True) -> Path:
    if not MANIFEST.is_file():
        raise BuildError(f"{MANIFEST} is missing")
    version = manifest_version()
    stage(stage_dir)
    name = f"neurok-{version}.zip"
    if bundle:
        wheels = download_wheels(bundle, stage_dir / "wheels", list(python_versions))
        add_wheels_to_manifest(stage_dir / "blender_manifest.toml", bundle, wheels)
        name = f"neurok-{version}-{bundle.replace('-', '_')}.zip"
    out_dir.mkdir(parents=True, exist_ok=True)
    run_blender_ext(["validate", str(stage_dir)])
    target = out_dir / name
    if target.exists():
        target.unlink()
    run_blender_ext(["build", "--source-dir", str(stage_dir), "--output-filepath", str(target)])
    if not target.is_file():
        raise BuildError(f"the builder did not write {target}")
    if verbose:
        print(f"built {target} ({target.stat().st_size / 1e6:.1f} MB)")
    return target


def host_platform() -> str | None:
    """This machine as a Blender platform name (None when there is no torch wheel for it)."""
    import platform as _p
    machine = _p.machine().lower()
    system = sys.platform
    arm = machine in ("arm64", "aarch64")
    if system.startswith("linux"):
        return "linux-arm64" if arm else "linux-x64"
    if system == "win32":
        return "windows-arm64" if arm else "windows-x64"
    if system == "darwin":
        return "macos-arm64" if arm else None
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Build the NeuROK Blender extension zip.")
    p.add_argument("--out-dir", default=str(ROOT / "dist"), help="where the zip goes (default dist/)")
    p.add_argument("--stage-dir", default=str(ROOT / "build" / "stage"), help="staging folder (default build/stage/)")
    p.add_argument("--bundle-torch", metavar="PLATFORM", choices=sorted(PLATFORMS),
                   help="bundle the torch (and scipy) wheels for one platform: " + ", ".join(PLATFORMS)
                        + " (default: this machine's platform)")
    p.add_argument("--no-wheels", action="store_true",
                   help="small zip without torch/scipy (development and CI; the add-on then says the engine cannot run "
                        "unless Blender's Python already has them)")
    p.add_argument("--python", action="append", dest="pythons", metavar="X.Y",
                   help="Python version(s) of the wheels (default 3.11, Blender 4.2-5.0); repeat for more")
    args = p.parse_args(argv)
    bundle = None
    if not args.no_wheels:
        bundle = args.bundle_torch or host_platform()
        if bundle is None:
            print("build.py: error: no torch wheel exists for this platform; pass --bundle-torch PLATFORM or "
                  "--no-wheels", file=sys.stderr)
            return 1
    try:
        build(Path(args.out_dir), Path(args.stage_dir), bundle, tuple(args.pythons or ["3.11"]))
    except BuildError as e:
        print(f"build.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
