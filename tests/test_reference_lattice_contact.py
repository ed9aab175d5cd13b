"""Self-contact of the reference solid (engine/reference/lattice_contact.py): parts of a body that are
far apart at rest may not pass through each other, and ordinary motion does not feel it."""
import numpy as np
import pytest

from engine.core.formats import Mesh
from engine.core.scene import setup_from_scene
from engine.reference.lattice import Lattice
from engine.reference.lattice_contact import LatticeSelfContact, edge_edge, point_triangle
from engine.reference.simulator import ReferenceSimulator
from engine.training.shapes import _box_lattice


def two_cubes(size=0.1, gap=0.12):
    """One mesh of two cubes side by side along x, `gap` apart (the middle lattice cell stays empty)."""
    unit, faces = _box_lattice((2, 2, 2))
    cube = (unit + 1.0) / 2.0 * size
    right = cube + np.array([size + gap, 0.0, 0.0])
    return Mesh(np.concatenate([cube, right]), np.concatenate([faces, faces + len(cube)]))


def thrown_together(accel, self_contact, frames=24, cells=6):
    """The two cubes pushed towards each other for the first 3 frames (each its own half, no
    gravity, no floor), then left to fly; returns the x-gap between them per frame (negative: they
    overlap)."""
    mesh = two_cubes()
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "gravity": [0, 0, 0],
             "material": {"preset": "rubber"}, "pins": [],
             "forces": [{"select": {"box": {"min": [0, 0, 0], "max": [0.4, 1, 1]}}, "accel": [accel, 0, 0],
                         "profile": {"type": "constant", "end": 3}},
                        {"select": {"box": {"min": [0.6, 0, 0], "max": [1, 1, 1]}}, "accel": [-accel, 0, 0],
                         "profile": {"type": "constant", "end": 3}}]}
    setup = setup_from_scene(mesh, scene)
    sim = ReferenceSimulator(setup, lattice_cells=cells, self_contact=self_contact)
    half = len(mesh.vertices) // 2
    centres = sim.lattice.cell_centres()[:, 0]
    assert not np.any((centres > 0.11) & (centres < 0.21))          # two separate bodies in one lattice
    return np.array([x[half:, 0].min() - x[:half, 0].max() for x in sim.iter_frames()])


def test_two_parts_thrown_at_each_other_bounce_off():
    """Thrown at each other at 1 m/s each, the two cubes meet after about 2 frames. Without self-contact they fly
    through each other; with it they touch and part again."""
    free = thrown_together(8.0, self_contact=False)
    held = thrown_together(8.0, self_contact=True)
    print(f"least gap between the cubes: {held.min() * 1000:.1f} mm with self-contact, "
          f"{free.min() * 1000:.1f} mm without")
    assert free.min() < -0.05                      # the scene does drive them through each other
    assert held.min() > -0.01
    assert held[-1] > held.min() + 0.02             # parted again


def test_contact_energy_gradient_matches_finite_differences_and_hessian_is_psd():
    mesh = two_cubes()
    lat = Lattice(mesh.vertices, mesh.faces, 3)
    contact = LatticeSelfContact(lat, young=1e5)
    y = lat.nodes.copy()
    assert contact.terms(y)[0] == 0.0               # nothing is in contact at rest
    right = lat.nodes[:, 0] > 0.15
    y[right] += [-0.1, 0.011, 0.007]                # the right cube's lattice 6 mm from the left one's (band: 13 mm),
    y += np.random.default_rng(1).standard_normal(y.shape) * 5e-4   # off the grid: no exactly aligned edges
    e, g, H = contact.terms(y)
    assert e > 0
    assert g.reshape(-1, 3)[right, 0].sum() < 0     # the energy falls as they part
    rng = np.random.default_rng(3)
    d = rng.standard_normal(y.shape) * 1e-7
    fd = (contact.terms(y + d, False)[0] - contact.terms(y - d, False)[0]) / 2
    assert fd == pytest.approx(float(g @ d.ravel()), rel=1e-4)
    assert np.linalg.eigvalsh(H.toarray()).min() > -1e-8 * abs(H).max()


def test_a_step_may_not_carry_a_part_through_another():
    """The step limit: a step that would move the right cube through the left one is cut so that no pair of
    the lattice surfaces' nodes, triangles and edges closes more than half its gap."""
    mesh = two_cubes()
    lat = Lattice(mesh.vertices, mesh.faces, 3)
    contact = LatticeSelfContact(lat, young=1e5)
    step = np.zeros_like(lat.nodes)
    step[lat.nodes[:, 0] > 0.15, 0] = -0.3          # 0.1 m past the left cube's far side
    share = contact.safe_fraction(lat.nodes, step.ravel())
    assert 0.0 < share < 0.5
    moved = lat.nodes + share * step
    left, right = lat.nodes[:, 0] < 0.15, lat.nodes[:, 0] > 0.15
    assert moved[right, 0].min() - moved[left, 0].max() > 0.5 * contact.d_hat      # still apart, by half the band
    assert contact.terms(moved)[0] < np.inf


def test_self_contact_leaves_ordinary_motion_unchanged():
    """A cantilever swinging under gravity: no two distant parts come near, so the run is the same to the bit."""
    unit, faces = _box_lattice((5, 1, 1))
    mesh = Mesh((unit + 1.0) / 2.0 * np.array([0.5, 0.1, 0.1]), faces)
    scene = {"format": "neurok.scene/1", "frames": 12, "dt": 1.0 / 24.0, "gravity": [0, 0, -9.81],
             "material": {"kind": "solid", "stiffness": 2e5, "density": 1000, "poisson": 0.3},
             "pins": [{"select": {"box": {"min": [0, 0, 0], "max": [0.05, 1, 1]}}, "strength": 1.0}], "forces": []}
    runs = [np.array(list(ReferenceSimulator(setup_from_scene(mesh, scene), lattice_cells=5,
                                             self_contact=flag).iter_frames())) for flag in (False, True)]
    assert np.ptp(runs[0][:, :, 2]) > 0.01          # it does swing
    np.testing.assert_array_equal(runs[0], runs[1])


def test_point_triangle_and_edge_edge_distances_match_a_dense_search():
    """The closest-point distances the contact is built on, against the least distance over dense samples of
    the triangles and segments (random shapes, every closest-point region), and their weights give the vector
    between the closest points."""
    rng = np.random.default_rng(5)
    p, a, b, c = rng.standard_normal((4, 60, 3))
    d, w = point_triangle(p, a, b, c)
    u, v = np.meshgrid(np.linspace(0, 1, 121), np.linspace(0, 1, 121))
    uv = np.stack([u.ravel(), v.ravel()], axis=1)
    uv = uv[uv.sum(axis=1) <= 1]
    for k in range(len(p)):
        on_triangle = a[k] + uv[:, :1] * (b[k] - a[k]) + uv[:, 1:] * (c[k] - a[k])
        sampled = np.linalg.norm(on_triangle - p[k], axis=1).min()
        assert d[k] <= sampled + 1e-12 and sampled - d[k] < 0.01 * (1 + d[k])
        assert np.linalg.norm(w[k] @ np.stack([p[k], a[k], b[k], c[k]])) == pytest.approx(d[k])
    d, w = edge_edge(p, a, b, c)
    t = np.linspace(0, 1, 401)[:, None]
    for k in range(len(p)):
        sampled = np.linalg.norm((p[k] + t * (a[k] - p[k]))[:, None] - (b[k] + t * (c[k] - b[k]))[None], axis=2).min()
        assert d[k] <= sampled + 1e-12 and sampled - d[k] < 0.01 * (1 + d[k])
        assert np.linalg.norm(w[k] @ np.stack([p[k], a[k], b[k], c[k]])) == pytest.approx(d[k])
    parallel = edge_edge(np.zeros((1, 3)), np.array([[1.0, 0, 0]]), np.array([[0.5, 0.2, 0]]), np.array([[2.0, 0.2, 0]]))[0]
    assert parallel[0] == pytest.approx(0.2)


def test_the_pair_search_finds_every_pair_of_balls_within_reach():
    """`near_balls`, which finds the contact's candidate pairs: exactly the pairs a loop over every pair
    finds, between two sets and within one (i < j), with balls of very different sizes (a moving body's
    few fast nodes), whether the wide balls are measured directly, all are (in several blocks), or a
    search tree finds them all."""
    from engine.reference import lattice_contact
    rng = np.random.default_rng(3)
    a, b = rng.random((90, 3)), rng.random((70, 3))
    ra, rb = 0.05 * rng.random(90) ** 4, 0.05 * rng.random(70) ** 4
    ra[0], rb[5] = 0.4, 0.3                               # nodes moving far
    gap = np.linalg.norm(a[:, None] - b[None], axis=2) - ra[:, None] - rb[None]
    between = np.argwhere(gap < 0.02)
    gap = np.linalg.norm(a[:, None] - a[None], axis=2) - ra[:, None] - ra[None]
    within = np.array([(i, j) for i, j in np.argwhere(gap < 0.02) if i < j])
    assert len(between) and len(within)
    for wide, block in ((lattice_contact.WIDE, lattice_contact.DENSE_BLOCK), (0.0, 1000), (1e9, 1000)):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(lattice_contact, "WIDE", wide)
            mp.setattr(lattice_contact, "DENSE_BLOCK", block)
            np.testing.assert_array_equal(lattice_contact.near_balls(a, ra, b, rb, 0.02), between)
            np.testing.assert_array_equal(lattice_contact.near_balls(a, ra, None, None, 0.02), within)
