"""Coulomb friction, the same law in both engines (engine/core/friction.py, issue 43):

- a block sent sliding along the floor at 2 m/s with mu = 0.5 stops after v^2 / 2 mu g = 0.41 m;
- on a 25 degree Collision ramp with mu = 0.3 it slides down with g (sin - mu cos) = 1.48 m/s^2,
  and with mu = 0.6 it stays (static friction: < 1 mm in 1 s);
- a sheet of cloth (the learned engine's full-space layer) slides and holds by the same law:
  sent at 1 m/s with mu = 0.5 it stops after 0.092 m (backward Euler at 1/48 s), and it stays on the 25 degree ramp at mu = 0.6;
- the floor's coefficient is a scene key ("floor": {"z": .., "friction": mu}, default 0.5) that a
  sequence file records.

The ramp is seen in its own frame: a horizontal Collision plane under gravity tilted by 25 degrees
(the reference's lattice is axis-aligned, so a box tilted onto a tilted plane would start with
lattice corners inside it). Real engines (the bundled checkpoint), a 0.2 x 0.2 x 0.1 m rubber
block without air damping (it would slow the slide by 0.1 v).
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.api import open_engine
from engine.core.formats import FormatError, Mesh, read_sequence, write_sequence
from engine.core.scene import SCENE_FORMAT, setup_from_scene, setup_from_sequence
from engine.reference.simulator import ReferenceSimulator

from test_reference import box_mesh

pytestmark = pytest.mark.usefixtures("one_torch_thread")

G = 9.81
SLOPE = np.radians(25.0)
GAP = 0.005                       # the block starts on the ramp's thickness shell
BLOCK = {"kind": "solid", "stiffness": 1.0e6, "density": 1000.0, "poisson": 0.3, "damping": 0.0, "air_damping": 0.0}


def block(lift=0.0) -> Mesh:
    return box_mesh((0.2, 0.2, 0.1), (2, 2, 1), lo=(-0.1, -0.1, lift))


def rollout(engine_name, setup):
    if engine_name == "reference":
        return np.stack(list(ReferenceSimulator(setup, lattice_cells=4).iter_frames()))
    return open_engine("neurok", device="cpu").prepare(setup).bake()


def sliding_setup(mu):
    scene = {"format": SCENE_FORMAT, "frames": 25, "dt": 1 / 24, "material": BLOCK,
             "floor": {"z": 0.0, "friction": mu}, "initial": {"velocity": [2.0, 0.0, 0.0]}}
    return setup_from_scene(block(), scene)


def ramp_setup(mu, frames=25):
    ramp = {"name": "ramp", "vertices": [[-2, -1, 0], [2, -1, 0], [2, 1, 0], [-2, 1, 0]], "faces": [[0, 1, 2], [0, 2, 3]],
            "thickness": GAP, "friction": mu}
    scene = {"format": SCENE_FORMAT, "frames": frames, "dt": 1 / 24, "material": BLOCK, "colliders": [ramp],
             "gravity": [G * np.sin(SLOPE), 0.0, -G * np.cos(SLOPE)]}
    return setup_from_scene(block(GAP), scene)


@pytest.mark.parametrize("engine_name", ["reference", "neurok"])
def test_a_sliding_block_stops_where_coulomb_says(engine_name):
    x = rollout(engine_name, sliding_setup(0.5))
    path = x.mean(axis=1)[:, 0] - x[0].mean(axis=0)[0]
    assert path[-1] == pytest.approx(2.0 ** 2 / (2 * 0.5 * G), rel=0.10)      # 0.41 m
    assert abs(path[-1] - path[-5]) < 1e-3                                     # stopped, not creeping on


@pytest.mark.parametrize("engine_name", ["reference", "neurok"])
def test_a_block_slides_down_a_ramp_as_coulomb_says(engine_name):
    x = rollout(engine_name, ramp_setup(0.3))
    s = x.mean(axis=1)[:, 0] - x[0].mean(axis=0)[0]
    t = np.arange(len(s)) / 24
    late = t >= 0.25                                                            # after the first contact settles
    accel = 2.0 * np.polyfit(t[late], s[late], 2)[0]
    assert accel == pytest.approx(G * (np.sin(SLOPE) - 0.3 * np.cos(SLOPE)), rel=0.10)   # 1.48 m/s^2


@pytest.mark.parametrize("engine_name", ["reference", "neurok"])
def test_a_block_stays_on_a_ramp_steeper_friction_holds(engine_name):
    x = rollout(engine_name, ramp_setup(0.6))
    moved = np.linalg.norm(x.mean(axis=1) - x[0].mean(axis=0), axis=1)
    assert moved.max() < 1e-3                                                   # metres, in 1 s


def cloth_setup(scene):
    from engine.evaluation.scenes import square_sheet
    mesh = square_sheet(0.3, 10, height=scene.pop("height", 0.0))
    return setup_from_scene(mesh, dict({"format": SCENE_FORMAT, "dt": 1 / 24,
                                        "material": {"preset": "cloth", "air_damping": 0.0}}, **scene))


def test_a_sliding_sheet_of_cloth_stops_where_coulomb_says():
    """A cloth laid on the floor at its resting depth (the penalty's g / omega^2: its contacts felt from the first substep) sent sliding at
    1 m/s with mu = 0.5: each substep h of the layer's backward Euler takes mu g h off its speed,
    so it stops after h sum_k (v0 - k mu g h)+ = 0.092 m (v^2 / 2 mu g = 0.102 m less backward
    Euler's v0 h / 2)."""
    from engine.core.physics import FLOOR_OMEGA2
    v0, mu, h = 1.0, 0.5, 1 / 48
    setup = cloth_setup({"frames": 13, "floor": {"z": 0.0, "friction": mu}, "initial": {"velocity": [v0, 0.0, 0.0]},
                         "height": -G / FLOOR_OMEGA2})
    x = open_engine("neurok", device="cpu").prepare(setup, sheet_layer="on").bake()
    path = x.mean(axis=1)[:, 0] - x[0].mean(axis=0)[0]
    speeds = v0 - mu * G * h * np.arange(1, 100)
    assert path[-1] == pytest.approx(h * speeds.clip(min=0.0).sum(), rel=0.03)      # 0.092 m
    assert abs(path[-1] - path[-4]) < 1e-4


def test_a_sheet_of_cloth_stays_on_a_ramp_friction_holds():
    """Laid on the 25 degree ramp's shell, mu = 0.6: its first substep meets no contact force yet
    (they are found at each substep's start) and it slips 3 mm; then static friction holds it to
    the slip speed's creep (1 mm/s at most). With a filter on the velocity after the solve, the
    layer's friction before it took the reference's potential, it slid 1.26 m down."""
    scene = {"frames": 25, "gravity": [G * np.sin(SLOPE), 0.0, -G * np.cos(SLOPE)], "height": GAP,
             "colliders": [{"name": "ramp", "vertices": [[-2, -1, 0], [2, -1, 0], [2, 1, 0], [-2, 1, 0]],
                            "faces": [[0, 1, 2], [0, 2, 3]], "thickness": GAP, "friction": 0.6}]}
    x = open_engine("neurok", device="cpu").prepare(cloth_setup(scene), sheet_layer="on").bake()
    centre = x.mean(axis=1)
    assert np.linalg.norm(centre[1] - centre[0]) < 5e-3
    assert np.linalg.norm(centre[-1] - centre[2]) < 1e-3                      # metres, over 23 frames


def test_the_preconditioners_friction_stiffness_is_the_majorizers_curvature():
    """`coordinate_stiffness` is the diagonal of friction's majorizer (`slide_terms`), static and sliding."""
    from engine.core.friction import FrictionContacts, coordinate_stiffness, slide_terms
    rng = np.random.default_rng(0)
    n = rng.standard_normal((4, 3))
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    contacts = FrictionContacts(np.arange(4), n, np.array([1.0, 2.0, 0.5, 3.0]), np.zeros((4, 3)))
    h = 0.02
    x_prev = rng.standard_normal((4, 3))
    x = x_prev + np.array([1e-7, 1e-6, 1e-3, 0.1])[:, None] * rng.standard_normal((4, 3))   # static to sliding
    _, _, H = slide_terms(x - x_prev, n, contacts.weight, h, majorize=True)
    assert np.allclose(coordinate_stiffness(contacts, x, x_prev, h), np.einsum("aii->ai", H), rtol=1e-12)


def test_the_floor_friction_is_a_scene_key_a_sequence_keeps(tmp_path):
    setup = sliding_setup(0.25)
    assert setup.floor_friction == 0.25
    default = setup_from_scene(block(), {"format": SCENE_FORMAT, "frames": 2, "material": BLOCK, "floor": {"z": 0.0}})
    assert default.floor_friction == 0.5
    with pytest.raises(FormatError, match="floor.friction: must not be negative"):
        setup_from_scene(block(), {"format": SCENE_FORMAT, "frames": 2, "material": BLOCK,
                                   "floor": {"z": 0.0, "friction": -1}})
    path = tmp_path / "seq.npz"
    write_sequence(path, setup.to_sequence(np.stack([setup.x0, setup.x0])))
    assert setup_from_sequence(read_sequence(path)).floor_friction == 0.25
