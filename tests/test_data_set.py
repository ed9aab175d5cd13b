"""Expensive results survive (issue 44): `neurok generate` skips a scene the reference's work
budget stops and goes on; an interrupted run, Ctrl-C or a killed process, keeps every finished
sequence and resumes; every sequence is stamped with what made it and a stale one is made again."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.cli import main
from engine.core.formats import read_sequence
from engine.reference.budget import Work
from engine.training import generate as gen

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--sequences", "2", "--seed", "5", "--frames", "4", "--kind", "cloth", "--workers", "1"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _generate(folder, *extra):
    return main(["generate", "--out", str(folder), *ARGS, *extra])


def _index(folder):
    return json.loads((folder / "index.json").read_text())


def test_generate_skips_a_scene_the_work_budget_stops_and_writes_the_others(tmp_path, monkeypatch, capsys):
    real = gen.ReferenceSimulator
    made = []

    def second_scene_grinds(setup, **settings):
        made.append(setup)
        return real(setup, budget=Work(newton_iterations=0), **settings) if len(made) == 2 else real(setup, **settings)

    monkeypatch.setattr(gen, "ReferenceSimulator", second_scene_grinds)
    assert _generate(tmp_path) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.replace("\r", "\n").splitlines() if line.startswith("generate: skipped")]
    assert len(lines) == 1 and "seq_00001" in lines[0] and "gave up at frame 1" in lines[0]
    assert "skipped 1" in captured.out
    index = _index(tmp_path)
    assert [e["file"] for e in index["sequences"]] == ["seq_00000.npz"] and list(index["skipped"]) == ["seq_00001.npz"]
    assert read_sequence(tmp_path / "seq_00000.npz").frames == 4
    assert not (tmp_path / "seq_00001.npz").exists()
    assert _generate(tmp_path) == 0                        # the skipped scene is not ground through again
    assert len(made) == 2 and "wrote 0 sequences" in capsys.readouterr().out


def test_ctrl_c_keeps_the_finished_sequences_and_the_run_resumes(tmp_path, monkeypatch, capsys):
    real, calls = gen._worker, []

    def interrupted_on_the_second(job):
        calls.append(job)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(job)

    monkeypatch.setattr(gen, "_worker", interrupted_on_the_second)
    assert _generate(tmp_path) == 130
    assert "interrupted" in capsys.readouterr().err
    assert [e["file"] for e in _index(tmp_path)["sequences"]] == ["seq_00000.npz"]
    first = (tmp_path / "seq_00000.npz").stat().st_mtime_ns
    monkeypatch.setattr(gen, "_worker", real)
    result = gen.generate(tmp_path, 2, seed=5, frames=4, kind="cloth", quiet=True)
    assert result["written"] == 1 and (tmp_path / "seq_00000.npz").stat().st_mtime_ns == first
    assert [e["file"] for e in _index(tmp_path)["sequences"]] == ["seq_00000.npz", "seq_00001.npz"]


def test_a_killed_run_resumes_from_its_stamped_files_even_without_its_index(tmp_path):
    """SIGKILL once the first file is on disk; the index is deleted too (a kill between the file
    and its line in the index): the run adopts the stamped file instead of making it again."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    process = subprocess.Popen([sys.executable, "-m", "engine", "generate", "--out", str(tmp_path), *ARGS],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = tmp_path / "seq_00000.npz"
    deadline = time.time() + 240
    while not first.is_file() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert read_sequence(first).frames == 4                # written whole (atomically) or not at all
    (tmp_path / "index.json").unlink(missing_ok=True)
    mtime, had_second = first.stat().st_mtime_ns, (tmp_path / "seq_00001.npz").is_file()
    result = gen.generate(tmp_path, 2, seed=5, frames=4, kind="cloth", quiet=True)
    assert first.stat().st_mtime_ns == mtime
    assert result["written"] == (0 if had_second else 1)
    assert [e["file"] for e in _index(tmp_path)["sequences"]] == ["seq_00000.npz", "seq_00001.npz"]
