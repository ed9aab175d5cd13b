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
