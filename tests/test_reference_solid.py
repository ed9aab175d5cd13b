"""The reference solid under large deformation and in bending: stable neo-Hookean on quadratic
tetrahedra (engine/reference/solid.py), pins that hold the painted region, and the jelly stress
case of issue 10. Figures are quoted in docs/PHYSICS.md; run with -s to see them:
    .venv/bin/python -m pytest -q -s tests/test_reference_solid.py
"""
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from engine.core.formats import Mesh, read_mesh
from engine.core.scene import setup_from_scene
from engine.reference.lattice import Lattice
from engine.reference.simulator import ReferenceSimulator
from engine.reference.solid import (BARRIER_J, StableNeoHookean, cofactor, inversion_barrier,
                                   projected_pointwise_hessian)
from engine.evaluation.reference_stress import (RECOVERY_FRAMES, TRAINING_POKE, TRAINING_SQUEEZE_LOAD, jelly_scene, recovered,
                                     recovery, rest_symmetries, run_measured, self_overlap, shape_error, squeeze_scene,
                                     training_squeeze, weightless_after)
from engine.training.shapes import _box_lattice

G = 9.81
ROOT = Path(__file__).resolve().parent.parent


def bar_mesh(size, counts):
    unit, faces = _box_lattice(counts)
    return Mesh((unit + 1.0) / 2.0 * np.asarray(size, float), faces)


def box_pin(axis, lo, hi):
    a, b = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
    a[axis], b[axis] = lo, hi
    return {"select": {"box": {"min": a, "max": b}}, "strength": 1.0}


# --------------------------------------------------------------------------- the material itself

@pytest.mark.parametrize("squash", [1.0, 0.35], ids=["ordinary", "inside the inversion barrier"])
def test_pointwise_hessian_is_the_exact_second_derivative_before_projection(squash):
    mu, lam = 1.0, 7.0
    rng = np.random.default_rng(1)
    F = (np.eye(3) * 0.9 + 0.2 * rng.standard_normal((3, 3))) * np.array([1.0, 1.0, squash])[:, None]
    kappa = lam + mu
    psi_J = lambda J: inversion_barrier(np.array([J]))                   # noqa: E731
    if squash < 1.0:
        assert 0.0 < np.linalg.det(F) < BARRIER_J
    c = lambda F_: (mu * (np.linalg.det(F_) - 2.0) + lam * (np.linalg.det(F_) - 1.0)   # noqa: E731
                    + kappa * psi_J(np.linalg.det(F_))[1][0])
    P = lambda F_: mu * F_ + c(F_) * cofactor(F_)                        # noqa: E731
    eps, fd = 1e-6, np.zeros((9, 9))
    for a in range(9):
        d = np.zeros(9); d[a] = eps
        fd[:, a] = ((P(F + d.reshape(3, 3)) - P(F - d.reshape(3, 3))) / (2 * eps)).ravel()
    a = lam + mu + kappa * psi_J(np.linalg.det(F))[2]
    H = projected_pointwise_hessian(F[None], mu, np.array([c(F)]), a, clamp=False)[0]
    np.testing.assert_allclose(H, fd, atol=1e-6 * np.abs(fd).max())


@pytest.mark.parametrize("order", [1, 2])
def test_energy_gradient_matches_finite_differences_and_hessian_is_psd_when_inverted(order):
    unit, faces = _box_lattice((2, 2, 2))
    rest = (unit + 1) / 2 * np.array([0.3, 0.2, 0.2])
    lat = Lattice(rest, faces, cells=2, order=order)
    model = StableNeoHookean(lat.nodes, lat.tets, 1e5, 0.45, order=order)
    rng = np.random.default_rng(0)
    e0, g0, _ = model.energy_grad_hess(lat.nodes)
    assert abs(e0) < 1e-9 and np.abs(g0).max() < 1e-8, "rest is stress free"
    y = lat.nodes @ np.array([[1.2, 0.1, 0], [0.05, 0.7, 0.1], [0, 0.02, 1.1]]).T + 0.01 * rng.standard_normal(lat.nodes.shape)
    _, g, _ = model.energy_grad_hess(y)
    d, eps = rng.standard_normal(y.shape), 1e-6
    fd = (model.energy_grad_hess(y + eps * d, False)[0] - model.energy_grad_hess(y - eps * d, False)[0]) / (2 * eps)
    assert fd == pytest.approx(g @ d.ravel(), rel=1e-6)
    # squashed to 30 % height: every point inside the inversion barrier (J < 0.5), still exact
    squashed = lat.nodes * np.array([1.0, 1.0, 0.3]) + 0.002 * rng.standard_normal(y.shape)
    _, g, H = model.energy_grad_hess(squashed)
    fd = (model.energy_grad_hess(squashed + eps * d, False)[0] - model.energy_grad_hess(squashed - eps * d, False)[0]) / (2 * eps)
    assert fd == pytest.approx(g @ d.ravel(), rel=1e-5)
    inverted = lat.nodes * np.array([1.0, 1.0, -0.3]) + 0.02 * rng.standard_normal(y.shape)
    assert model.energy_grad_hess(inverted)[0] == np.inf, "the barrier: an inverted state is out of reach"
    model.barrier = False              # how the simulator solves a state that starts inverted
    _, _, H = model.energy_grad_hess(inverted)
    eig = np.linalg.eigvalsh(H.toarray())
    assert eig.min() > -1e-9 * eig.max()


def test_a_crushed_inverted_block_springs_back_to_its_rest_shape():
    """Every node of a rubber block is flattened through itself (z -> -0.2 z, all elements
    inverted) and released without gravity: it returns to its rest volume, none inverted."""
    mesh = bar_mesh((0.2, 0.2, 0.2), (2, 2, 2))
    setup = setup_from_scene(mesh, {"format": "neurok.scene/1", "frames": 49, "dt": 1 / 24, "gravity": [0, 0, 0],
                                    "material": {"preset": "rubber", "poisson": 0.45, "damping": 0.02}})
    sim = ReferenceSimulator(setup, lattice_cells=2)
    c = sim.y.mean(axis=0)
    sim.y = c + (sim.y - c) * np.array([1.0, 1.0, -0.2])
    assert sim.inverted_share() == 1.0
    for _ in range(48):
        sim.step_frame()
    ratio = sim.elastic.volume_ratio(sim.y)
    print(f"\n[k] block crushed inside out to -20 % height: volume after 2 s {ratio:.3f}, "
          f"inverted share {sim.inverted_share():.1%}")
    assert sim.inverted_share() == 0.0
    assert ratio == pytest.approx(1.0, abs=0.02)


# --------------------------------------------------------------------------- bending and pins

def _cantilever_tip(poisson, cells=None, order=2):
    """Blender's bar laid horizontally (1.0 x 0.1 x 0.1 m, a vertex ring every centimetre),
    E = 200 MPa, rho = 1000, clamped over its first 3 %: static tip deflection (m)."""
    mesh = bar_mesh((1.0, 0.1, 0.1), (100, 1, 1))
    sc = {"format": "neurok.scene/1", "frames": 1, "dt": 1 / 24,
          "material": {"kind": "solid", "stiffness": 2e8, "density": 1000.0, "poisson": poisson},
          "pins": [box_pin(0, 0.0, 0.03)]}
    kw = {} if cells is None else {"lattice_cells": cells}
    sim = ReferenceSimulator(setup_from_scene(mesh, sc), order=order, **kw)
    x = sim.solve_static()
    tip = mesh.vertices[:, 0] > 1.0 - 1e-9
    return -float((x[tip, 2] - mesh.vertices[tip, 2]).mean())


def euler_bernoulli_tip(L=0.97, h=0.1, E=2e8, rho=1000.0):
    """q L^4 / (8 E I), q = rho g b h, I = b h^3 / 12."""
    return 1.5 * rho * G * L ** 4 / (E * h ** 2)


@pytest.mark.parametrize("poisson", [0.3, 0.49])
def test_cantilever_deflects_as_euler_bernoulli_at_the_default_resolution(poisson):
    tip, theory = _cantilever_tip(poisson), euler_bernoulli_tip()
    print(f"[l] cantilever 1.0x0.1x0.1 m, E=200 MPa, nu={poisson}, clamped over 3 %: tip {tip * 1e3:.3f} mm, "
          f"Euler-Bernoulli (L=0.97 m) {theory * 1e3:.3f} mm, error {100 * (tip / theory - 1):+.1f} %")
    assert tip == pytest.approx(theory, rel=0.05)


def test_blender_bar_pinned_over_its_top_3_percent_stretches_by_its_free_length():
    mesh = bar_mesh((0.1, 0.1, 1.0), (1, 1, 100))
    sc = {"format": "neurok.scene/1", "frames": 1, "dt": 1 / 24,
          "material": {"kind": "solid", "stiffness": 2e5, "density": 1000.0, "poisson": 0.3},
          "pins": [box_pin(2, 0.97, 1.0)]}
    sim = ReferenceSimulator(setup_from_scene(mesh, sc))
    x = sim.solve_static()
    bottom = mesh.vertices[:, 2] < 1e-9
    stretch = -float((x[bottom, 2] - mesh.vertices[bottom, 2]).mean())
    theory = 1000.0 * G * 0.97 ** 2 / (2 * 2e5)
    print(f"[m] Blender bar 0.1x0.1x1 m, E=200 kPa, nu=0.3, pinned top 3 %: stretch {stretch * 1e3:.2f} mm, "
          f"rho g L^2/2E with L=0.97 m: {theory * 1e3:.2f} mm, error {100 * (stretch / theory - 1):+.1f} %")
    assert stretch == pytest.approx(theory, rel=0.03)
    pinned = setup_from_scene(mesh, sc).pin_weight > 0
    assert np.abs(x[pinned] - mesh.vertices[pinned]).max() < 1e-4, "the painted slab does not move"


# --------------------------------------------------------------------------- large compression

JELLY_CELLS = 3   # the stress tests run on a coarse lattice (8^3 nodes) to stay fast


def test_jelly_hammer_blow_keeps_its_volume_and_springs_back():
    """The demo jelly hit on top by 150 m/s^2 for two frames (12.5 m/s on a 3 kPa body)."""
    mesh = read_mesh(ROOT / "assets" / "samples" / "jelly.obj")
    poked = run_measured(mesh, jelly_scene(poke=150.0), JELLY_CELLS, overlap_every=0)
    resting = run_measured(mesh, jelly_scene(poke=0.0), JELLY_CELLS, overlap_every=0)
    r = recovery(poked, resting)
    print(f"[n] jelly hammer blow ({JELLY_CELLS} cells): least volume {r['min_volume']:.3f}, "
          f"2 s after: volume {r['end_volume']:.3f}, height {r['end_height_vs_resting']:.3f} of the resting jelly, "
          f"shape {r['shape_vs_resting']:.3f} off it, inverted {r['inverted_end']:.1%}")
    assert r["finite"]
    assert r["min_volume"] >= 0.5
    assert r["end_volume"] == pytest.approx(1.0, abs=0.05)
    assert r["end_height_vs_resting"] == pytest.approx(1.0, abs=0.05)
    assert r["shape_vs_resting"] <= 0.05
    assert r["inverted_end"] == 0.0


def _poke(mesh, multiplier, poisson):
    """Row of engine/evaluation/reference_stress.py's sweep: a one-frame poke of `multiplier` x the generator's top."""
    frames = 2 + RECOVERY_FRAMES + 1
    poked = run_measured(mesh, jelly_scene(poke=multiplier * TRAINING_POKE, poisson=poisson, start=1, end=2,
                                           frames=frames), JELLY_CELLS)
    resting = run_measured(mesh, jelly_scene(poke=0.0, poisson=poisson, start=1, end=2, frames=frames), JELLY_CELLS,
                           overlap_every=0)
    return recovery(poked, resting)


def test_a_nearly_incompressible_jelly_springs_back_from_100_times_the_training_poke():
    """30,000 m/s^2 for one frame (1,250 m/s) on the top of a 3 kPa, nu = 0.49 jelly (sweep row (o)): 2 s later
    it is back to the resting jelly's volume, height and shape, with nothing inverted and no part inside another."""
    jelly = read_mesh(ROOT / "assets" / "samples" / "jelly.obj")
    r = _poke(jelly, 100, 0.49)
    print(f"[o] poke 100x, nu 0.49: least volume {r['min_volume']:.3f}, 2 s after {r['end_volume_vs_resting']:.3f} of "
          f"the resting jelly's, height {r['end_height_vs_resting']:.3f}, shape {r['shape_vs_resting']:.3f} off it, "
          f"inverted {r['inverted_end']:.1%}, self-overlap at most {r['max_overlap']}, at the end {r['end_overlap']} "
          f"vertices")
    assert r["min_volume"] >= 0.5
    assert recovered(r), r


def test_a_compressible_jelly_springs_back_from_the_training_top_poke():
    """At nu = 0.3 the 3 kPa jelly (its weight is 0.86 of its stiffness) poked at the generator's top: without
    self-contact it folded flat, its creases passing through each other, into a state 1.3 J below the upright
    jelly and stayed there; with it, it comes back (docs/PHYSICS.md (o)). It dips below half its rest volume on
    the way (0.45: the resting jelly itself is at 0.75)."""
    r = _poke(read_mesh(ROOT / "assets" / "samples" / "jelly.obj"), 1, 0.3)
    print(f"[o] poke 1x, nu 0.3: least volume {r['min_volume']:.3f}, 2 s after {r['end_volume_vs_resting']:.3f} of "
          f"the resting jelly's, height {r['end_height_vs_resting']:.3f}, shape {r['shape_vs_resting']:.3f} off it, "
          f"inverted {r['inverted_end']:.1%}, self-overlap at most {r['max_overlap']}, at the end {r['end_overlap']}, "
          f"energy vs resting "
          f"{r['energy_vs_resting']:+.2f} J")
    assert r["min_volume"] >= 0.4
    assert recovered(r), r
    assert abs(r["energy_vs_resting"]) < 0.3


def test_self_overlap_counts_a_surface_passing_through_itself_and_not_a_squashed_one():
    """The sweep's self-overlap measure: zero for the jelly, also squashed to a fifth of its width, and the
    vertices of one part inside the other for two jellies overlapping by a third."""
    jelly = read_mesh(ROOT / "assets" / "samples" / "jelly.obj")
    x, faces = jelly.vertices.astype(float), np.asarray(jelly.faces)
    assert self_overlap(x, faces) == 0
    assert self_overlap(x * np.array([0.2, 1.5, 1.0]), faces) == 0
    shifted = x + np.array([2.0 / 3.0 * np.ptp(x[:, 0]), 0.0, 0.0])
    both = np.concatenate([x, shifted])
    inside = self_overlap(both, np.concatenate([faces, faces + len(x)]))
    assert 0.1 * len(x) < inside < len(x)


def test_shape_error_ignores_where_the_body_lies_and_which_way_it_faces_but_not_a_skew():
    """The sweep's shape measure: zero for the jelly moved and turned on its side, and a skew of 20 % of its
    height (top pushed sideways, bottom held) counts."""
    jelly = read_mesh(ROOT / "assets" / "samples" / "jelly.obj").vertices.astype(float)
    c, s = np.cos(1.2), np.sin(1.2)
    turned = jelly @ np.array([[1, 0, 0], [0, c, -s], [0, s, c]]).T + np.array([3.0, -1.0, 0.5])
    assert shape_error(turned, jelly) < 1e-9
    height = np.ptp(jelly[:, 2])
    skewed = jelly + np.outer(0.2 * (jelly[:, 2] - jelly[:, 2].min()), [1.0, 0.0, 0.0])
    assert 0.02 < shape_error(skewed, jelly) < 0.2 * height / np.ptp(jelly, axis=0).max()


def test_shape_error_counts_the_same_lump_turned_by_a_symmetry_of_the_cube_as_the_same_shape():
    """A soft jelly cube sags into a lopsided lump; after a blow it may settle in the same lump with its material
    turned by a symmetry of the cube (the nu = 0.3 pokes of the sweep: 0.19 of its size apart vertex by vertex,
    0.005 up to the symmetry). The rest mesh's symmetries are the 48 of the cube, the identity first."""
    jelly = read_mesh(ROOT / "assets" / "samples" / "jelly.obj").vertices.astype(float)
    symmetries = rest_symmetries(jelly)
    assert len(symmetries) == 48 and np.array_equal(symmetries[0], np.arange(len(jelly)))
    lump = jelly + np.outer(0.2 * (jelly[:, 2] - jelly[:, 2].min()), [1.0, 0.0, 0.0])     # leaning towards +x
    centre = jelly.mean(axis=0)
    half_turn = np.argmin(np.linalg.norm((jelly - centre)[:, None] * np.array([-1, -1, 1]) - (jelly - centre)[None],
                                         axis=2), axis=1)           # material turned half round z
    leaning_the_other_way_in_material = lump[half_turn]
    assert shape_error(leaning_the_other_way_in_material, lump) > 0.02
    assert shape_error(leaning_the_other_way_in_material, lump, symmetries) < 1e-9
    assert len(rest_symmetries(jelly * np.array([1.0, 1.2, 1.0]))) == 16     # stretched along y: only x and z swap


def test_a_jelly_squeezed_at_the_training_top_springs_back_without_overlapping_itself():
    """Opposite pushes on the jelly's x-quarters at the generator's strongest squeeze (rho a L / E = 0.25,
    2.9 m/s^2) for half a second, nu = 0.45 (sweep row (o))."""
    mesh = read_mesh(ROOT / "assets" / "samples" / "jelly.obj")
    squeezed = run_measured(mesh, squeeze_scene(training_squeeze(mesh), 0.45), JELLY_CELLS)
    resting = run_measured(mesh, squeeze_scene(0.0, 0.45), JELLY_CELLS, overlap_every=0)
    r = recovery(squeezed, resting)
    print(f"[o] squeeze 1x, nu 0.45: least volume {r['min_volume']:.3f}, 2 s after {r['end_volume_vs_resting']:.3f} "
          f"of the resting jelly's, height {r['end_height_vs_resting']:.3f}, self-overlap at most {r['max_overlap']}")
    assert r["max_overlap"] == 0
    assert recovered(r), r


def test_a_compressible_jelly_squeezed_at_10_times_the_training_top_springs_back():
    """rho a L / E = 2.5 for half a second on the nu = 0.3 jelly (sweep row (o)): the pushed quarters pass each
    other and shear it into a sheet; 2 s later it is back where the resting jelly is, with no part inside another.
    Before the contact moved to the lattice's surface (session 6) 73 vertices stayed inside another part and
    the shape was 0.085 of the jelly's size off."""
    mesh = read_mesh(ROOT / "assets" / "samples" / "jelly.obj")
    squeezed = run_measured(mesh, squeeze_scene(10 * training_squeeze(mesh), 0.3), JELLY_CELLS, overlap_every=2)
    resting = run_measured(mesh, squeeze_scene(0.0, 0.3), JELLY_CELLS, overlap_every=0)
    r = recovery(squeezed, resting)
    print(f"[o] squeeze 10x, nu 0.3: least volume {r['min_volume']:.3f}, 2 s after {r['end_volume_vs_resting']:.3f} "
          f"of the resting jelly's, height {r['end_height_vs_resting']:.3f}, shape {r['shape_vs_resting']:.3f} off it, "
          f"inside another part at most {r['max_overlap']}, at the end {r['end_overlap']}")
    assert recovered(r), r


def test_the_sagging_jelly_returns_to_its_rest_shape_once_gravity_is_taken_away():
    """`weightless_after`, which tells a state held by the body's own weight from one held by its elasticity or
    contact: the 3 kPa jelly sags under its weight (0.86 of its stiffness) out of its rest shape, and without
    gravity it is back in it."""
    mesh = read_mesh(ROOT / "assets" / "samples" / "jelly.obj")
    measured = weightless_after(mesh, squeeze_scene(0.0, 0.45, frames=13), JELLY_CELLS, seconds=1.0, every=1.0)
    print("[o] resting jelly, then weightless: " + ", ".join(f"{t:.0f} s: shape {e:.3f}" for t, e, _ in measured))
    assert measured[0][1] > 0.05
    assert measured[-1][1] < 0.01
    assert all(inside == 0 for _, _, inside in measured)


def test_the_sweep_squeezes_at_the_generators_strongest_squeeze():
    from engine.training.generate import MAX_SQUEEZE_STRAIN
    assert TRAINING_SQUEEZE_LOAD == MAX_SQUEEZE_STRAIN


def test_a_cube_poked_straight_down_at_the_middle_of_its_top_does_not_lean():
    """Along an axis with an even count of cells the lattice is mirror-symmetric, as the body is:
    every cell's Kuhn split is mirrored in its neighbours. With one split in every cell, this 2-cell
    jelly cube's top moved 15 mm sideways (along (1,1)) in 6 frames; a symmetric body under a
    symmetric load has nowhere to lean."""
    unit, faces = _box_lattice((6, 6, 6))
    cube = Mesh((unit + 1.0) / 2.0, faces)
    scene = {"format": "neurok.scene/1", "frames": 6, "dt": 1 / 24, "gravity": [0, 0, -G],
             "material": {"preset": "jelly"}, "pins": [], "floor": {"z": 0.0},
             "forces": [{"select": {"sphere": {"center": [0.5, 0.5, 1.0], "radius": 0.3}}, "accel": [0, 0, -150],
                         "profile": {"type": "impulse", "start": 1, "end": 3}}]}
    x = np.stack(list(ReferenceSimulator(setup_from_scene(cube, scene), lattice_cells=2).iter_frames()))
    top = cube.vertices[:, 2] > 0.99
    moved = x[-1][top].mean(axis=0) - x[0][top].mean(axis=0)
    print(f"poked cube's top moved {1000 * moved} mm")
    assert moved[2] < -0.3                                  # the poke pressed the top far down ...
    assert np.abs(moved[:2]).max() < 1e-6                   # ... and not sideways


def test_a_start_stored_with_rounding_begins_upright_at_rest():
    """A sequence's first frame is stored rounded (about 0.1 mm here); fitting the lattice to it
    must not fling the nodes that hardly any vertex holds: every cell stays upright and every node
    within a few millimetres of rest (the evaluation's oracle and noise floor start this way)."""
    sample = "soft_toy"
    mesh = read_mesh(ROOT / "assets" / "samples" / f"{sample}.obj")
    setup = setup_from_scene(mesh, {"format": "neurok.scene/1", "frames": 2, "material": {"preset": "rubber"}})
    rounding = np.random.default_rng(0).uniform(-1e-4, 1e-4, setup.x0.shape)
    setup = dataclasses.replace(setup, x0=setup.rest + rounding)
    sim = ReferenceSimulator(setup)
    moved = np.linalg.norm(sim.y - sim.rest_dofs, axis=1).max()
    print(f"\n[k] {sample}: rounding 0.1 mm moves the nodes at most {1e3 * moved:.2f} mm, "
          f"inverted share {sim.inverted_share():.3f}")
    assert sim.inverted_share() == 0.0 and sim.elastic.all_upright(sim.y)
    assert moved < 3e-3
    assert np.abs(sim.vertices() - setup.x0).max() < 3e-4
