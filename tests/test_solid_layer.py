"""A solid's fine level (`learned/solid_layer.py`, `solid_layer="on"`): the lattice iterated in
full space after each latent step. Its physics in absolute terms: a hanging bar stretches
rho g L^2 / 2E, a falling body falls as backward Euler says, and a ball set on (or thrown along)
the floor stays on it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.core.scene import setup_from_scene
from engine.evaluation.scenes import uv_sphere
from engine.learned.model import NeurokModel
from engine.learned.runtime import NeurokRun


@pytest.fixture(scope="module")
def classical():
    """An untrained model: the classical neo-Hookean density, the sliders' material."""
    torch.manual_seed(0)
    return NeurokModel().eval()


def ball_scene(frames, material="rubber", **extra):
    return dict({"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "material": {"preset": material},
                 "floor": {"z": -0.25}}, **extra)


def test_a_hanging_bar_stretches_rho_g_L2_over_2E_on_the_fine_level(classical):
    """Pa means Pa on the lattice too: Blender's 0.1 x 0.1 x 1 m bar (E = 100 kPa, rho = 1000,
    nu = 0.3) hanging from its top face settles within 5 % of the reference simulator's static
    stretch (51.0 mm) and 10 % of rho g L^2 / 2E (49.1 mm)."""
    from engine.evaluation.physical import bar_stretch, bar_theory, hanging_bar
    setup = hanging_bar()
    run = NeurokRun(classical, setup, solid_layer="on")
    stretch = bar_stretch(setup, run.bake()[-1])
    print(f"\n[fine level] hanging bar: {stretch * 1e3:.1f} mm (theory {bar_theory() * 1e3:.1f} mm)")
    assert stretch == pytest.approx(0.0510, rel=0.05)
    assert stretch == pytest.approx(bar_theory(), rel=0.10)


def test_a_free_falling_body_falls_as_backward_euler_says(classical):
    """No floor, no pins: the nodes' centre of mass after n substeps of h is g h^2 n (n + 1) / 2
    lower (backward Euler, the reference's scheme), within 1 %, and the body keeps its shape."""
    frames = 6
    scene = ball_scene(frames, floor=None)
    setup = setup_from_scene(uv_sphere(0.25), scene)
    run = NeurokRun(classical, setup, solid_layer="on")
    states = list(run.states())
    layer = run.layer
    n = run.config.substeps * (frames - 1)
    h = setup.dt / run.config.substeps
    drop = float(layer.mass @ (layer.rest[:, 2] - states[-1].x[:, 2]) / layer.mass.sum())
    assert drop == pytest.approx(9.81 * h * h * n * (n + 1) / 2, rel=0.01)
    shape = states[-1].x - states[-1].x.mean(axis=0) - (layer.rest - layer.rest.mean(axis=0))
    assert float(np.abs(shape).max()) < 1e-3


def test_a_ball_set_on_the_floor_rests_on_it(classical):
    """A rubber ball set on the floor under gravity: its lowest vertex stays within 3 mm of the
    floor, and it wanders sideways no further than static friction lets a contact creep (the
    slip speed over the run, `core.friction`, and 1 mm)."""
    from engine.core.friction import FRICTION_SLIP_SPEED
    setup = setup_from_scene(uv_sphere(0.25), ball_scene(24))
    run = NeurokRun(classical, setup, solid_layer="on")
    frames = run.bake()
    assert float(frames[:, :, 2].min()) > -0.25 - 0.003
    drift = np.linalg.norm(frames[:, :, :2].mean(axis=1) - frames[0, :, :2].mean(axis=0), axis=1)
    assert float(drift.max()) < FRICTION_SLIP_SPEED * setup.frames * setup.dt + 1e-3


def test_a_ball_thrown_along_the_floor_rolls_on_it_and_friction_slows_it(classical):
    """A jelly ball thrown along the floor at 2 m/s: it stays on the floor while it rolls forward
    (lowest vertex within 1 cm: the soft ball squashes onto the floor where 20 iterations leave
    the penalty unconverged by a few millimetres), and friction takes speed from it: over a
    second its centre covers less than the 2 m it was thrown at."""
    scene = ball_scene(24, material="jelly", initial={"velocity": [2.0, 0.0, 0.0]})
    setup = setup_from_scene(uv_sphere(0.25), scene)
    frames = NeurokRun(classical, setup, solid_layer="on").bake()
    assert float(frames[:, :, 2].min()) > -0.25 - 0.01
    travel = float(frames[-1, :, 0].mean() - frames[0, :, 0].mean())
    assert 0.3 < travel < 2.0 * 23 / 24


def test_the_fine_level_is_a_choice_of_solids_only(classical):
    """"on" / "off" for a solid; a sheet ignores it; any other word is an error."""
    from engine.evaluation.bench import CLOTH_SCENE, bench_setup, bench_sheet
    solid = setup_from_scene(uv_sphere(0.25), ball_scene(2))
    assert NeurokRun(classical, solid, solid_layer="on").config.solid_layer
    assert not NeurokRun(classical, solid).config.solid_layer
    sheet = bench_setup(bench_sheet(100), 2, CLOTH_SCENE)
    assert not NeurokRun(classical, sheet, solid_layer="on").config.solid_layer
    with pytest.raises(ValueError, match="solid layer"):
        NeurokRun(classical, solid, solid_layer="yes")
