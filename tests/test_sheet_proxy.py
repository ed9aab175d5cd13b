"""A fine sheet's coarse proxy (engine/core/coarse_mesh.py, engine/learned/sheet_proxy.py): the
coarse triangulation keeps the sheet's outline, corners and pins and makes no slivers; the fine
vertices ride on it exactly at rest and rigidly under rigid motion; and a layered run of a fine
sheet at medium detail, iterating on its proxy, falls with g and pushes with the painted force
(mass and force carried over in full) and holds its pinned edge."""
import numpy as np
import pytest
import torch

from engine.api import open_engine
from engine.core.coarse_mesh import MIN_QUALITY, Embedding, coarsen
from engine.core.formats import Mesh
from engine.core.geometry import edge_face_counts, triangle_areas
from engine.core.measures import MeshMeasures
from engine.core.scene import setup_from_scene
from engine.learned.sheet_layer import vertex_masses
from engine.learned.sheet_proxy import PROXY_VERTICES, SheetProxy


def grid(rows, cols, width=1.0, height=1.0, bend=0.0):
    """A rows x cols grid sheet in the xz plane (rolled about the z axis by `bend` radians over its width)."""
    u, w = np.meshgrid(np.linspace(0, width, cols), np.linspace(0, height, rows))
    if bend:
        radius = width / bend
        angle = u.ravel() / radius
        v = np.stack([radius * np.sin(angle), radius * (1 - np.cos(angle)), w.ravel()], axis=1)
    else:
        v = np.stack([u.ravel(), np.zeros(u.size), w.ravel()], axis=1)
    idx = np.arange(rows * cols).reshape(rows, cols)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, 1:].ravel(), idx[1:, :-1].ravel()
    return Mesh(v, np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)]).astype(np.int32), name="grid")


def quality(x, faces):
    a, b, c = x[faces[:, 0]], x[faces[:, 1]], x[faces[:, 2]]
    sides = ((b - a) ** 2).sum(1) + ((c - b) ** 2).sum(1) + ((a - c) ** 2).sum(1)
    return 4 * np.sqrt(3) * triangle_areas(x, faces) / sides


def test_coarsening_keeps_the_outline_corners_and_pins_and_makes_no_slivers():
    mesh = grid(40, 60, width=1.5)
    rest, faces = mesh.vertices, mesh.faces
    pole = rest[:, 0] < 1e-9                                       # the pinned edge
    keep, coarse = coarsen(rest, faces, 500, pinned=pole)
    x = rest[keep]
    assert len(keep) == 500
    assert edge_face_counts(coarse).max() <= 2                     # still a manifold sheet
    assert triangle_areas(x, coarse).sum() == pytest.approx(1.5, rel=1e-9)   # the outline: same area, no holes or overlaps
    normals = np.cross(x[coarse[:, 1]] - x[coarse[:, 0]], x[coarse[:, 2]] - x[coarse[:, 0]])
    assert np.all(normals[:, 1] < 0) or np.all(normals[:, 1] > 0)  # none turned over
    assert quality(x, coarse).min() >= MIN_QUALITY
    corners = [np.argmin(np.abs(rest[:, 0] - cx) + np.abs(rest[:, 2] - cz)) for cx in (0, 1.5) for cz in (0, 1)]
    assert set(corners) <= set(keep.tolist())
    assert pole[keep].sum() >= 2 and np.ptp(x[pole[keep], 2]) == pytest.approx(1.0)   # the pole still spans its edge
    spacing = np.sqrt(1.5 / 500)
    edges = np.linalg.norm(x[coarse[:, 1]] - x[coarse[:, 0]], axis=1)
    assert edges.max() < 3.5 * spacing                                # spread about evenly


def test_the_fine_sheet_rides_its_proxy_exactly_at_rest_and_rigidly_when_it_turns():
    mesh = grid(30, 40, bend=2.0)                                     # a curved sheet: offsets off the coarse triangles
    rest, faces = mesh.vertices, mesh.faces
    keep, coarse = coarsen(rest, faces, 300)
    embedding = Embedding(rest, keep, coarse)
    assert len(embedding.offset_rows) > 0
    assert np.abs(embedding.positions(rest[keep]) - rest).max() < 1e-12
    angle = 0.7
    R = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
    moved = rest @ R.T + [0.3, -0.2, 1.0]
    assert np.abs(embedding.positions(moved[keep]) - moved).max() < 1e-9
    masses = np.random.default_rng(0).uniform(0.5, 2.0, len(rest))
    carried = embedding.transfer(masses)
    assert carried.sum() == pytest.approx(masses.sum(), rel=1e-12) and carried.min() > 0


@pytest.fixture(scope="module")
def engine():
    torch.set_num_threads(1)
    return open_engine("neurok", device="cpu")


def fine_sheet_scene(frames, air_damping=0.1, **extra):
    return dict({"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "detail": "medium",
                 "material": {"preset": "cloth", "air_damping": air_damping}}, **extra)


def mass_centre(x, mass):
    return (mass[:, None] * x).sum(0) / mass.sum()


def test_a_fine_sheet_on_its_proxy_falls_with_g_and_takes_the_painted_push_in_full(engine):
    """Free fall of an unpinned 2,601-vertex sheet without air drag (its layer on a 2,000-vertex
    proxy), half of it pushed sideways at 4 m/s^2: the centre of mass falls as backward Euler
    integrates g, g h^2 n (n + 1) / 2 after n substeps of h, and moves the same with 2 m/s^2."""
    mesh = grid(51, 51)
    frames = 7
    scene = fine_sheet_scene(frames, air_damping=0.0, forces=[{"select": {"box": {"min": [0, 0, 0], "max": [0.5, 1, 1]}},
                                              "accel": [4.0, 0, 0]}])
    setup = setup_from_scene(mesh, scene)
    run = engine.prepare(setup)
    assert run.proxy is not None and run.proxy.num_vertices == PROXY_VERTICES
    mass = vertex_masses(setup)
    assert run.layer.mass.sum() == pytest.approx(mass.sum(), rel=1e-9)
    pushed_share = mass[setup.force_terms[0][0] > 0].sum() / mass.sum()
    v = np.random.default_rng(1).normal(size=(PROXY_VERTICES, 3))   # the proxy's velocities, encoded in one product
    J = run.proxy.embedding.matrix
    assert np.allclose(run.scene.velocity_encoder(J)(v), run.scene.encode_velocity(J @ v), rtol=1e-9, atol=1e-9)
    xs = np.asarray(run.bake(), np.float64)
    n = (frames - 1) * run.config.substeps
    h = setup.dt / run.config.substeps
    fall = h ** 2 * n * (n + 1) / 2                 # per m/s^2
    move = mass_centre(xs[-1], mass) - mass_centre(xs[0], mass)
    assert move[2] == pytest.approx(-9.81 * fall, rel=0.01)
    assert move[0] == pytest.approx(4.0 * pushed_share * fall, rel=0.02)


def test_a_fine_sheet_on_its_proxy_holds_its_pinned_edge_and_its_length(engine):
    """A 2,601-vertex sheet hung by its top edge swings down under gravity on its proxy: every fine
    vertex of the pinned edge (kept in the proxy or riding on it) stays within 1 mm of its place,
    the sheet's edges keep their length within 1 % on average, and the sheet falls."""
    mesh = grid(51, 51)
    scene = fine_sheet_scene(10, pins=[{"select": {"box": {"min": [0, 0, 0.99], "max": [1, 1, 1]}}}],
                             gravity=[0, 4.0, -9.81])
    setup = setup_from_scene(mesh, scene)
    run = engine.prepare(setup)
    assert run.proxy is not None
    xs = np.asarray(run.bake(), np.float64)
    pinned = setup.pin_weight > 0
    assert np.linalg.norm(xs[-1][pinned] - xs[0][pinned], axis=1).max() < 1e-3
    assert np.abs(MeshMeasures(setup.rest, setup.faces).edge_strain(xs[-1])).mean() < 0.01
    bottom = mesh.vertices[:, 2] < 1e-9
    assert xs[-1][bottom, 1].mean() > 0.05                          # blown out of its plane by the sideways pull
