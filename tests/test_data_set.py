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

import numpy as np
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
    seq = read_sequence(tmp_path / "seq_00000.npz")
    assert seq.frames == 4 and seq.positions.dtype == np.float32          # read back as float32 ...
    with np.load(tmp_path / "seq_00000.npz") as stored:                   # ... kept as float16, stamped
        assert stored["positions"].dtype == np.float16
    assert seq.meta["stamp"]["fingerprint"] == index["sequences"][0]["stamp"]
    assert not (tmp_path / "seq_00001.npz").exists()
    assert _generate(tmp_path) == 0                        # the skipped scene is not ground through again
    assert len(made) == 2 and "wrote 0 sequences" in capsys.readouterr().out


def test_a_scene_skipped_under_other_rules_for_giving_up_is_made_again(tmp_path, monkeypatch, capsys):
    """A skip is remembered with the reference's rules for giving up (`budget.GIVING_UP`): when they
    change (the retry's Newton cap was raised from 20 to 100), the skipped scene is tried again and
    the sequences already made are kept."""
    real = gen.ReferenceSimulator
    made = []
    monkeypatch.setattr(gen, "ReferenceSimulator", lambda setup, **settings: (made.append(setup), real(
        setup, budget=Work(newton_iterations=0), **settings) if len(made) == 2 else real(setup, **settings))[1])
    assert _generate(tmp_path) == 0
    index = _index(tmp_path)
    assert list(index["skipped"]) == ["seq_00001.npz"]
    index["skipped"]["seq_00001.npz"]["gave_up_under"] = {"retry_factor": 4, "retry_newton_iterations": 20}
    (tmp_path / "index.json").write_text(json.dumps(index))
    monkeypatch.setattr(gen, "ReferenceSimulator", real)
    capsys.readouterr()
    assert _generate(tmp_path) == 0
    assert "wrote 1 sequence" in capsys.readouterr().out
    index = _index(tmp_path)
    assert [e["file"] for e in index["sequences"]] == ["seq_00000.npz", "seq_00001.npz"] and not index["skipped"]


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


def test_the_kept_ground_truth_agrees_with_a_rebuilt_one_to_float16_rounding(tmp_path):
    """eval-small's jelly poke: the reference rollout kept in data/physics (or, on a machine without
    it, one kept here first) read back against the same run made now. Also the guard of
    `reference.stamp.PHYSICS_VERSION`: a change to the reference that moves these frames fails here
    until the version is bumped (which marks every kept file stale)."""
    from engine.evaluation.physics_cache import KEPT, PhysicsCache, compute_now
    from engine.evaluation.scene_eval import scenes_physics
    from engine.evaluation.suite import PRESETS
    cfg = dict(PRESETS["small"], scenes=("jelly_poke",))
    [(case, jobs)] = scenes_physics(cfg, tmp_path / "meshes")[0]
    job = jobs["reference"]
    cache = PhysicsCache(tmp_path / "models", kept=KEPT)
    if not cache.has(job):
        cache = PhysicsCache(tmp_path / "models", kept=tmp_path / "kept")
        cache.prefetch([job], workers=1, quiet=True)
    kept, fresh = cache.get(job), compute_now(job)
    assert kept.shape == fresh.shape == (cfg["scene_frames"], len(case[2].vertices), 3)
    moves = np.abs(fresh - fresh[:1])
    np.testing.assert_array_less(np.abs(kept - fresh), moves * 2.0 ** -11 + 1e-6)


def test_only_the_stale_sequences_are_made_again(tmp_path, capsys):
    """A sequence made by other physics or settings (its stamp differs from what this run would
    make) is made again; the others are kept as they are."""
    from engine.core.formats import write_sequence
    gen.generate(tmp_path, 2, seed=5, frames=4, kind="cloth", quiet=True)
    old = tmp_path / "seq_00001.npz"
    seq = read_sequence(old)
    seq.meta["stamp"] = dict(seq.meta["stamp"], physics_version=0, fingerprint="made-by-older-code")
    write_sequence(old, seq, compact=True)
    (tmp_path / "index.json").unlink()                 # judged by the files' own stamps
    kept = (tmp_path / "seq_00000.npz").stat().st_mtime_ns
    result = gen.generate(tmp_path, 2, seed=5, frames=4, kind="cloth", quiet=True)
    assert result["written"] == 1 and result["stale"] == 1 and "1 sequence(s)" in capsys.readouterr().err
    assert (tmp_path / "seq_00000.npz").stat().st_mtime_ns == kept
    assert read_sequence(old).meta["stamp"]["physics_version"] == gen.draw_sequence(5, 1, 4, kind="cloth").stamp["physics_version"]


def test_a_sequence_made_where_the_shapes_rounded_otherwise_is_kept(tmp_path):
    """Another CPU draws the same shape to the last float64 bits otherwise, so its mesh and scene
    digests differ: a kept sequence whose mesh and setup agree with this machine's draw to the
    float32 the file holds is kept (3 of the 6 of data/eval/small went stale on a fresh machine);
    one whose rest shape is 0.1 mm off is made again."""
    from engine.core.formats import write_sequence
    gen.generate(tmp_path, 1, seed=5, frames=4, kind="cloth", quiet=True)
    path = tmp_path / "seq_00000.npz"
    seq = read_sequence(path)
    seq.meta["stamp"] = dict(seq.meta["stamp"], mesh="another-cpus-bits", scene="another-cpus-bits",
                             fingerprint="another-cpus-bits")
    seq.rest = np.nextafter(seq.rest, np.float32(np.inf))           # one float32 step apart
    write_sequence(path, seq, compact=True)
    (tmp_path / "index.json").unlink()
    result = gen.generate(tmp_path, 1, seed=5, frames=4, kind="cloth", quiet=True)
    assert result["written"] == 0 and result["stale"] == 0
    # listed in the index of the machine that made it, it keeps its entry: a kept data set's index
    # is not rewritten by a run on another machine (git saw data/eval/small/index.json change)
    index = json.loads((tmp_path / "index.json").read_text())
    index["sequences"][0]["seconds"] = 12.5
    (tmp_path / "index.json").write_text(json.dumps(index, indent=1))
    before = (tmp_path / "index.json").read_text()
    assert gen.generate(tmp_path, 1, seed=5, frames=4, kind="cloth", quiet=True)["written"] == 0
    assert (tmp_path / "index.json").read_text() == before
    seq.rest = seq.rest + np.float32(1e-4)
    write_sequence(path, seq, compact=True)
    (tmp_path / "index.json").unlink()
    result = gen.generate(tmp_path, 1, seed=5, frames=4, kind="cloth", quiet=True)
    assert result["written"] == 1 and result["stale"] == 1


def test_the_evaluation_reads_the_blender_primitives_its_kept_physics_was_made_from(tmp_path):
    """bpy triangulates the UV sphere's quads differently from build to build, so the evaluation
    reads the primitives kept in data/eval (nothing is built), and the kept reference answer of a
    scene on one of them is found under that mesh."""
    from engine.evaluation.heldout import blender_primitives
    from engine.evaluation.physics_cache import KEPT, PhysicsCache
    from engine.evaluation.scene_eval import scenes_physics
    from engine.evaluation.suite import PRESETS
    meshes, note = blender_primitives(tmp_path / "built")
    assert note is None and "uv_sphere" in meshes and not (tmp_path / "built").exists()
    cfg = dict(PRESETS["full"], scenes=("uv_sphere",))
    [(case, jobs)] = scenes_physics(cfg, tmp_path / "meshes")[0]
    assert PhysicsCache(tmp_path / "models", kept=KEPT).has(jobs["reference"])


def test_data_holds_every_evaluation_scenes_reference(tmp_path):
    """Both presets' scenes have their ground truth kept in data/physics, current and finished (a
    scene whose reference gave up would be evaluated on nothing): the jelly Suzanne and ico sphere
    on the 8- and 6-cell lattices where their reference finishes (`scene_eval.FINISHED_COARSER`)."""
    from engine.evaluation.physics_cache import KEPT, PhysicsCache, read_kept_head
    from engine.evaluation.scene_eval import scenes_physics
    from engine.evaluation.suite import PRESETS
    cache = PhysicsCache(tmp_path / "models", kept=KEPT)
    for preset in ("small", "full"):
        for case, jobs in scenes_physics(PRESETS[preset], tmp_path / "meshes")[0]:
            job = jobs["reference"]
            assert cache.has(job), f"{preset} {case[0]}: no current reference kept in data/physics"
            assert not read_kept_head(cache.path(job))[1], f"{preset} {case[0]}: the kept reference is a failure"
    full = scenes_physics(dict(PRESETS["full"], scenes=("monkey", "ico_sphere")), tmp_path / "meshes")[0]
    assert {c[0]: j["reference"].options["lattice_cells"] for c, j in full} == {"monkey": 8, "ico_sphere": 6}


def test_the_evaluation_sets_in_data_are_current_and_on_their_presets_lattice():
    """Each preset's evaluation set kept in data/eval is made on its preset's lattice, none of it stale,
    and the oracle runs on the lattice its sequences were made on. The small set is on the converged
    8 cells: on the generator's 4 a body stood on its lattice's flat sole before solid physics 4, and the
    squeezed union that tips over and rolls on 8 and 12 cells (as the model's does) stayed upright."""
    from engine.evaluation.metrics import eval_jobs
    from engine.evaluation.physics_cache import DATA
    from engine.evaluation.suite import PRESETS, eval_set_plan
    assert PRESETS["small"]["set_lattice"] == gen.CONVERGED_LATTICE
    for preset, cfg in PRESETS.items():
        folder = DATA / "eval" / preset
        plan = eval_set_plan(folder, cfg["seed"], cfg["sequences"], cfg["heldout"], cfg["frames"], cfg["set_lattice"])
        assert plan.todo == [], f"{preset}: sequences {plan.todo} of the evaluation set are missing or stale"
        oracle_lattices = {job.options["lattice_cells"] for job in eval_jobs(gen.load_index(folder), noise_sequences=0).values()}
        assert oracle_lattices == {cfg["set_lattice"]}
