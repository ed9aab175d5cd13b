"""Several simulated objects collide with each other (engine/core/coupling.py, issue 13).

A small rubber cube is dropped onto a larger one resting on the floor. Simulated together, the falling cube
lands on the lower one and no vertex of either ever enters the other (winding numbers); simulated
one by one, the same cube falls straight through. Both engines, real simulator and the bundled
checkpoint, small meshes, one second.
"""
import numpy as np
import pytest

from engine import api
from engine.core.coupling import Together, link
from engine.core.formats import Mesh
from engine.core.geometry import winding_numbers
from engine.core.scene import setup_from_scene
from engine.reference.engine import ReferenceRun
from engine.training.shapes import _box_lattice

SIZE = 0.3
FRAMES = 25


def cube(z, name, size=SIZE):
    """A cube of side `size` centred over (SIZE/2, SIZE/2), its bottom at height z (98 vertices)."""
    v, f = _box_lattice((4, 4, 4))
    return Mesh(size * v / 2.0 + np.array([SIZE / 2, SIZE / 2, z + size / 2]), f, name=name)


def cube_setup(mesh):
    return setup_from_scene(mesh, {"format": "neurok.scene/1", "frames": FRAMES, "gravity": [0, 0, -9.81],
                                   "material": {"preset": "rubber", "damping": 0.02}, "pins": [], "forces": [],
                                   "floor": {"z": 0.0}})


def two_cubes():
    lower = cube(0.0, "lower")
    # smaller, so it lands on the lower one's face: two equal cubes meet rim on rim, an unstable
    # equilibrium where the rounded contact shell of one edge slides the other off
    upper = cube(SIZE + 0.05, "upper", size=2 * SIZE / 3)     # 5 cm above the lower one
    return [cube_setup(lower), cube_setup(upper)], (lower.faces, upper.faces)


def deepest_entry(xs_lower, xs_upper, faces):
    """Per frame, how many vertices of each cube lie inside the other."""
    counts = []
    for xl, xu in zip(xs_lower, xs_upper):
        inside_lower = winding_numbers(np.asarray(xu, float), np.asarray(xl, float), faces[0]) > 0.5
        inside_upper = winding_numbers(np.asarray(xl, float), np.asarray(xu, float), faces[1]) > 0.5
        counts.append(int(inside_lower.sum() + inside_upper.sum()))
    return np.array(counts)


def reference_together(setups):
    carriers = link(setups, names=["lower", "upper"])
    return Together([ReferenceRun(s, lattice_cells=4) for s in setups], carriers).bake()


def reference_alone(setups):
    return [ReferenceRun(s, lattice_cells=4).bake() for s in setups]


@pytest.mark.parametrize("engine", ["reference", "neurok"])
def test_a_cube_dropped_on_another_lands_on_it_instead_of_passing_through(engine):
    setups, faces = two_cubes()
    if engine == "reference":
        lower, upper = reference_together(setups)
    else:
        lower, upper = api.simulate_together(setups, engine="neurok", names=["lower", "upper"])
    entered = deepest_entry(lower, upper, faces)
    top_of_lower = lower[:, :, 2].max(axis=1)
    bottom_of_upper = upper[:, :, 2].min(axis=1)
    print(f"\n[{engine}] together: vertices inside the other cube, worst frame {entered.max()}; "
          f"upper cube's bottom - lower cube's top at the end {1e3 * (bottom_of_upper[-1] - top_of_lower[-1]):+.1f} mm; "
          f"lower cube's top {top_of_lower[0]:.3f} -> {top_of_lower[-1]:.3f} m")
    assert np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))
    assert entered.max() == 0, "no vertex of either cube ever enters the other"
    assert abs(bottom_of_upper[-1] - top_of_lower[-1]) < 0.03, "the upper cube rests on the lower one"
    assert top_of_lower[-1] > 0.8 * SIZE, "... which still stands"


def test_simulated_one_by_one_the_same_cube_falls_through():
    """The control: without coupling the engines see no other object, so the test above can fail."""
    setups, faces = two_cubes()
    lower, upper = reference_alone(setups)
    assert deepest_entry(lower, upper, faces).max() > 20


def test_objects_simulated_together_need_the_same_frames():
    setups, _ = two_cubes()
    setups[1].frames = FRAMES + 1
    with pytest.raises(api.NeurokError, match="same frame count"):
        link(setups)


def test_a_stop_keeps_the_frames_every_object_completed():
    """A simulation fault in one object ends the run for all, with the good frames of each."""
    setups, _ = two_cubes()
    carriers = link(setups)
    runs = [ReferenceRun(s, lattice_cells=3) for s in setups]

    def broken_after_two():
        yield from (x for _, x in zip(range(3), ReferenceRun._iter_frames(runs[1])))
        raise api.SimulationFault("the upper cube broke at frame 3", 3, None)

    runs[1]._iter_frames = broken_after_two
    with pytest.raises(api.SimulationFault) as caught:
        Together(runs, carriers).bake()
    kept = caught.value.positions
    assert [len(k) for k in kept] == [3, 3]
    assert np.all(np.isfinite(kept[0])) and np.all(np.isfinite(kept[1]))
