"""The evaluation's physics runs (reference, oracle, noise floor) computed ahead on worker
processes and kept on disk: the same answers as computed in place, never computed twice, and
recomputed when anything that decides them changes."""
import numpy as np
import pytest

from engine.evaluation.physics_cache import PhysicsCache, compute, job_key, scene_job
from engine.training.shapes import make_shape

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _scene(frames=5, gravity=-9.81):
    return {"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, gravity],
            "material": {"preset": "rubber"}, "forces": [],
            "pins": [{"select": {"box": {"min": [0, 0, 0], "max": [0.2, 1, 1]}}, "strength": 1.0}]}


@pytest.fixture(scope="module")
def blob():
    return make_shape("blob", np.random.default_rng(3), 250)


def test_prefetched_runs_match_runs_in_place_and_are_kept(blob, tmp_path):
    jobs = [scene_job("reference", blob, _scene(), lattice_cells=3),
            scene_job("oracle", blob, _scene(), handles=2, lattice_cells=3)]
    cache = PhysicsCache(tmp_path / "physics")
    first = cache.prefetch(jobs + jobs[:1], workers=2, quiet=True)       # a job listed twice runs once
    assert first["jobs"] == 2 and first["computed"] == 2
    truth = cache.get(jobs[0])
    assert truth.shape == (5, len(blob.vertices), 3)
    assert truth[-1, :, 2].mean() < truth[0, :, 2].mean() - 1e-4          # it sags under gravity
    np.testing.assert_allclose(truth, compute(jobs[0]), atol=1e-6)
    frames, fault, error, ms, handles = cache.get(jobs[1])
    assert frames.shape == truth.shape and fault is None and error is None and handles == 2
    assert cache.prefetch(jobs, workers=2, quiet=True)["computed"] == 0   # kept on disk


def test_the_key_follows_what_decides_the_run(blob):
    base = job_key(scene_job("reference", blob, _scene(), lattice_cells=3))
    assert base == job_key(scene_job("reference", blob, _scene(), lattice_cells=3))
    assert base != job_key(scene_job("reference", blob, _scene(gravity=-5.0), lattice_cells=3))
    assert base != job_key(scene_job("reference", blob, _scene(), lattice_cells=4))
    moved = type(blob)(blob.vertices + [0.0, 0.0, 1e-3], blob.faces, name=blob.name)
    assert base != job_key(scene_job("reference", moved, _scene(), lattice_cells=3))
    assert base != job_key(scene_job("oracle", blob, _scene(), lattice_cells=3))


def _moves_agree(kept, fresh):
    """Equal to float16 rounding of each frame's move from frame 0 (what a kept file stores)."""
    moves = np.abs(fresh - fresh[:1])
    np.testing.assert_array_less(np.abs(kept - fresh), moves * 2.0 ** -11 + 1e-6)


def test_kept_answers_are_compact_stamped_and_agree_to_float16_rounding(blob, tmp_path):
    """The model-free answers a suite keeps in data/physics (issue 44): float16 moves in a
    compressed npz with the stamp of what made them, read back within float16 rounding."""
    import json
    from engine.evaluation.physics_cache import kept_stamp, read_kept_stamp
    from engine.reference.stamp import physics_version
    job = scene_job("reference", blob, _scene(frames=8), lattice_cells=3)
    oracle = scene_job("oracle", blob, _scene(frames=8), handles=2, lattice_cells=3)
    cache = PhysicsCache(tmp_path / "models", kept=tmp_path / "kept")
    assert cache.prefetch([job, oracle], workers=1, quiet=True)["computed"] == 2
    path = cache.path(job)
    assert path.parent == tmp_path / "kept" / "reference" and path.name.startswith(blob.name)
    stamp = read_kept_stamp(path)
    assert stamp["fingerprint"] == kept_stamp(job)["fingerprint"] and stamp["physics_version"] == physics_version("solid")
    assert stamp["settings"]["lattice_cells"] == 3 and stamp["settings"]["budget"]["line_search_halvings"] > 0
    fresh = compute(job)
    _moves_agree(cache.get(job), fresh)
    assert path.stat().st_size < 0.6 * fresh.nbytes
    frames, fault, error, ms, handles = cache.get(oracle)
    _moves_agree(frames, compute(oracle)[0])
    assert fault is None and handles == 2 and not list((tmp_path / "models").iterdir())   # nothing model-free there
    assert json.loads(json.dumps(stamp)) == stamp


def test_a_changed_setting_makes_only_its_kept_files_stale(blob, tmp_path, monkeypatch, capsys):
    from engine.reference import stamp
    pinned = scene_job("reference", blob, _scene(), lattice_cells=3)
    other = scene_job("reference", blob, _scene(gravity=-5.0), lattice_cells=3)
    sheet = scene_job("reference", make_shape("sheet", np.random.default_rng(1), 100),
                      dict(_scene(frames=3), material={"preset": "cloth"}))
    cache = PhysicsCache(tmp_path / "models", kept=tmp_path / "kept")
    assert cache.prefetch([pinned, other, sheet], workers=1, quiet=True)["computed"] == 3
    untouched = cache.path(other).stat().st_mtime_ns
    finer = scene_job("reference", blob, _scene(), lattice_cells=3, substep=1.0 / 192.0)
    assert cache.path(finer) == cache.path(pinned) and cache.is_stale(finer)     # found, and stale
    again = cache.prefetch([finer, other], workers=1)
    assert again["computed"] == 1 and again["stale"] == 1 and "1 kept answer(s)" in capsys.readouterr().out
    assert cache.path(other).stat().st_mtime_ns == untouched and cache.has(finer) and not cache.has(pinned)
    # the reference's solids changed (say, their lattice): the solids' answers are made again, the sheet's kept
    monkeypatch.setitem(stamp.PHYSICS_VERSIONS, "solid", stamp.PHYSICS_VERSIONS["solid"] + 1)
    assert cache.has(sheet)
    assert cache.prefetch([finer, other, sheet], workers=1, quiet=True) | {"seconds": 0} == {
        "jobs": 3, "computed": 2, "stale": 2, "seconds": 0}


def _edited_copy(tmp_path, rel, old, new):
    import shutil
    from engine.evaluation.code_stamp import ENGINE
    root = tmp_path / "engine"
    if not root.exists():
        shutil.copytree(ENGINE, root, ignore=shutil.ignore_patterns("__pycache__"))
    path = root / rel
    text = path.read_text()
    assert old in text, f"{old!r} not in {rel}"
    path.write_text(text.replace(old, new, 1))
    return root


def test_the_oracle_stamp_follows_the_code_it_runs_not_the_files_it_shares(tmp_path):
    """A kept oracle answer (minutes to remake) stays current when a comment or a definition the
    oracle never reaches changes in a file it shares, and goes stale when code it runs changes."""
    from engine.evaluation.code_stamp import code_fingerprint
    from engine.evaluation.physics_cache import KEPT_CODE, KEPT_CODE_SKIP, kept_code_version
    entries = KEPT_CODE["oracle"]
    assert code_fingerprint(entries, KEPT_CODE_SKIP) == kept_code_version("oracle")
    # the learned engine's integration cells: in learned/subspace.py, not used by the oracle
    root = _edited_copy(tmp_path / "a", "learned/subspace.py", "FULL_INTEGRATION_CELLS = ", "FULL_INTEGRATION_CELLS = 1 + ")
    root = _edited_copy(tmp_path / "a", "learned/subspace.py", '"""', '"""A new first line.\n')
    assert code_fingerprint(entries, KEPT_CODE_SKIP, root) == kept_code_version("oracle")
    # the weights' smoothing, which the oracle's basis is made of (reached through an import)
    root = _edited_copy(tmp_path / "b", "learned/subspace.py", "def smooth_functions(L, mass, count: int, held=None, points=None)",
                         "def smooth_functions(L, mass, count: int, held=None, points=None, unused=None)")
    assert code_fingerprint(entries, KEPT_CODE_SKIP, root) != kept_code_version("oracle")
    # a constant of the oracle's own module
    root = _edited_copy(tmp_path / "c", "evaluation/oracle.py", "DEFAULT_HANDLES = 6", "DEFAULT_HANDLES = 7")
    assert code_fingerprint(entries, KEPT_CODE_SKIP, root) != kept_code_version("oracle")


def test_kept_frames_are_packed_without_losing_a_bit_and_smaller_than_deflate():
    """data/physics keeps its frames as float16 packed (time differences of the bit patterns,
    byte planes, lzma): read back they are the very float16 numbers, inf and nan included, in less
    room than the compressed npz's deflate gives (the cap on data/ is 60 MB)."""
    import zlib
    from engine.evaluation.physics_cache import pack_float16, unpack_float16
    rng = np.random.default_rng(0)
    t = np.linspace(0, 2, 60)[:, None, None]
    rest = rng.normal(size=(1, 500, 3))
    moves = (0.1 * np.sin(3 * t + rest) * rest + 1e-4 * rng.normal(size=(60, 500, 3))).astype(np.float16)
    moves[7, 3, 1], moves[9, 4, 2] = np.inf, np.nan
    packed = pack_float16(moves)
    back = unpack_float16(packed, moves.shape)
    assert back.dtype == np.float16 and np.array_equal(back.view(np.int16), moves.view(np.int16))
    assert packed.nbytes < 0.9 * len(zlib.compress(moves.tobytes(), 6))


def test_pruning_deletes_only_the_kept_answers_no_job_reads(blob, tmp_path):
    """An evaluation sequence made again leaves its old answers behind under another name; pruning
    with the jobs still in use deletes those and keeps the rest (data/ stays under its cap)."""
    used = scene_job("reference", blob, _scene(frames=3), lattice_cells=3)
    dropped = scene_job("reference", blob, _scene(frames=3, gravity=-5.0), lattice_cells=3)
    cache = PhysicsCache(tmp_path / "models", kept=tmp_path / "kept")
    cache.prefetch([used, dropped], workers=1, quiet=True)
    assert cache.prune_kept([used]) == [cache.path(dropped)]
    assert cache.has(used) and not cache.path(dropped).exists()
    assert cache.prune_kept([used]) == []


def test_a_failure_kept_under_other_rules_for_giving_up_is_computed_again(blob, tmp_path):
    """A run the reference gave up on is kept as a failure with the rules it gave up under
    (`budget.GIVING_UP`); under new rules (the retry's Newton cap raised from 20 to 100) it is
    computed again, kept in data/ or not, and a failure under today's rules is not."""
    from engine.evaluation.physics_cache import PhysicsRunFailed
    job = scene_job("reference", blob, _scene(frames=3), lattice_cells=3)
    for cache in (PhysicsCache(tmp_path / "models", kept=tmp_path / "kept"), PhysicsCache(tmp_path / "local")):
        cache._store(job, PhysicsRunFailed("WorkBudgetExceeded: the reference simulator gave up at frame 1"))
        assert cache.has(job)
        with pytest.raises(PhysicsRunFailed):
            cache.get(job)
        old = PhysicsRunFailed("WorkBudgetExceeded: the reference simulator gave up at frame 1")
        old.gave_up_under = {"retry_factor": 4, "retry_newton_iterations": 20}
        cache._store(job, old)
        assert cache.has(job) == (cache.kept is None)        # a local file's answer is read before it is judged
        assert cache.get(job).shape == (3, len(blob.vertices), 3)
        assert cache.has(job) and cache.get(job).shape == (3, len(blob.vertices), 3)
