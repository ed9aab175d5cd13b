"""The learned engine's structure and physics, checked on an untrained model (the classical
density it starts from; training only adds a correction that keeps every property below).

Everything here follows from how the model is built: q = 0 is the rest shape, the basis is
mass-orthonormal, rigid motions are exact and cost no energy, the energy is zero at rest,
non-negative and keeps every sample from inverting, the step's gradient is the gradient of its
incremental potential, the sliders act as physics says, the integrators keep (or never gain)
energy, two resolutions of a shape move alike, the step guard turns a NaN into
`SimulationFault`, and checkpoints load without running code. Small meshes keep it fast.
"""
from __future__ import annotations

import io
import os
from dataclasses import replace

import numpy as np
import pytest
import torch

from engine.api import SimulationFault
from engine.core.formats import FormatError
from engine.core.measures import MeshMeasures
from engine.core.scene import SCENE_FORMAT, setup_from_scene
from engine.learned.checkpoint import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint
from engine.learned.integrators import StepContext, total, total_energy
from engine.learned.latent_scene import LatentScene
from engine.learned.strain_energy import DTYPE
from engine.learned.model import NeurokModel
from engine.learned.runtime import NeurokEngine, NeurokRun
from engine.learned.terms import elastic, elastic_energy, floor_contact, friction
from engine.training.shapes import make_sample, make_shape

G = 9.81
SOLIDS = (("box", 1), ("sphere", 2), ("blob", 3))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = NeurokModel()
    for p in m.parameters():
        p.requires_grad_(False)
    return m.eval()


@pytest.fixture(scope="module")
def checkpoint(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "m.ckpt"
    save_checkpoint(path, model, {"note": "untrained"})
    return path


@pytest.fixture(scope="module")
def engine(checkpoint):
    return NeurokEngine(checkpoint)


def shape(family, seed, vertices=300):
    return make_shape(family, np.random.default_rng(seed), vertices)


def make_setup(mesh, frames=2, material=None, **scene):
    kind = "cloth" if mesh.name in ("sheet", "flag") else "solid"
    mat = {"preset": "cloth" if kind == "cloth" else "rubber"}
    mat.update(material or {})
    return setup_from_scene(mesh, dict({"format": SCENE_FORMAT, "frames": frames, "material": mat}, **scene))


def diagonal(mesh):
    return float(np.linalg.norm(np.ptp(mesh.vertices, axis=0)))


def latent_scene(model, setup):
    with torch.no_grad():
        return LatentScene(model, setup)


def com(scene, xs):
    """Mass-weighted centre of mass per frame (the engine's own vertex masses)."""
    return np.einsum("n,...na->...a", scene.vertex_mass, xs)


def rotation(angle, axis):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


# --------------------------------------------------------------------------- subspace

@pytest.mark.parametrize("family,seed", SOLIDS + (("sheet", 0),))
def test_zero_latent_is_the_rest_shape_and_rest_encodes_to_zero(model, family, seed):
    mesh = shape(family, seed)
    scene = latent_scene(model, make_setup(mesh))
    np.testing.assert_allclose(scene.decode_metres(np.zeros(scene.dims)), mesh.vertices, atol=1e-9 * diagonal(mesh))
    assert float(torch.abs(scene.q0).max()) < 1e-9


@pytest.mark.parametrize("family,seed", SOLIDS + (("sheet", 0),))
def test_basis_is_mass_orthonormal(model, family, seed):
    scene = latent_scene(model, make_setup(shape(family, seed)))
    U = scene.sub.node_basis
    M = np.einsum("n,nia,nib->ab", scene.sub.node_mass, U, U)
    np.testing.assert_allclose(M, np.eye(scene.dims), atol=1e-8)


@pytest.mark.parametrize("family,seed", SOLIDS + (("sheet", 0),))
def test_rigid_motions_are_exact_and_cost_no_energy(model, family, seed):
    mesh = shape(family, seed)
    scene = latent_scene(model, make_setup(mesh))
    sub = scene.sub
    R = rotation(0.9, [1.0, 2.0, 0.5])
    shift = np.array([0.3, -0.2, 1.0]) / sub.norm.scale
    centre = sub.rest.mean(0)
    # exactly in the subspace: the rigid displacement of the nodes, projected (the basis is mass-orthonormal)
    u = (sub.nodes - centre) @ R.T + centre + shift - sub.nodes
    q = torch.as_tensor(np.einsum("n,nid,ni->d", sub.node_mass, sub.node_basis, u), dtype=DTYPE)
    moved = (mesh.vertices - mesh.vertices.mean(0)) @ R.T + mesh.vertices.mean(0) + shift * sub.norm.scale
    np.testing.assert_allclose(scene.decode_metres(q), moved, atol=1e-9 * diagonal(mesh))
    e = elastic(q, None, scene)
    assert abs(float(e.energy)) < 1e-12 * scene.w0sq
    # rounding: a sheet's gradient at a rigid motion measured 1.2e-9 w0^2 on one CPU and below 1e-9
    # on another; a motion the subspace does not carry exactly costs 1e-3 w0^2 and more
    assert float(torch.abs(e.grad).max()) < 1e-8 * scene.w0sq
    # and the encoder finds it from the vertices alone
    np.testing.assert_allclose(scene.decode_metres(scene.encode(sub.norm.forward(moved))), moved, atol=1e-6 * diagonal(mesh))


# --------------------------------------------------------------------------- energy

@pytest.mark.parametrize("family,seed", (("box", 1), ("sheet", 0)))
def test_elastic_energy_is_zero_at_rest_and_positive_elsewhere(model, family, seed):
    scene = latent_scene(model, make_setup(shape(family, seed)))
    zero = torch.zeros(scene.dims, dtype=DTYPE)
    assert abs(float(elastic(zero, None, scene).energy)) < 1e-12
    rng = np.random.default_rng(0)
    for _ in range(20):
        q = torch.as_tensor(rng.normal(0, 0.02, scene.dims), dtype=DTYPE)
        assert float(elastic_energy(q, scene)) > 0.0


def test_elastic_energy_refuses_an_inverted_state(model):
    scene = latent_scene(model, make_setup(shape("box", 1)))
    mirrored = scene.sub.rest * np.array([1.0, 1.0, -1.0])
    q = scene.encode(mirrored)
    assert float(elastic_energy(q, scene)) == float("inf")
    # and the barrier grows without bound on the way there
    energies = [float(elastic_energy(s * q, scene)) for s in (0.2, 0.4, 0.45, 0.49)]
    assert all(b > a for a, b in zip(energies, energies[1:])) and energies[-1] > 10 * energies[0]


@pytest.mark.parametrize("family,seed,per_sample,compression", (("box", 1, False, 1.0), ("box", 1, True, 1.0),
                                                              ("sheet", 0, False, 1.0), ("sheet", 0, False, 0.25)))
def test_step_gradient_is_the_gradient_of_the_incremental_potential(model, family, seed, per_sample, compression,
                                                                     monkeypatch):
    """`per_sample`: the damping's stiffness kept sample by sample and applied without assembling
    it, as in subspaces past `terms.REDUCED_PROJECTION_DIMS` coordinates (this sheet's).
    `compression`: a tension-field membrane (compressed edges at that share of the stiffness)."""
    if per_sample:
        monkeypatch.setattr("engine.learned.terms.REDUCED_PROJECTION_DIMS", 0)
    monkeypatch.setattr(model.energy, "cloth_compression", compression)
    mesh = shape(family, seed)
    setup = make_setup(mesh, frames=4, floor={"z": float(mesh.vertices[:, 2].min()) + 0.05 * diagonal(mesh)},
                       pins=[{"select": {"box": {"min": [0, 0, 0], "max": [0.2, 1, 1]}}}],
                       material={"damping": 0.01})
    scene = latent_scene(model, setup)
    rng = np.random.default_rng(1)
    q_n = torch.as_tensor(rng.normal(0, 0.002, scene.dims), dtype=DTYPE)
    qd_n = torch.as_tensor(rng.normal(0, 0.05, scene.dims), dtype=DTYPE)
    ctx = StepContext.build(scene, 1, q_n, qd_n, 1.0 / 48)
    q = (q_n + torch.as_tensor(rng.normal(0, 0.002, scene.dims), dtype=DTYPE)).requires_grad_(True)
    energy = total_energy(q, ctx)
    (auto,) = torch.autograd.grad(energy, q)
    terms = total(q.detach(), ctx)
    np.testing.assert_allclose(terms.grad.numpy(), auto.numpy(), rtol=1e-6, atol=1e-8 * float(auto.abs().max()))
    assert float(terms.energy) == pytest.approx(float(energy), rel=1e-10)
    # the exact Hessian is the Hessian of the incremental potential (the floor is piecewise
    # quadratic: its Gauss-Newton Hessian is exact away from the contact switch), but for friction,
    # whose term gives its majorizer: never less curvature than the friction potential's own
    exact = torch.autograd.functional.hessian(lambda x: total_energy(x, ctx), q.detach())
    slip = friction(q.detach(), ctx)
    assert slip is not None                     # the floor 5 % of the diagonal above the lowest vertex
    slip_exact = torch.autograd.functional.hessian(lambda x: friction(x, ctx, need_hess=False).energy, q.detach())
    assert float(torch.linalg.eigvalsh(slip.hess - slip_exact).min()) >= -1e-9 * float(slip_exact.abs().max())
    exact = exact - slip_exact + slip.hess
    np.testing.assert_allclose(terms.hess.numpy(), exact.numpy(), rtol=1e-6, atol=1e-7 * float(exact.abs().max()))
    ctx = replace(ctx, exact_hessian=False)   # what Newton falls back to where the exact one is not positive definite
    assert float(torch.linalg.eigvalsh(total(q.detach(), ctx).hess).min()) > 0.0
    assert (ctx.damping.blocks is not None) == (per_sample or family == "sheet")


def test_the_floor_is_felt_at_every_vertex_below_it_by_a_scene_that_has_felt_it_before(model):
    """The floor's penalty (`terms.floor_contact`) over the vertices a scene finds that may touch
    it (`LatentScene.floor_vertices`, which keeps the last set it found) is the law over every
    vertex of the mesh: 1/2 sum_v k_v min(z_v - floor, 0)^2 with k_v = m_v FLOOR_OMEGA2, its
    gradient, and its Hessian sum k_v V_z,v^T V_z,v over the vertices below. A scene that found
    other vertices before feels it exactly as a fresh one does."""
    mesh = shape("box", 1)
    setup = make_setup(mesh, frames=4, floor={"z": float(mesh.vertices[:, 2].min()) + 0.05 * diagonal(mesh)})
    used = latent_scene(model, setup)
    rng = np.random.default_rng(2)
    starts = [torch.as_tensor(rng.normal(0, 0.002, used.dims), dtype=DTYPE) for _ in range(2)]
    deep = starts[1] - 0.02 * used.f_gravity / float(torch.linalg.norm(used.f_gravity))   # pressed into the floor
    steps = [StepContext.build(used, 1, q_n, torch.zeros_like(q_n), 1.0 / 48) for q_n in starts]
    Vz, rest_z = used.V[:, 2, :], torch.as_tensor(used.sub.rest[:, 2], dtype=DTYPE)
    k = torch.as_tensor(used.vertex_mass, dtype=DTYPE) * used.floor_k
    for ctx, q in ((steps[0], deep), (steps[1], starts[1]), (steps[1], deep), (steps[0], starts[0])):
        fresh = latent_scene(model, setup)
        felt = [floor_contact(q, c) for c in (ctx, StepContext.build(fresh, 1, ctx.q_n, ctx.qd_n, 1.0 / 48))]
        assert float(felt[0].energy) == float(felt[1].energy)
        assert torch.equal(felt[0].grad, felt[1].grad) and torch.equal(felt[0].hess, felt[1].hess)
        pen = torch.clamp(rest_z + Vz @ q - used.floor, max=0.0)
        assert int((pen < 0).sum()) > 0
        assert float(felt[0].energy) == pytest.approx(float(0.5 * torch.dot(k * pen, pen)), rel=1e-12)
        grad, H = Vz.T @ (k * pen), Vz.T @ ((k * (pen < 0))[:, None] * Vz)
        np.testing.assert_allclose(felt[0].grad.numpy(), grad.numpy(), rtol=1e-10, atol=1e-12 * float(grad.abs().max()))
        np.testing.assert_allclose(felt[0].hess.numpy(), H.numpy(), rtol=1e-10, atol=1e-12 * float(H.abs().max()))


def test_a_sheet_decodes_by_blending_its_handles_as_its_basis_says(engine):
    """A sheet's frames are decoded by blending its handles' affine maps (`runtime.handle_blend`),
    not through its vertices x coordinates basis: the same positions (without the full-space
    layer, whose frames are its own)."""
    mesh = shape("sheet", 0)
    setup = make_setup(mesh, frames=6, gravity=[0.0, 0.0, -9.81],
                       pins=[{"select": {"box": {"min": [0, 0, 0], "max": [0.1, 1, 1]}}}])
    run = engine.prepare(setup, sheet_layer="off")
    assert run._blend is not None
    frames = run.bake()
    latents = [q for q, _ in run.latent_frames()]
    moved = np.abs(frames[-1] - frames[0]).max()
    assert moved > 1e-3 * diagonal(mesh)
    for f in range(1, len(frames)):
        np.testing.assert_allclose(frames[f], run.scene.decode_metres(latents[f]), atol=1e-6 * diagonal(mesh))


def test_a_hundred_times_the_force_never_inverts_a_sample(model):
    """A training-range poke (300 m/s^2 at most) and squeeze (60 m/s^2) made 100x stronger: the
    latent state stays finite and every cubature sample keeps J > 0 (the guard may still stop such
    a run for its volume; here the latent states are read directly)."""
    mesh = make_sample("jelly")
    for force in ({"select": {"sphere": {"center": [0.5, 0.5, 1.0], "radius": 0.4}}, "accel": [0, 0, -30000.0],
                   "profile": {"type": "impulse", "start": 1}},
                  {"select": {"box": {"min": [0, 0, 0.75], "max": [1, 1, 1]}}, "accel": [0, 0, -6000.0]}):
        setup = make_setup(mesh, frames=10, material={"preset": "jelly"}, floor={"z": float(mesh.vertices[:, 2].min())},
                           forces=[force])
        run = NeurokRun(model, setup)
        for q, qd in run.latent_frames():
            assert bool(torch.isfinite(q).all()) and bool(torch.isfinite(qd).all())
            F = run.scene.local(q).reshape(-1, 3, 3)
            assert float(torch.linalg.det(F).min()) > 0.0


# --------------------------------------------------------------------------- sliders

def _settled_sag(model, mesh, stiffness, density, budget=240):
    """Mean displacement once it changes by less than 0.2 % over a frame (checked from frame 40,
    within a budget of frames: how fast the last digits settle depends on the CPU's rounding)."""
    setup = make_setup(mesh, frames=budget, material={"stiffness": stiffness, "density": density, "damping": 0.02,
                                                      "air_damping": 5.0},
                       pins=[{"select": {"box": {"min": [0, 0, 0], "max": [0.15, 1, 1]}}}])
    sag = []
    for t, x in NeurokRun(model, setup).frames():
        sag.append(float(np.linalg.norm(x - setup.x0, axis=1).mean()) / diagonal(mesh))
        if t >= 40 and abs(sag[-1] - sag[-2]) < 2e-3 * sag[-1]:
            return sag[-1]
    raise AssertionError(f"not settled in {budget} frames (last change {abs(sag[-1] - sag[-2]) / sag[-1]:.2%})")


@pytest.mark.parametrize("family,seed,stiffness", (("box", 1, 4e5), ("sphere", 2, 4e5)))
def test_doubling_stiffness_halves_static_sag_and_doubling_density_doubles_it(model, family, seed, stiffness):
    mesh = shape(family, seed)
    base = _settled_sag(model, mesh, stiffness, 1000.0)
    assert 1e-4 < base < 0.1, "small deflection regime"
    stiffer = _settled_sag(model, mesh, 2 * stiffness, 1000.0)
    heavier = _settled_sag(model, mesh, stiffness, 2000.0)
    assert base / stiffer == pytest.approx(2.0, rel=0.1)
    assert heavier / base == pytest.approx(2.0, rel=0.1)


@pytest.mark.parametrize("integrator", ("backward_euler", "implicit_midpoint"))
def test_free_fall_is_rigid_and_independent_of_density(model, integrator):
    mesh = shape("box", 1)
    frames, dt = 25, 1.0 / 24.0
    runs = []
    for density in (1000.0, 2000.0):
        setup = make_setup(mesh, frames=frames, material={"density": density, "damping": 0.0, "air_damping": 0.0})
        run = NeurokRun(model, setup, integrator=integrator)
        runs.append(run.bake())
    light, heavy = runs
    # the same to 1e-6 of the size, or to a few float32 steps at the 5 m the body has fallen
    assert np.abs(light - heavy).max() < 1e-6 * diagonal(mesh) + 4 * np.spacing(np.float32(np.abs(light).max()))
    drop = com(run.scene, light) - com(run.scene, light[0])
    t = np.arange(frames) * dt
    h = dt / 2
    expected = -0.5 * G * t ** 2 if integrator == "implicit_midpoint" else -0.5 * G * t * (t + h)
    np.testing.assert_allclose(drop[1:, 2], expected[1:], rtol=1e-2)
    assert np.abs(drop[:, :2]).max() < 1e-6 * diagonal(mesh)
    assert np.abs(light - light[0] - drop[:, None]).max() < 1e-4 * diagonal(mesh)


# --------------------------------------------------------------------------- resolution invariance

@pytest.mark.parametrize("family,seed", (("sphere", 2), ("box", 1), ("sheet", 0)))
def test_two_resolutions_of_a_shape_swing_alike(model, family, seed):
    """A body pinned at one side and pushed sideways: the centre-of-mass path does not depend
    on how finely the shape is meshed."""
    paths, moved = [], []
    for vertices in (300, 1200):
        mesh = shape(family, seed, vertices)
        setup = make_setup(mesh, frames=25, pins=[{"select": {"box": {"min": [0, 0, 0], "max": [0.2, 1, 1]}}}],
                           initial={"velocity": [0.0, 0.3, 0.0]})
        run = NeurokRun(model, setup)
        xs = run.bake()
        c = com(run.scene, xs)
        paths.append((c - c[0]) / diagonal(mesh))
        moved.append(np.abs(paths[-1]).max())
    coarse, fine = paths
    assert min(moved) > 1e-3
    assert np.abs(coarse - fine).max() < 0.25 * max(moved)


# --------------------------------------------------------------------------- energy over time

def _latent_energies(model, integrator, frames=101):
    """Energy 1/2 |q'|^2 + V(q) per frame: no damping, gravity, forces or floor; the body
    starts with a stretching and spinning velocity (2 substeps per frame: 200 steps)."""
    mesh = shape("box", 1)
    setup = make_setup(mesh, frames=frames, material={"preset": "jelly", "damping": 0.0, "air_damping": 0.0},
                       gravity=[0.0, 0.0, 0.0])
    centred = setup.rest - setup.rest.mean(axis=0)
    setup.v0 = 2.0 * centred * np.array([1.0, -0.5, 0.3]) + np.cross([0.0, 0.0, 2.0], centred)
    run = NeurokRun(model, setup, integrator=integrator)
    energies, strain = [], []
    for q, qd in run.latent_frames():
        v = float(elastic_energy(q, run.scene))
        energies.append(0.5 * float(qd @ qd) + v)
        strain.append(v)
    return np.asarray(energies), np.asarray(strain)


def test_implicit_midpoint_keeps_energy(model):
    energies, strain = _latent_energies(model, "implicit_midpoint")
    assert strain.max() > 0.05 * energies[0], "the body must deform, not just drift"
    assert np.abs(energies / energies[0] - 1.0).max() < 0.02


def test_backward_euler_never_gains_energy(model):
    energies, _ = _latent_energies(model, "backward_euler", frames=41)
    assert np.diff(energies).max() <= 1e-6 * energies[0]
    assert energies[-1] < 0.99 * energies[0]


# --------------------------------------------------------------------------- the step guard

def _guard_setup(mesh, frames=8):
    return make_setup(mesh, frames=frames, material={"preset": "jelly"},
                      pins=[{"select": {"box": {"min": [0, 0, 0], "max": [0.2, 1, 1]}}}])


def test_a_step_that_gives_nan_once_is_retried_with_substeps(model):
    mesh = shape("box", 1)
    run = NeurokRun(model, _guard_setup(mesh))
    real, calls = run.scene.forcing, {}

    def flaky(frame):
        calls[frame] = calls.get(frame, 0) + 1
        f = real(frame)
        return f * float("nan") if frame == 3 and calls[frame] == 1 else f

    run.scene.forcing = flaky
    xs = run.bake()
    assert np.all(np.isfinite(xs))
    assert calls[3] > calls[2], "the failed step was redone in smaller steps"
    reference = NeurokRun(model, _guard_setup(mesh)).bake()
    assert np.abs(xs - reference).max() < 0.02 * diagonal(mesh)   # same motion, finer steps


def test_a_step_that_stays_nan_raises_simulation_fault_with_the_good_frames(model):
    mesh = shape("box", 1)
    run = NeurokRun(model, _guard_setup(mesh))
    real = run.scene.forcing
    run.scene.forcing = lambda frame: real(frame) * float("nan") if frame >= 4 else real(frame)
    done = []
    with pytest.raises(SimulationFault) as info:
        run.bake(progress=lambda d, total: done.append(d))
    fault = info.value
    assert fault.frame == 5
    assert fault.positions.shape == (5, len(mesh.vertices), 3) and np.all(np.isfinite(fault.positions))
    np.testing.assert_array_equal(fault.positions[0], np.asarray(mesh.vertices, np.float32))
    assert done[-1] == 5
    assert "frame 5" in str(fault) and "\n" not in str(fault)



# --------------------------------------------------------------------------- posing

def test_sample_pose_is_finite_seeded_and_keeps_the_centre_of_mass(engine):
    mesh = make_sample("soft_toy")
    setup = make_setup(mesh)
    a, b, a2 = engine.sample_pose(setup, seed=1), engine.sample_pose(setup, seed=2), engine.sample_pose(setup, seed=1)
    assert a.shape == (len(mesh.vertices), 3) and a.dtype == np.float32 and np.all(np.isfinite(a))
    np.testing.assert_array_equal(a, a2)
    diag = diagonal(mesh)
    assert np.abs(a - b).max() > 1e-4 * diag
    assert np.abs(a - mesh.vertices).max() > 1e-4 * diag              # a deformation, not the rest shape
    sc = latent_scene(engine.model, setup)
    np.testing.assert_allclose(com(sc, a), com(sc, mesh.vertices), atol=1e-3 * diag)  # no drift
    cold = engine.sample_pose(setup, seed=1, temperature=0.0)
    assert np.abs(cold - mesh.vertices).max() < 1e-5 * diag
    half = engine.sample_pose(setup, seed=1, temperature=0.5)   # temperature scales the same draw
    np.testing.assert_allclose(half - mesh.vertices, 0.5 * (a - mesh.vertices), atol=1e-4 * diag)


def test_solve_ik_moves_the_handles_towards_their_targets(engine):
    mesh = shape("box", 1, 300)
    setup = make_setup(mesh)
    diag = diagonal(mesh)
    order = np.argsort(mesh.vertices[:, 2])
    bottom, top = order[:4], order[-4:]
    # hold the bottom where it is and drag the top sideways: a bend, not a rigid shift
    handles = np.concatenate([bottom, top])
    targets = np.concatenate([mesh.vertices[bottom], mesh.vertices[top] + np.array([0.1, 0.0, 0.0]) * diag])
    pose = engine.solve_ik(setup, handles, targets)
    assert pose.shape == mesh.vertices.shape and pose.dtype == np.float32 and np.all(np.isfinite(pose))
    before = np.linalg.norm(mesh.vertices[handles] - targets, axis=1).mean()
    after = np.linalg.norm(pose[handles] - targets, axis=1).mean()
    assert after < 0.1 * before
    top_moved = np.linalg.norm(pose[top] - mesh.vertices[top], axis=1).mean()
    bottom_moved = np.linalg.norm(pose[bottom] - mesh.vertices[bottom], axis=1).mean()
    assert top_moved > 0.05 * diag and bottom_moved < 0.1 * top_moved
    assert np.abs(pose - mesh.vertices).max() < 0.5 * diag           # the rest follows, nothing flies off
    # a rigid drag of every handle is a pure translation: reached exactly, the shape unchanged
    shift = np.array([0.0, 0.2, -0.1]) * diag
    moved = engine.solve_ik(setup, handles, mesh.vertices[handles] + shift)
    np.testing.assert_allclose(moved - mesh.vertices, np.broadcast_to(shift, moved.shape), atol=1e-4 * diag)


# --------------------------------------------------------------------------- out-of-distribution indicator

def test_ood_flags_a_force_the_basis_cannot_express(model):
    mesh = shape("box", 1)
    n = len(mesh.vertices)
    even = (np.arange(n) % 2 == 0).astype(float)
    uniform = make_setup(mesh, forces=[{"select": {"box": {"min": [0, 0, 0], "max": [1, 1, 1]}}, "accel": [0, 3.0, 0]}])
    checker = make_setup(mesh)
    constant = {"type": "constant"}
    checker.force_terms = [(even, np.array([0, 3.0, 0]), constant), (1.0 - even, np.array([0, -3.0, 0]), constant)]
    calm, wild = NeurokRun(model, uniform).ood, NeurokRun(model, checker).ood
    for report in (calm, wild):
        assert {"score", "level", "message", "parts"} <= set(report)
        assert report["level"] in ("ok", "caution", "out_of_range") and isinstance(report["message"], str)
    assert calm["parts"]["force"] < 0.05 and calm["level"] == "ok"
    assert wild["parts"]["force"] > calm["parts"]["force"] + 0.5
    assert wild["level"] != "ok" and "force" in wild["message"]


# --------------------------------------------------------------------------- checkpoints

def test_checkpoint_round_trip_gives_identical_results(model, checkpoint, engine):
    loaded, meta = load_checkpoint(checkpoint)
    assert meta == {"note": "untrained"}
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    mesh = shape("sphere", 2)
    setup = make_setup(mesh, frames=6, pins=[{"select": {"box": {"min": [0, 0, 0], "max": [0.2, 1, 1]}}}])
    np.testing.assert_array_equal(NeurokRun(model, setup).bake(), engine.prepare(setup).bake())


def test_a_pickled_object_in_a_checkpoint_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    bad = tmp_path / "evil.ckpt"
    torch.save({"format": CHECKPOINT_FORMAT, "config": "{}", "meta": "{}", "state": {}, "x": Payload()}, bad)
    for load in (load_checkpoint, NeurokEngine):
        with pytest.raises(FormatError) as info:
            load(bad)
        assert "\n" not in str(info.value) and "evil.ckpt" in str(info.value)
    assert not marker.exists()


def test_corrupt_and_foreign_checkpoints_give_one_line_format_errors(model, checkpoint, tmp_path):
    data = checkpoint.read_bytes()
    cases = {"truncated.ckpt": data[: len(data) // 2], "empty.ckpt": b"", "text.ckpt": b"not a checkpoint\n"}
    other = io.BytesIO()
    torch.save({"format": "someone.else/3", "weights": torch.zeros(2)}, other)
    cases["foreign.ckpt"] = other.getvalue()
    listed = io.BytesIO()
    torch.save([1, 2, 3], listed)
    cases["list.ckpt"] = listed.getvalue()
    mismatch = io.BytesIO()
    torch.save({"format": CHECKPOINT_FORMAT, "config": '{"handles": 3, "width": 8}', "meta": "{}",
                "state": {k: v for k, v in model.state_dict().items()}}, mismatch)
    cases["mismatch.ckpt"] = mismatch.getvalue()
    for name, blob in cases.items():
        path = tmp_path / name
        path.write_bytes(blob)
        with pytest.raises(FormatError) as info:
            load_checkpoint(path)
        message = str(info.value)
        assert "\n" not in message and name in message and len(message) < 300, (name, message)
    with pytest.raises(FormatError, match="someone.else/3"):
        load_checkpoint(tmp_path / "foreign.ckpt")
    with pytest.raises(FormatError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "missing.ckpt")


# --------------------------------------------------------------------------- the step's cost and its accuracy

def test_fitted_cubature_matches_full_integration():
    """The elastic samples and weights are fitted per mesh (NNLS over the body's own poses): on
    held-out poses their reduced force is within 5 % of the force integrated over every cell, and
    a rollout with them stays within 0.5 % of the diagonal of the same rollout over every cell.
    The floor's Coulomb friction is 0.3: at the default 0.5 the slammed jelly sticks a frame
    earlier in one rollout than in the other (0.79 % of the diagonal apart; 0.12 % at 0.3)."""
    from engine.learned.subspace import build_subspace
    torch.manual_seed(0)
    model = NeurokModel().eval()
    mesh = make_sample("jelly")
    force = {"select": {"sphere": {"center": [0.5, 0.5, 1.0], "radius": 0.4}}, "accel": [0, 0, -300.0],
             "profile": {"type": "impulse", "start": 1}}
    setup = make_setup(mesh, frames=16, material={"preset": "jelly"},
                       floor={"z": float(mesh.vertices[:, 2].min()), "friction": 0.3}, forces=[force])
    cfg = model.cfg
    built = {every: build_subspace(setup.rest, setup.faces, "solid", cfg.handles, cfg.lattice_cells, cfg.samples,
                                   cfg.contact_samples, model.weight_field, full_integration=every)
             for every in (False, True)}
    fitted = NeurokRun(model, setup, subspace=built[False])   # a lattice this small takes every cell by default:
    assert fitted.scene.sub.cubature_error < 0.05            # the fitted samples are a big mesh's
    everything = built[True]
    assert len(fitted.scene.weights) < len(everything.cell_volume)
    full = NeurokRun(model, setup, subspace=everything)     # decoded through its own basis too
    a, b = fitted.bake(), full.bake()
    rms = float(np.sqrt(np.mean(np.sum((a - b) ** 2, axis=-1))))
    assert rms < 0.005 * diagonal(mesh)


def test_the_cubature_fit_weights_are_the_least_squares_ones_of_the_samples_it_keeps():
    """The greedy fit refits its weights on the chosen samples' own small system (their QR), which
    must give what non-negative least squares on the whole tall system gives: on a fit with more
    samples than it compresses (a sheet's 2,000-4,000 triangles), the weights it returns are
    scipy's NNLS on those columns, and they fit the target within the tolerance."""
    import scipy.optimize
    from engine.learned.cubature import COMPRESS_COLUMNS, greedy_nnls
    rng = np.random.default_rng(0)
    columns = COMPRESS_COLUMNS + 300
    A = np.abs(rng.normal(size=(1500, columns)))
    b = A[:, rng.choice(columns, 40, replace=False)] @ rng.uniform(0.5, 2.0, 40)
    chosen, weights = greedy_nnls(A, b, tolerance=0.02, cap=200)
    assert np.all(weights > 0)
    assert np.linalg.norm(A[:, chosen] @ weights - b) <= 0.02 * np.linalg.norm(b)
    assert weights == pytest.approx(scipy.optimize.nnls(A[:, chosen], b)[0], rel=1e-8, abs=1e-10)


def test_a_hanging_bar_stretches_as_the_reference_says():
    """Pa means Pa: Blender's 0.1 x 0.1 x 1 m bar (E = 100 kPa, rho = 1000, nu = 0.3) hanging from its
    top face, with the classical density (an untrained model) in its subspace with the fitted
    cubature: within 5 % of the reference simulator's static stretch (51.0 mm) and 10 % of
    rho g L^2 / 2E (49.1 mm)."""
    from engine.evaluation.physical import bar_stretch, bar_theory, hanging_bar
    from engine.reference.simulator import ReferenceSimulator
    torch.manual_seed(0)
    model = NeurokModel().eval()
    setup = hanging_bar()
    learned = bar_stretch(setup, NeurokRun(model, setup).bake()[-1])
    reference = bar_stretch(setup, ReferenceSimulator(setup).solve_static())
    assert learned == pytest.approx(reference, rel=0.05)
    assert learned == pytest.approx(bar_theory(), rel=0.10)


def test_stiffness_damping_lets_a_spinning_body_spin_as_the_reference_does(model):
    """Rayleigh damping beta K charges motion that stretches; K is taken at each step's own start,
    as in the reference, so a body spinning freely (no gravity, no floor, no air damping) keeps
    its spin about as well as the reference's. A K from the frame's start had the rotation half
    a frame old and damped the spin twice as hard (kinetic energy after 12 frames 0.18x the
    reference's, now 0.49x: both lose most of it, a property of Rayleigh damping in a linear
    displacement space)."""
    from engine.reference.simulator import ReferenceSimulator
    mesh = make_sample("jelly")
    setup = make_setup(mesh, frames=12, material={"preset": "rubber", "damping": 0.02, "air_damping": 0.0},
                       gravity=[0.0, 0.0, 0.0])
    setup.v0 = np.cross([0.0, 0.0, 6.0], mesh.vertices - mesh.vertices.mean(axis=0))     # 6 rad/s about z

    def kinetic_kept(frames):
        ke = [float(np.sum((b - a) ** 2)) for a, b in ((frames[0], frames[1]), (frames[-2], frames[-1]))]
        return ke[1] / ke[0]

    learned = kinetic_kept(NeurokRun(model, setup).bake())
    reference = kinetic_kept(np.stack(list(ReferenceSimulator(setup).iter_frames())))
    assert 0.35 * reference < learned < 1.5 * reference, (learned, reference)


def test_the_run_time_damps_as_the_training_data_does():
    """The matched step damps as backward Euler at the step the training data was made with; the
    learned engine may not import training (layers), so the two constants are checked here."""
    from engine.learned.runtime import DATA_STEP
    from engine.training.generate import GENERATOR_SUBSTEP
    assert DATA_STEP == GENERATOR_SUBSTEP


def test_substeps_per_frame_ignore_the_rounding_of_the_frame_time():
    from engine.core.physics import substeps_per_frame
    from engine.learned.runtime import SUBSTEP
    assert substeps_per_frame(1.0 / 24.0, SUBSTEP) == 2 and substeps_per_frame(0.041667, SUBSTEP) == 2  # 6 digits
    assert substeps_per_frame(1.0 / 12.0, SUBSTEP) == 4 and substeps_per_frame(0.05, SUBSTEP) == 3
    assert substeps_per_frame(1.0 / 96.0, SUBSTEP) == 1


def test_the_reference_steps_a_frame_as_the_learned_engine_does():
    """The bundled scenes write 24 fps as 0.041667 s: the reference takes the two steps of 1/48 s a
    frame the learned engine takes (it took three, and the flag's ground truth moved 0.17x hold-still
    with the count), and a kept answer's stamp records the step taken, so answers made at three went
    stale while those of whole-step frame times kept their stamps."""
    from pathlib import Path
    from engine.core.scene import read_scene
    from engine.evaluation.physics_cache import kept_stamp, scene_job
    from engine.learned.runtime import SUBSTEP, run_config
    from engine.reference.simulator import ReferenceSimulator
    from engine.training.generate import GENERATOR_SUBSTEP
    mesh = make_sample("flag")
    scene = read_scene(str(Path(__file__).resolve().parents[1] / "assets/scenes/flag_wind.json"))
    assert scene["dt"] == 0.041667
    setup = setup_from_scene(mesh, dict(scene, frames=2))
    assert ReferenceSimulator(setup, substep=GENERATOR_SUBSTEP).substeps == 2
    assert run_config(setup, "cloth", "matched", "auto").substeps == 2 and GENERATOR_SUBSTEP == SUBSTEP
    stamp = kept_stamp(scene_job("reference", mesh, scene, substep=GENERATOR_SUBSTEP))
    assert stamp["settings"]["substep"] == 0.041667 / 2
    whole = kept_stamp(scene_job("reference", mesh, dict(scene, dt=1.0 / 24.0), substep=GENERATOR_SUBSTEP))
    assert whole["settings"]["substep"] == GENERATOR_SUBSTEP


def test_newton_says_when_it_stops_at_its_iteration_cap(model):
    """A step that has not converged when the iterations run out says so (the run time then
    retries it in smaller steps), instead of handing out an unconverged state as converged.
    Friction's normal forces are taken at the step's start, where the jelly only touches the
    floor: the first solve is frictionless (the crushed jelly spreads freely, and 200 iterations
    do not converge), the update with the forces at its end converges (100 iterations)."""
    from engine.learned.integrators import minimize, minimize_with_friction
    mesh = make_sample("jelly")
    setup = make_setup(mesh, frames=4, material={"preset": "jelly"}, floor={"z": float(mesh.vertices[:, 2].min())},
                       forces=[{"select": {"box": {"min": [0, 0, 0.75], "max": [1, 1, 1]}}, "accel": [0, 0, -6000.0]}])
    scene = latent_scene(model, setup)
    with torch.no_grad():
        ctx = StepContext.build(scene, 0, scene.q0, scene.qd0, 1.0 / 48)
        capped = minimize(ctx, scene.q0, iterations=1).converged
        ctx = StepContext.build(scene, 0, scene.q0, scene.qd0, 1.0 / 48)
        converged = minimize_with_friction(ctx, scene.q0, iterations=100).converged
    assert not capped and converged
