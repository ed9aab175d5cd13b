"""Coulomb friction, the same law in both engines (engine/core/friction.py, issue 43):

- a block sent sliding along the floor at 2 m/s with mu = 0.5 stops after v^2 / 2 mu g = 0.41 m;
- on a 25 degree Collision ramp with mu = 0.3 it slides down with g (sin - mu cos) = 1.48 m/s^2,
  and with mu = 0.6 it stays (static friction: < 1 mm in 1 s);
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
