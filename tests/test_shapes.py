"""Procedural shape families and demo samples (engine/shapes.py)."""
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial import cKDTree

from engine.core.formats import NeurokError, read_mesh
from engine.training.shapes import (FAMILIES, SAMPLES, SHEET_FAMILIES, SOLID_FAMILIES, face_areas, is_watertight,
                           make_sample, make_shape, mesh_volume)

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "assets" / "samples"
SEEDS = (0, 1, 2)
TARGET = 800


def _shape(family, seed, target=TARGET):
    return make_shape(family, np.random.default_rng(seed), target)


def _edge_counts(faces):
    edges = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    return counts


def _assert_clean(mesh):
    v, f = mesh.vertices, mesh.faces
    assert v.dtype == np.float64 and f.dtype == np.int64
    assert np.all(np.isfinite(v))
    assert f.min() >= 0 and f.max() < len(v)
    assert len(np.unique(f)) == len(v), "every vertex belongs to a face"
    size = np.ptp(v, axis=0).max()
    assert face_areas(mesh).min() > 1e-7 * size * size, "degenerate face"
    assert not cKDTree(v).query_pairs(1e-6 * size), "duplicate vertices"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_shape_is_clean_sized_and_centred(family, seed):
    mesh = _shape(family, seed)
    _assert_clean(mesh)
    assert 0.6 * TARGET <= len(mesh.vertices) <= 1.4 * TARGET
    extent = np.ptp(mesh.vertices, axis=0)
    assert 0.2 - 1e-9 <= extent.max() <= 1.0 + 1e-9
    centre = 0.5 * (mesh.vertices.min(axis=0) + mesh.vertices.max(axis=0))
    assert np.allclose(centre, 0.0, atol=1e-9)
    assert mesh.name == family


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("family", SOLID_FAMILIES)
def test_solid_is_watertight_and_outward(family, seed):
    mesh = _shape(family, seed)
    assert is_watertight(mesh)
    assert np.all(_edge_counts(mesh.faces) == 2)
    assert mesh_volume(mesh) > 0
    # a closed genus-g surface has Euler characteristic 2 - 2g
    euler = len(mesh.vertices) - len(_edge_counts(mesh.faces)) + len(mesh.faces)
    assert euler == (0 if family == "torus" else 2)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("family", SHEET_FAMILIES)
def test_sheet_is_an_open_grid(family, seed):
    mesh = _shape(family, seed)
    v, f = mesh.vertices, mesh.faces
    assert not is_watertight(mesh)
    extent = np.ptp(v, axis=0)
    flat = int(np.argmin(extent))
    assert extent[flat] == 0.0, "a sheet is planar"
    plane = [axis for axis in range(3) if axis != flat]
    nx, ny = (len(np.unique(np.round(v[:, axis] / extent.max(), 9))) for axis in plane)
    assert nx * ny == len(v)
    assert len(f) == 2 * (nx - 1) * (ny - 1)
    counts = _edge_counts(f)
    assert np.sum(counts == 1) == 2 * (nx - 1) + 2 * (ny - 1)
    assert np.all(counts <= 2)
    assert 1.0 - 0.2 <= max(nx - 1, ny - 1) / min(nx - 1, ny - 1) <= 3.0 + 0.5
    normals = np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])
    assert np.all(np.sign(normals[:, flat]) == np.sign(normals[0, flat])), "consistently oriented"


def test_sheets_come_in_several_resolutions():
    counts = {len(_shape("sheet", seed).vertices) for seed in range(8)}
    assert len(counts) >= 3


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_same_mesh_other_seed_other_mesh(family):
    a, b, c = _shape(family, 7), _shape(family, 7), _shape(family, 8)
    assert np.array_equal(a.vertices, b.vertices) and np.array_equal(a.faces, b.faces)
    assert a.vertices.shape != c.vertices.shape or not np.allclose(a.vertices, c.vertices)


@pytest.mark.parametrize("target", (200, 3000))
@pytest.mark.parametrize("family", ("box", "capsule", "torus", "superquadric", "sheet"))
def test_vertex_count_follows_target(family, target):
    count = len(_shape(family, 3, target).vertices)
    assert 0.6 * target <= count <= 1.4 * target


def test_unknown_family_is_a_clear_error():
    with pytest.raises(NeurokError, match="unknown shape family 'cube'"):
        _shape("cube", 0)


def test_watertight_check_rejects_holes_and_flips():
    mesh = _shape("sphere", 0)
    holed = type(mesh)(mesh.vertices, mesh.faces[1:])
    flipped = mesh.faces.copy()
    flipped[0] = flipped[0, ::-1]
    assert not is_watertight(holed)
    assert not is_watertight(type(mesh)(mesh.vertices, flipped))
    reversed_all = type(mesh)(mesh.vertices, mesh.faces[:, ::-1])
    assert is_watertight(reversed_all) and mesh_volume(reversed_all) == pytest.approx(-mesh_volume(mesh))


def test_volume_of_the_jelly_matches_a_rounded_box():
    side, radius = 0.25 - 2 * 0.035, 0.035  # inner box side, rounding radius
    exact = side ** 3 + 6 * side * side * radius + 3 * np.pi * radius ** 2 * side + 4 / 3 * np.pi * radius ** 3
    assert mesh_volume(make_sample("jelly")) == pytest.approx(exact, rel=0.02)


@pytest.mark.parametrize("name", SAMPLES)
def test_samples_match_their_files(name):
    mesh = make_sample(name)
    _assert_clean(mesh)
    path = SAMPLES_DIR / f"{name}.obj"
    assert path.stat().st_size < 200_000
    stored = read_mesh(path)
    assert len(stored.vertices) == len(mesh.vertices)
    assert np.array_equal(stored.faces, mesh.faces)
    assert np.allclose(stored.vertices, mesh.vertices, atol=1e-6)


def test_sample_shapes():
    toy, flag, jelly = (make_sample(name) for name in ("soft_toy", "flag", "jelly"))
    assert is_watertight(toy) and mesh_volume(toy) > 0
    assert 1000 <= len(toy.vertices) <= 2000
    assert np.ptp(toy.vertices[:, 2]) == pytest.approx(0.3)
    assert is_watertight(jelly) and mesh_volume(jelly) > 0
    assert np.allclose(np.ptp(jelly.vertices, axis=0), 0.25)
    assert 700 <= len(jelly.vertices) <= 1300
    assert len(flag.vertices) == 25 * 17 and not is_watertight(flag)
    assert np.allclose(np.ptp(flag.vertices, axis=0), (0.6, 0.0, 0.4))


def test_generated_solids_can_carry_their_own_weight():
    """The generator never draws a solid its own weight would crush (rho g H / E above its limit:
    a 2 kPa, 1500 kg/m^3, 1 m body could only collapse; lower for compressible bodies), while the
    softest nearly incompressible draws stay as soft as the jelly preset (0.86)."""
    from engine.training.generate import MAX_WEIGHT_STRAIN, MAX_WEIGHT_STRAIN_COMPRESSIBLE, random_scene
    strains, compressible = [], []
    for seed in range(300):
        rng = np.random.default_rng([7, seed])
        family = str(rng.choice(SOLID_FAMILIES))
        mesh = make_shape(family, rng, 300)
        _, scene = random_scene(rng, mesh, "solid", 16, 1 / 24)
        m = scene["material"]
        strain = m["density"] * 9.81 * np.ptp(mesh.vertices[:, 2]) / m["stiffness"]
        (strains if m["poisson"] >= 0.4 else compressible).append(strain)
    assert 0.86 < max(strains) <= MAX_WEIGHT_STRAIN + 1e-9
    assert 0.9 * MAX_WEIGHT_STRAIN_COMPRESSIBLE < max(compressible) <= MAX_WEIGHT_STRAIN_COMPRESSIBLE + 1e-9


def test_generated_squeezes_stay_below_the_self_overlap_load():
    """A squeeze never presses harder than MAX_SQUEEZE_STRAIN of the body's stiffness (rho a L / E):
    harder ones fold soft bodies through themselves in the reference."""
    from engine.training.generate import MAX_SQUEEZE_STRAIN, random_scene
    loads = []
    for seed in range(400):
        rng = np.random.default_rng([11, seed])
        mesh = make_shape(str(rng.choice(SOLID_FAMILIES)), rng, 300)
        name, scene = random_scene(rng, mesh, "solid", 16, 1 / 24)
        if name != "squeeze":
            continue
        m = scene["material"]
        a = np.asarray(scene["forces"][0]["accel"])
        axis = int(np.argmax(np.abs(a)))
        loads.append(m["density"] * np.abs(a).max() * np.ptp(mesh.vertices[:, axis]) / m["stiffness"])
    assert len(loads) > 20
    assert max(loads) <= MAX_SQUEEZE_STRAIN + 1e-9
    assert max(loads) > 0.5 * MAX_SQUEEZE_STRAIN
