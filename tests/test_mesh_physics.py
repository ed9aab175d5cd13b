"""The sheet's laws exist once (engine/core/mesh_physics.py): the reference simulator's cloth and
the learned engine's full-space layer price the same energy, gradient and Hessian on any state,
on a mesh with a non-manifold edge and a border; the bending matrix of the learned subspace is the
same matrix; and each term agrees with its own finite differences."""
import numpy as np
import pytest
import scipy.sparse as sp

from engine.core.geometry import edge_face_counts, face_edges
from engine.core.mesh_physics import EdgeSprings, bending_matrix, penalty_contact
from engine.core.scene import setup_from_scene
from engine.core.formats import Mesh
from engine.learned.sheet_layer import SheetLayer
from engine.reference.cloth import ClothModel

CLOTH = {"format": "neurok.scene/1", "frames": 3, "dt": 1 / 24, "material": {"preset": "cloth"}}


def fin_with_a_third_wing():
    """A 4x4 grid sheet with a third triangle on one inner edge (shared by three faces)."""
    u = np.linspace(0.0, 0.3, 4)
    X, Y = np.meshgrid(u, u)
    v = np.stack([X.ravel(), Y.ravel(), np.zeros(16)], axis=1)
    idx = np.arange(16).reshape(4, 4)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[:-1, 1:].ravel(), idx[1:, 1:].ravel(), idx[1:, :-1].ravel()
    faces = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    v = np.vstack([v, [[0.15, 0.15, 0.12]]])
    faces = np.vstack([faces, [[5, 10, 16]]])           # 5-10 is the diagonal of an inner quad
    return v, faces.astype(np.int64)


@pytest.fixture(scope="module")
def fin():
    rest, faces = fin_with_a_third_wing()
    assert edge_face_counts(faces).max() == 3 and (edge_face_counts(faces) == 1).any()
    return rest, faces


def test_the_reference_and_the_layer_price_the_same_sheet(fin):
    rest, faces = fin
    setup = setup_from_scene(Mesh(rest, faces), CLOTH)
    m = setup.material
    reference = ClothModel(rest, faces, m.stiffness, m.bending)
    layer = SheetLayer(setup)
    rng = np.random.default_rng(3)
    for scale in (0.002, 0.02, 0.1):                    # small wrinkles to folds
        x = rest + scale * rng.standard_normal(rest.shape)
        e_ref, g_ref, H_ref = reference.energy_grad_hess(x)
        e_layer, g_layer = layer.elastic(x)
        assert e_layer == pytest.approx(e_ref, rel=1e-12)
        np.testing.assert_allclose(g_layer.ravel(), g_ref, rtol=1e-10, atol=1e-12 * np.abs(g_ref).max())
        H_layer = layer.springs.hessian(x) + sp.kron(layer.Q, np.eye(3))
        assert abs(H_layer - H_ref).max() <= 1e-10 * abs(H_ref).max()


def test_the_subspace_bends_by_the_same_matrix(fin):
    from engine.learned.subspace import bending_matrix as subspace_bending
    rest, faces = fin
    assert abs(subspace_bending(rest, faces) - bending_matrix(rest, faces)).max() == 0.0
    Q = bending_matrix(rest, faces)
    rigid = rest @ np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]).T + [0.3, -0.2, 1.0]
    assert np.abs(Q @ rigid).max() < 1e-9 * np.abs(Q).max()    # rigid motion bends nothing
    edges, _ = face_edges(faces)
    hinges = (edge_face_counts(faces) == 2).sum()
    assert Q.nnz <= 16 * hinges and hinges < len(edges)         # borders and the 3-face edge: no hinge


def test_each_term_is_its_own_gradient(fin):
    rest, faces = fin
    rng = np.random.default_rng(0)
    springs = EdgeSprings(rest, faces, 500.0)
    x = rest + 0.03 * rng.standard_normal(rest.shape)
    d = rng.standard_normal(rest.shape)
    e, g = springs.energy_gradient(x)
    eps = 1e-6
    fd = (springs.energy_gradient(x + eps * d)[0] - springs.energy_gradient(x - eps * d)[0]) / (2 * eps)
    assert fd == pytest.approx(np.vdot(g, d), rel=1e-6)
    # a stretched spring's Hessian is the gradient's derivative (stretched: the clamp does not bind)
    stretched = rest * 1.01
    H = springs.hessian(stretched)
    g1 = springs.energy_gradient(stretched + eps * d)[1] - springs.energy_gradient(stretched - eps * d)[1]
    np.testing.assert_allclose(g1.ravel() / (2 * eps), H @ d.ravel(), rtol=1e-5, atol=1e-6 * abs(H).max())


def test_penalty_contact_holds_absolute_values():
    """A 2 g vertex 1 mm under the floor: k = m * 1e6 s^-2 pushes it up with 2 N (its friction:
    `core.friction`, tests/test_friction.py)."""
    x = np.array([[0.0, 0.0, -0.001], [0.0, 0.0, 0.01]])
    normal = np.tile([0.0, 0.0, 1.0], (2, 1))
    energy, grad, hess, depth = penalty_contact(x, np.zeros((2, 3)), normal, np.array([0.002, 0.002]))
    assert grad[0, 2] == pytest.approx(-2.0) and grad[1, 2] == 0.0
    assert energy == pytest.approx(0.5 * 2000.0 * 1e-6)
    assert hess[0, 2, 2] == pytest.approx(2000.0) and depth[1] == 0.0


def test_the_layers_incremental_potential_is_its_own_gradient(fin):
    """The full-space layer's substep potential (springs with their damping at x_n, bending, inertia,
    air, pins, forces), which its iterations minimise, against its own finite differences, on any
    memory layout of the state."""
    rest, faces = fin
    scene = dict(CLOTH, material={"preset": "cloth", "damping": 0.02},
                 pins=[{"select": {"box": {"min": [-1, -1, -1], "max": [0.01, 1, 1]}}}],
                 forces=[{"select": {"box": {"min": [-1, -1, -1], "max": [1, 1, 1]}}, "accel": [3, 0, 1]}])
    layer = SheetLayer(setup_from_scene(Mesh(rest, faces), scene))
    rng = np.random.default_rng(1)
    x_n, v_n = rest + 0.01 * rng.standard_normal(rest.shape), 0.3 * rng.standard_normal(rest.shape)
    potential = layer.incremental_potential(0, x_n, v_n, 1.0 / 48.0)
    x, d = x_n + 0.005 * rng.standard_normal(rest.shape), rng.standard_normal(rest.shape)
    energy, grad = potential(x)
    eps = 1e-7
    fd = (potential(x + eps * d)[0] - potential(x - eps * d)[0]) / (2 * eps)
    assert fd == pytest.approx(float(np.vdot(grad, d)), rel=1e-5)
    energy_f, grad_f = potential(np.asfortranarray(x))
    assert energy_f == pytest.approx(energy, rel=1e-13)
    np.testing.assert_allclose(grad_f, grad, rtol=1e-12, atol=1e-12 * np.abs(grad).max())


def test_the_layers_substep_is_the_references_substep(fin):
    """Not the elastic energy alone: the whole substep the layer's iterations minimise (inertia,
    springs and bending, Rayleigh damping at x_n, air, pins, forces) has the gradient of the one the
    reference's Newton minimises, pins by the same law (each pin holds its own vertex's mass)."""
    from engine.reference.simulator import ReferenceSimulator
    rest, faces = fin
    scene = dict(CLOTH, material={"preset": "cloth", "damping": 0.02, "air_damping": 0.5},
                 pins=[{"select": {"box": {"min": [-1, -1, -1], "max": [0.01, 1, 1]}}}],
                 forces=[{"select": {"box": {"min": [-1, -1, -1], "max": [1, 1, 1]}}, "accel": [3, 0, 1]}])
    setup = setup_from_scene(Mesh(rest, faces), scene)
    reference, layer = ReferenceSimulator(setup), SheetLayer(setup)
    np.testing.assert_allclose(layer.pin_k, reference.pins.k, rtol=1e-12)
    rng = np.random.default_rng(2)
    reference.y = rest + 0.01 * rng.standard_normal(rest.shape)
    reference.v = 0.3 * rng.standard_normal(rest.shape)
    total = reference.incremental_potential(1)[0]
    potential = layer.incremental_potential(1, reference.y, reference.v, reference.h)
    for scale in (1e-3, 1e-2):
        x = reference.y + reference.h * reference.v + scale * rng.standard_normal(rest.shape)
        g_ref = total(x.ravel(), need_hess=False)[1].reshape(-1, 3)
        g_layer = np.asarray(potential(x)[1])
        assert np.abs(g_layer - g_ref).max() <= 1e-9 * np.abs(g_ref).max()
