"""Every command line the README shows works as documented: exit status 0 and no traceback.

The commands are read from README.md, so a new one fails `test_every_readme_command_has_a_check`
until it has a row in CHECKS. Each row says how the command is checked cheaply:

* run    the same command on tiny inputs (its own size options cut down, placeholders filled);
* parse  argument level only, for the long jobs (train for 25 minutes, 40 sequences, ...): the
         documented arguments parse (`neurok`), or the tool answers --help;
* wire   `neurok` in-process with the command's backend replaced by a recorder, for a command that takes
         minutes whatever its input (`eval` trains a latent-MLP baseline for 3 minutes and steps 1,000
         energy-drift steps): exit status 0 and every value on the command line reaches the backend;
* make   `make -n TARGET`: the target exists and its recipe expands.

The whole file runs in well under a minute: one tiny data set (a module fixture), one Blender demo.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

# README command -> (kind, what to run; {tmp} is a scratch folder, {data} the tiny data set)
MAKE_TARGETS = ("demo", "test", "build", "check-bundle", "build-dev", "data", "train", "train-cloth", "presets",
                "eval", "eval-small", "bench", "clean")
CHECKS = {
    **{f"make {target}": ("make", target) for target in MAKE_TARGETS},
    "python -m engine": ("run", "-m engine --help"),
    "python build.py --bundle-torch PLATFORM": ("run", "build.py --help"),
    # the demo itself runs once, below, through `neurok demo`
    "python -m neurok_blender.demo --out demo_ref --engine reference --frames 48":
        ("run", "-m neurok_blender.demo --help"),
    "neurok demo --out demo_out": ("run", "-m engine demo --out {tmp}/demo_out --frames 2"),
    "neurok simulate --mesh assets/samples/jelly.obj --scene assets/scenes/jelly_poke.json --engine neurok --out jelly.pc2":
        ("run", "-m engine simulate --mesh assets/samples/jelly.obj --scene {scene} --engine neurok --out {tmp}/jelly.pc2"),
    "neurok simulate --replay SEQ.npz --engine reference --lattice-cells 12 --out converged.npz":
        ("run", "-m engine simulate --replay {seq} --engine reference --lattice-cells 3 --out {tmp}/converged.npz"),
    "neurok generate --out data/train_cloth --sequences 80 --seed 2 --frames 32 --kind cloth":
        ("parse", "generate --out data/train_cloth --sequences 80 --seed 2 --frames 32 --kind cloth"),
    "neurok train --init assets/neurok_default.ckpt --data data/train_l8 data/train_cloth --closures dissipation --free-run 30 --out my.ckpt --minutes 20":
        ("run", "-m engine train --init assets/neurok_default.ckpt --data {data} {data} --closures dissipation --free-run 3 "
                "--out {tmp}/my.ckpt --steps 1"),
    "neurok train --data data/blender_cloth --init assets/neurok_default.ckpt --out my.ckpt --material blender_cloth --minutes 10":
        ("parse", "train --data data/blender_cloth --init assets/neurok_default.ckpt --out my.ckpt --material blender_cloth --minutes 10"),
    "neurok specialize --mesh my_mesh.obj --minutes 5 --out my_mesh.ckpt":
        ("parse", "specialize --mesh my_mesh.obj --minutes 5 --out my_mesh.ckpt"),
    "neurok eval --model assets/neurok_default.ckpt --data DIR --json eval.json":
        ("wire", "eval --model assets/neurok_default.ckpt --data {data} --json {tmp}/eval.json"),
    "neurok bench --json bench.json": ("run", "-m engine bench --json {tmp}/bench.json --sizes 200 --frames 2"),
    "neurok bench --json eval_out/bench.json": ("parse", "bench --json eval_out/bench.json"),
    # minutes: the converged ground truth of five scenes (kept in eval_out/small/physics by make eval-small)
    "neurok prior-vs-trained": ("parse", "prior-vs-trained"),
    "neurok prior-vs-trained --require-closer": ("parse", "prior-vs-trained --require-closer"),
    "neurok prior-vs-trained --sheet-layer auto": ("parse", "prior-vs-trained --sheet-layer auto"),
    "neurok calibration-bar": ("run", "-m engine calibration-bar"),
    "neurok evalsuite --preset full --physics-only": ("parse", "evalsuite --preset full --physics-only"),
    # writing the tables is checked without writing: the README and model card already agree with the file
    "neurok figures": ("run", "-m engine figures --check"),
    "neurok figures --check": ("run", "-m engine figures --check"),
}

# wire: the function each command hands its arguments to
BACKENDS = {"eval": "engine.evaluation.metrics.evaluate_command"}

_PREFIX = r"(?:neurok|make|python -m|python build\.py)(?: [^`#\n]*)?"


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.findall(rf"`({_PREFIX})`", text)
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        found += [m.strip() for m in re.findall(rf"^({_PREFIX})", block, re.M)]
    return sorted({" ".join(c.split()) for c in found if c.strip() != "neurok"})


def test_every_readme_command_has_a_check():
    missing = [c for c in readme_commands() if c not in CHECKS]
    assert not missing, f"README commands without a row in CHECKS: {missing}"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A scratch folder with a one-sequence, five-frame data set from the reference simulator, and the
    README's jelly_poke scene cut to two frames."""
    tmp = tmp_path_factory.mktemp("readme")
    # seed 2: its one sequence falls in the training split (seed 1 makes a held-out torus)
    _run([PY, "-m", "engine", "generate", "--out", str(tmp / "data"), "--sequences", "1", "--seed", "2",
          "--frames", "5", "--workers", "1"])  # train needs 5 frames (its shortest rollout + 2)
    seq = sorted((tmp / "data").rglob("*.npz"))
    assert seq, list((tmp / "data").iterdir())
    scene = json.loads((ROOT / "assets" / "scenes" / "jelly_poke.json").read_text(encoding="utf-8"))
    (tmp / "jelly_poke.json").write_text(json.dumps({**scene, "frames": 2}), encoding="utf-8")
    return {"tmp": str(tmp), "data": str(tmp / "data"), "seq": str(seq[0]), "scene": str(tmp / "jelly_poke.json")}


def _run(argv, timeout=600):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{' '.join(argv)} -> exit status {p.returncode}\n{out[-3000:]}"
    assert "Traceback" not in out, f"{' '.join(argv)} printed a traceback\n{out[-3000:]}"
    return out


def _run_wired(argv, monkeypatch):
    from engine import cli
    module, _, name = BACKENDS[argv[0]].rpartition(".")
    calls = []
    monkeypatch.setattr(importlib.import_module(module), name, lambda *a, **k: calls.append([*a, *k.values()]))
    assert cli.main(argv) == 0
    assert len(calls) == 1, calls
    values = [a for a in argv[1:] if not a.startswith("--")]
    assert set(values) <= {str(a) for a in calls[0]}, (values, calls[0])


@pytest.mark.parametrize("command", sorted(CHECKS))
def test_readme_command(command, scratch, monkeypatch):
    kind, what = CHECKS[command]
    if kind == "make":
        _run(["make", "-n", what])
    elif kind == "parse":
        from engine.cli import build_parser
        build_parser().parse_args(what.split())
    elif kind == "wire":
        _run_wired(what.format(**scratch).split(), monkeypatch)
    else:
        _run([PY] + what.format(**scratch).split())
