"""Issue 11's evaluation pieces on inputs with known answers: plausibility measures, horizons,
the beam's frequency and damping estimators, the noise-floor reader, the reduced oracle against
the reference simulator, the renderer and the Blender-primitive meshes."""
from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch
from PIL import Image

from engine.core.scene import setup_from_scene
from engine.evaluation.distances import amplitude_ratio, centroid_path_error, end_turn_degrees, horizon_means
from engine.evaluation.noise import noise_floor_for, read_noise_floor
from engine.evaluation.physical import beam_quantities, damped_fit, fft_frequency
from engine.evaluation.plausibility import aggregate_plausibility, plausibility_series, plausibility_summary
from engine.evaluation.targets import TARGETS
from engine.training.shapes import make_shape

STEPS = 1000         # energy drift: undamped latent steps (DESIGN.md section 5)


@pytest.fixture(scope="module")
def sphere():
    return make_shape("sphere", np.random.default_rng(0), 300)


def scene(frames=3, **kw):
    return dict({"format": "neurok.scene/1", "frames": frames, "dt": 1 / 24}, **kw)


def test_plausibility_of_known_deformations(sphere):
    v = sphere.vertices
    setup = setup_from_scene(sphere, scene(floor={"z": float(v[:, 2].min())}))
    c, s = math.cos(0.7), math.sin(0.7)
    R = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    frames = np.stack([v, v @ R.T, 1.1 * v, -v, v - [0, 0, 0.05]])
    ser = plausibility_series(frames, setup)
    assert ser["volume_ratio"][1] == pytest.approx(1.0) and ser["strain_max"][1] < 1e-9 and ser["flipped"][1] == 0
    assert ser["volume_ratio"][2] == pytest.approx(1.1 ** 3) and ser["strain_mean"][2] == pytest.approx(0.1)
    assert ser["volume_ratio"][3] == pytest.approx(-1.0) and ser["flipped"][3] > 0.3      # inside out
    diag = np.linalg.norm(np.ptp(v, axis=0))
    assert ser["penetration"][4] == pytest.approx(0.05 / diag) and ser["penetration"][1] <= 1e-9 + ser["penetration"][0]
    summ = plausibility_summary(ser)
    assert summ["volume_ratio_min"] == pytest.approx(-1.0) and summ["flipped_max"] == ser["flipped"].max()
    assert plausibility_summary(ser, horizon=2)["volume_ratio_min"] == pytest.approx(1.0)
    mean, worst = aggregate_plausibility([summ, plausibility_summary(ser, horizon=2)])
    assert worst["volume_ratio_min"] == pytest.approx(-1.0) and mean["volume_ratio_min"] == pytest.approx(0.0)


def test_horizons_centroid_and_amplitude(sphere):
    curve = np.arange(130, dtype=float)
    h = horizon_means(curve)
    assert h["24"] == pytest.approx(12.5) and h["100"] == pytest.approx(50.5) and h["all"] == pytest.approx(65.0)
    assert horizon_means(curve[:20])["24"] is None
    v = sphere.vertices
    true = np.stack([v, v + [0.1, 0, 0], v + [0.2, 0, 0]])
    still = np.stack([v, v, v])
    diag = np.linalg.norm(np.ptp(v, axis=0))
    assert amplitude_ratio(true, true, diag) == pytest.approx(1.0) and amplitude_ratio(still, true, diag) == 0.0
    assert centroid_path_error(still, true, diag) == pytest.approx(0.15 / diag)


def test_end_turn_tells_a_body_lying_down_from_one_standing(sphere):
    """Issue 23's upright measure: the angle between the up axes of two last frames, whatever
    the body's heading about that axis or where it has moved."""
    v = sphere.vertices * [1.0, 1.0, 2.0]                     # an egg standing on its end
    c, s = math.cos(1.1), math.sin(1.1)
    spun = v @ np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]).T + [0.3, 0.1, 0.0]   # turned about z, moved
    lying = v @ np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]]).T                   # tipped 90 degrees about x
    standing = np.stack([v, spun])
    assert end_turn_degrees(standing, np.stack([v, v]), v) == pytest.approx(0.0, abs=1e-3)
    assert end_turn_degrees(np.stack([v, lying]), standing, v) == pytest.approx(90.0, abs=1e-3)


def test_frequency_and_damping_of_a_damped_cosine():
    dt, f, zeta = 1 / 24, 2.5, 0.08
    w = 2 * math.pi * f
    t = np.arange(96) * dt
    s = -0.03 + 0.02 * np.exp(-zeta * w * t) * np.cos(w * math.sqrt(1 - zeta ** 2) * t)
    assert fft_frequency(s, dt) == pytest.approx(f, rel=0.05)
    fit = damped_fit(s, dt, fft_frequency(s, dt))
    assert fit["frequency"] == pytest.approx(f * math.sqrt(1 - zeta ** 2), rel=1e-3)
    assert fit["damping_ratio"] == pytest.approx(zeta, rel=1e-2)


def test_noise_floor_reader_and_absence():
    r = read_noise_floor({"frames": 24, "hold_still_rel_l2": {"mean": 0.5}, "rel_l2": {"1": 0.01, "mean": 0.02},
                          "ratio_to_hold_still": {"mean": 0.04}})
    assert r["rel_l2"] == 0.02 and r["ratio_to_hold_still"] == 0.04 and r["available"]
    assert noise_floor_for(None)["available"] is False  # a failed measurement is reported, not raised


@pytest.fixture(scope="module")
def beam_runs():
    from engine.evaluation.oracle import oracle_rollout
    from engine.evaluation.scenes import beam_mesh, beam_scene
    from engine.reference.simulator import ReferenceSimulator
    kw = {"lattice_cells": 8, "substep": 1 / 48}
    setup = setup_from_scene(beam_mesh(), beam_scene(24))
    truth = np.stack(list(ReferenceSimulator(setup, **kw).iter_frames()))
    return setup, truth, oracle_rollout(setup, 6, **kw)


def test_oracle_follows_the_reference_beam(beam_runs):
    setup, truth, (pred, fault, err) = beam_runs
    assert fault is None and err is None and pred.shape == truth.shape
    assert np.array_equal(pred[0], truth[0].astype(np.float32)) or np.allclose(pred[0], truth[0], atol=1e-6)
    from engine.evaluation.oracle import oracle_rollout
    q_ref, q_orc = beam_quantities(truth, setup.rest, setup.dt), beam_quantities(pred, setup.rest, setup.dt)
    assert q_ref["sag"] > 0.01                                   # it sags centimetres under gravity
    kw = {"lattice_cells": 8, "substep": 1 / 48}
    q_small = beam_quantities(oracle_rollout(setup, 2, **kw)[0], setup.rest, setup.dt)
    # nested subspaces: more handles, softer; never softer than the full space
    assert 0 < q_small["sag"] < q_orc["sag"] < q_ref["sag"] * 1.02


def test_oracle_free_fall_is_exact(sphere):
    from engine.evaluation.oracle import oracle_rollout
    from engine.reference.simulator import ReferenceSimulator
    setup = setup_from_scene(sphere, scene(8, material={"preset": "rubber"}, initial={"velocity": [0.5, 0, 0]}))
    kw = {"lattice_cells": 6, "substep": 1 / 48}
    truth = np.stack(list(ReferenceSimulator(setup, **kw).iter_frames()))
    pred, fault, _ = oracle_rollout(setup, 1, **kw)          # one affine handle: 12 DOFs
    assert fault is None
    assert np.allclose(pred.mean(axis=1), truth.mean(axis=1), atol=1e-5)   # rigid motion lies in the subspace


def test_renderer_marks_an_inside_out_body_red(sphere, tmp_path):
    from engine.evaluation.render import Camera, animation, contact_sheet, render
    v, f = sphere.vertices, sphere.faces
    cam = Camera(v)
    ok = np.asarray(render(v, f, cam)).reshape(-1, 3).astype(int)
    bad = np.asarray(render(v, f[:, [0, 2, 1]], cam)).reshape(-1, 3).astype(int)     # every face turned inside out
    red = lambda px: np.mean((px[:, 0] > px[:, 2] + 60))   # noqa: E731
    assert red(ok) < 0.01 and red(bad) > 0.05
    frames = np.stack([v, 1.05 * v, v])
    sheet = contact_sheet({"reference": frames, "neurok": frames, "oracle": frames}, f, tmp_path / "s.png", rows=3)
    assert Image.open(sheet).size == (44 + 3 * 220, 20 + 3 * 180)
    gif = animation({"reference": frames, "neurok": frames}, f, tmp_path / "a.gif")
    with Image.open(gif) as g:
        assert g.format == "GIF" and g.n_frames == 3


@pytest.mark.skipif(importlib.util.find_spec("bpy") is None, reason="bpy is not installed")
def test_blender_primitives_are_real_meshes(tmp_path):
    from engine.core.geometry import is_closed
    from engine.evaluation.heldout import blender_primitives
    meshes, note = blender_primitives(tmp_path, ["monkey", "torus", "grid"], kept=None)     # built here
    assert note is None and set(meshes) == {"monkey", "torus", "grid"}
    assert len(meshes["monkey"].vertices) > 500 and is_closed(meshes["torus"].faces)
    assert np.ptp(meshes["torus"].vertices, axis=0).max() == pytest.approx(0.5)
    again, _ = blender_primitives(tmp_path, ["torus"], kept=None)      # from the cache
    assert np.array_equal(again["torus"].vertices, meshes["torus"].vertices)


# --------------------------------------------------------------------------- energy drift (model v2)

def _small_solid():
    from engine.training.shapes import make_shape
    mesh = make_shape("sphere", np.random.default_rng(0), 200)
    return [(mesh.vertices, mesh.faces, "solid")]


def test_energy_drift_of_the_v2_integrators():
    """Undamped, force-free latent steps of model v2 on a small closed mesh: E = 1/2 |q'|^2 +
    elastic energy is measured for both integrators; backward Euler dissipates, implicit
    midpoint keeps far more of it."""
    from engine.evaluation.energy import energy_drift
    from engine.learned.model import NeurokModel
    torch.manual_seed(0)
    r = energy_drift(NeurokModel(), steps=100, meshes=_small_solid(), amplitude=0.01, keep_curves=True)
    assert r["available"] and set(r["max"]) == {"backward_euler", "implicit_midpoint"}
    mid, be = r["per_mesh"]["mesh"]["implicit_midpoint"], r["per_mesh"]["mesh"]["backward_euler"]
    assert mid["steps"] == be["steps"] == 100 and mid["e0"] > 0 and mid["e0"] == be["e0"]
    assert be["final"] > 0.5                      # dissipative by design at 1/48 s steps
    assert mid["max"] < 0.2 * be["final"]
    assert len(r["curves"]["mesh"]["implicit_midpoint"]["drift"]) == 100


@pytest.mark.xfail(strict=True, reason="measured on model v2 (commit 51625bf): implicit midpoint drifts 6.5% over 1,000 "
                                       "undamped steps on this mesh (3.4% at 0.1% amplitude); the 1% target is not met yet")
def test_implicit_midpoint_conserves_energy_to_one_percent():
    """DESIGN.md section 5: |E(t) - E(0)| / E(0) < 1% over 1,000 undamped, force-free steps."""
    from engine.evaluation.energy import energy_drift
    from engine.learned.model import NeurokModel
    torch.manual_seed(0)
    r = energy_drift(NeurokModel(), steps=STEPS, meshes=_small_solid(), amplitude=0.01, integrators=("implicit_midpoint",))
    assert r["per_mesh"]["mesh"]["implicit_midpoint"]["steps"] == STEPS
    assert r["max"]["implicit_midpoint"] < TARGETS["energy_drift"]
