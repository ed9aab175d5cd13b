"""The learned engine's structure and physics, checked on an untrained model (fixed seed).

Everything here follows from how the model is built, not from training: q = 0 is the rest
shape, the basis is mass-orthonormal with exact translation modes, the elastic potential is
non-negative and blind to translation, the stiffness/density sliders act as physics says, the
implicit midpoint integrator keeps energy, the step guard turns a NaN into `SimulationFault`,
and checkpoints load without running code. Small meshes (a few hundred vertices) keep it fast.
"""
from __future__ import annotations

import copy
import io
import os

import numpy as np
import pytest
import torch

from engine.learned import fastpath
from engine.api import SimulationFault
from engine.learned.checkpoint import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint
from engine.learned.dynamics import DTYPE, decode, encode, potential_terms, step_energy, step_terms
from engine.core.formats import FormatError
from engine.core.geometry import vertex_mass_fractions
from engine.learned.model import TRANSLATION_MODES, NeurokModel
from engine.learned.latent_scene import LatentScene
from engine.learned.runtime import NeurokEngine, NeurokRun
from engine.core.scene import SCENE_FORMAT, setup_from_scene
from engine.training.shapes import make_sample, make_shape

G = 9.81
SOLIDS = (("box", 1), ("sphere", 2), ("blob", 3))


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


def mass_matrix(scene):
    return torch.einsum("n,nia,nja->ij", scene.mt.mu, scene.red.phi, scene.red.phi)


def vvalue(model, scene, q):
    return model.potential(torch.as_tensor(np.asarray(q), dtype=DTYPE), scene.red.s, scene.red.material, scene.red.B)


def com(xs, mesh):
    """Mass-weighted centre of mass per frame (the engine's own lumping)."""
    return np.einsum("n,...na->...a", vertex_mass_fractions(mesh.vertices, mesh.faces), xs)


# --------------------------------------------------------------------------- decoder and basis

@pytest.mark.parametrize("family,seed", SOLIDS + (("sheet", 0),))
def test_zero_latent_is_the_rest_shape_and_rest_encodes_to_zero(model, family, seed):
    mesh = shape(family, seed)
    scene = latent_scene(model, make_setup(mesh))
    d = model.cfg.latent
    x = scene.decode_metres(torch.zeros(d, dtype=DTYPE))
    assert np.abs(x - mesh.vertices).max() <= 1e-5 * diagonal(mesh)
    assert float(scene.q0.abs().max()) < 1e-6                       # x0 = rest encodes to q = 0
    # a rigidly shifted copy encodes to a pure translation of (shift / diagonal)
    shift = np.array([0.3, -0.2, 0.5]) * diagonal(mesh)
    q = encode(scene.red, scene.mt, torch.as_tensor(scene.mt.norm.forward(mesh.vertices + shift), dtype=DTYPE))
    np.testing.assert_allclose(q[:3].numpy(), shift / scene.scale, atol=1e-6)
    assert float(q[3:].abs().max()) < 1e-6


@pytest.mark.parametrize("family,seed", SOLIDS)
def test_basis_is_mass_orthonormal_and_starts_with_translations(model, family, seed):
    scene = latent_scene(model, make_setup(shape(family, seed)))
    M = mass_matrix(scene)
    assert float((M - torch.eye(M.shape[0], dtype=M.dtype)).abs().max()) < 1e-4
    phi = scene.red.phi
    for k in range(TRANSLATION_MODES):      # mode k moves every vertex by the same e_k
        target = torch.zeros(3, dtype=phi.dtype)
        target[k] = 1.0
        assert float((phi[:, k, :] - target).abs().max()) < 1e-5
    # the encoder is the exact projection: encode(decode(q)) = q
    q = torch.as_tensor(np.random.default_rng(seed).normal(0.0, 0.05, model.cfg.latent), dtype=DTYPE)
    back = encode(scene.red, scene.mt, decode(scene.red, scene.mt, q))
    assert float((back - q).abs().max()) < 1e-4 * float(q.abs().max())


def test_flat_sheet_basis_is_orthonormal_on_its_live_modes(model):
    mesh = shape("sheet", 0)
    scene = latent_scene(model, make_setup(mesh))
    M = mass_matrix(scene)
    live = torch.diagonal(M) > 0.5
    # a flat sheet has no thickness: the affine modes X_n e_k (n its normal) vanish; the rest
    # stays orthonormal and the dead modes carry no mass
    assert 3 <= int((~live).sum()) <= 3 + 1 and bool(live[:TRANSLATION_MODES].all())
    eye = torch.eye(int(live.sum()), dtype=M.dtype)
    assert float((M[live][:, live] - eye).abs().max()) < 1e-4
    assert float(M[~live].abs().max()) < 1e-6


# --------------------------------------------------------------------------- potential

@pytest.fixture(scope="module")
def box_scene(model):
    return latent_scene(model, make_setup(shape("box", 1)))


def test_elastic_potential_is_zero_at_rest_nonnegative_and_blind_to_translation(model, box_scene):
    scene, d = box_scene, model.cfg.latent
    zero = torch.zeros(d, dtype=DTYPE)
    assert float(vvalue(model, scene, zero)) == 0.0
    ctx = {"s": scene.red.s, "mat": scene.red.material, "B": scene.red.B}
    v0, g0, _ = potential_terms(model.potential, zero, ctx)
    assert abs(float(v0)) < 1e-20 and float(g0.abs().max()) < 1e-12
    rng = np.random.default_rng(0)
    for scale in (1e-3, 0.05, 0.5, 3.0):
        for _ in range(5):
            q = rng.normal(0.0, scale, d)
            v = float(vvalue(model, scene, q))
            assert v > 0.0
            for k in range(TRANSLATION_MODES):
                moved = q.copy()
                moved[k] += rng.normal(0.0, 2.0)
                assert float(vvalue(model, scene, moved)) == pytest.approx(v, rel=1e-10, abs=1e-14)


def test_potential_terms_match_autograd(model, box_scene):
    scene, d = box_scene, model.cfg.latent
    ctx = {"s": scene.red.s, "mat": scene.red.material, "B": scene.red.B}
    v = lambda q: model.potential(q, scene.red.s, scene.red.material, scene.red.B)  # noqa: E731
    rng = np.random.default_rng(1)
    for _ in range(3):
        q = torch.as_tensor(rng.normal(0.0, 0.2, d), dtype=DTYPE)
        value, grad, hess = potential_terms(model.potential, q, ctx)
        assert float(value) == pytest.approx(float(v(q)), rel=1e-10)
        torch.testing.assert_close(grad, torch.func.grad(v)(q), rtol=1e-7, atol=1e-10)
        assert float(torch.linalg.eigvalsh(hess).min()) > -1e-9       # Gauss-Newton: PSD
        assert float(hess[:TRANSLATION_MODES].abs().max()) == 0.0
    # at q = 0 the residual vanishes, so Gauss-Newton is the exact Hessian
    zero = torch.zeros(d, dtype=DTYPE)
    torch.testing.assert_close(potential_terms(model.potential, zero, ctx)[2], torch.func.hessian(v)(zero),
                               rtol=1e-6, atol=1e-9)


def _step_context(model, mesh):
    """A step with everything switched on: pins, a painted force, damping, floor contact."""
    setup = make_setup(mesh, frames=4, material={"damping": 0.01, "air_damping": 0.3},
                       pins=[{"select": {"box": {"min": [0, 0, 0], "max": [0.2, 1, 1]}}}],
                       forces=[{"select": {"box": {"min": [0.5, 0, 0], "max": [1, 1, 1]}}, "accel": [1.0, 2.0, 0.0]}],
                       floor={"z": float(mesh.vertices[:, 2].mean())})
    scene = latent_scene(model, setup)
    rng = np.random.default_rng(5)
    d = model.cfg.latent
    q_n = torch.as_tensor(rng.normal(0, 0.02, d), dtype=DTYPE)
    qd_n = torch.as_tensor(rng.normal(0, 0.2, d), dtype=DTYPE)
    with torch.no_grad():
        ctx = scene.context(1, q_n, qd_n, 1.0 / 48.0)
    assert float(ctx["contact"].sum()) > 0, "the floor must touch some contact samples"
    return scene, ctx


def test_step_gradient_matches_autograd_of_the_incremental_potential(model):
    scene, ctx = _step_context(model, shape("box", 1))
    rng = np.random.default_rng(7)
    for _ in range(3):
        q = ctx["q_n"] + torch.as_tensor(rng.normal(0, 0.01, model.cfg.latent), dtype=DTYPE)
        energy, grad, hess = step_terms(model.potential, q, ctx)
        assert float(energy) == pytest.approx(float(step_energy(model.potential, q, ctx)), rel=1e-12)
        auto = torch.func.grad(lambda x: step_energy(model.potential, x, ctx))(q)
        torch.testing.assert_close(grad, auto, rtol=1e-6, atol=1e-6 * float(auto.abs().max()))
        torch.testing.assert_close(hess, hess.T)


def test_step_hessian_is_exact_when_the_potential_is_quadratic(model):
    quadratic = copy.deepcopy(model)
    with torch.no_grad():     # g's output constant: v = 1/2 |B q_e|^2, Gauss-Newton is exact
        quadratic.potential.g[-1].weight.zero_()
    scene, ctx = _step_context(quadratic, shape("box", 1))
    q = ctx["q_n"] + torch.as_tensor(np.random.default_rng(8).normal(0, 0.01, quadratic.cfg.latent), dtype=DTYPE)
    _, grad, hess = step_terms(quadratic.potential, q, ctx)
    auto = torch.func.hessian(lambda x: step_energy(quadratic.potential, x, ctx))(q)
    torch.testing.assert_close(hess, auto, rtol=1e-6, atol=1e-6 * float(auto.abs().max()))


def test_numpy_fast_path_matches_the_torch_step(model):
    scene, ctx = _step_context(model, shape("box", 1))
    pot = fastpath.NumpyPotential(model.potential, scene.red.s, scene.red.material, scene.red.B)
    c = fastpath.prepare_contacts(fastpath.numpy_context(ctx))
    q = ctx["q_n"] + torch.as_tensor(np.random.default_rng(9).normal(0, 0.01, model.cfg.latent), dtype=DTYPE)
    e_t, g_t, H_t = step_terms(model.potential, q, ctx)
    e_n, g_n, H_n = fastpath.step_terms(pot, q.numpy().astype(np.float64), c)
    assert e_n == pytest.approx(float(e_t), rel=1e-6)
    np.testing.assert_allclose(g_n, g_t.numpy(), rtol=1e-5, atol=1e-6 * float(g_t.abs().max()))
    np.testing.assert_allclose(H_n, H_t.numpy(), rtol=1e-5, atol=1e-6 * float(H_t.abs().max()))


def test_cpu_fast_path_and_torch_path_bake_the_same(model):
    mesh = shape("box", 1)
    setup = make_setup(mesh, frames=13, material={"preset": "jelly"},
                       pins=[{"select": {"box": {"min": [0, 0, 0], "max": [0.2, 1, 1]}}}],
                       floor={"z": float(mesh.vertices[:, 2].min()) - 0.02})
    fast = NeurokRun(model, setup)
    assert fast.fast is not None, "on a CPU the run takes the numpy fast path"
    slow = NeurokRun(model, setup)
    slow.fast = None                       # force the torch step (the one CUDA runs)
    a, b = fast.bake(), slow.bake()
    assert np.abs(a - a[0]).max() > 0.01 * diagonal(mesh)      # it moved
    assert np.abs(a - b).max() < 1e-4 * diagonal(mesh)


# --------------------------------------------------------------------------- material sliders

def _settled_sag(model, mesh, stiffness, density, frames=49):
    """Mean vertex displacement (in diagonals) of a body pinned at one side, hanging under
    gravity with heavy damping, once it has settled."""
    setup = make_setup(mesh, frames=frames, material={"stiffness": stiffness, "density": density,
                                                      "damping": 0.1, "air_damping": 5.0},
                       pins=[{"select": {"box": {"min": [0, 0, 0], "max": [0.15, 1, 1]}}}])
    xs = NeurokRun(model, setup).bake()
    sag = np.linalg.norm(xs - xs[0], axis=2).mean(axis=1) / diagonal(mesh)
    assert abs(sag[-1] - sag[-2]) < 1e-3 * sag[-1], "not settled"
    assert np.all(np.isfinite(xs))
    return sag[-1]


@pytest.mark.parametrize("family,seed,stiffness", (("box", 1, 4e5), ("sphere", 2, 4e5), ("box", 1, 1e5)))
def test_doubling_stiffness_halves_static_sag_and_doubling_density_doubles_it(model, family, seed, stiffness):
    """(At 1e5 Pa the pins' own stiffness is at its absolute floor rather than following the
    material, and the sag is larger: the ratio still holds.)"""
    mesh = shape(family, seed)
    base = _settled_sag(model, mesh, stiffness, 1000.0)
    assert 1e-3 < base < 0.1, "small deflection regime"
    stiffer = _settled_sag(model, mesh, 2 * stiffness, 1000.0)
    heavier = _settled_sag(model, mesh, stiffness, 2000.0)
    assert base / stiffer == pytest.approx(2.0, rel=0.15)
    assert heavier / base == pytest.approx(2.0, rel=0.15)     # gravity load / stiffness doubles


@pytest.mark.parametrize("integrator", ("backward_euler", "implicit_midpoint"))
def test_free_fall_is_rigid_and_independent_of_density(model, integrator):
    mesh = shape("box", 1)
    frames, dt = 25, 1.0 / 24.0
    runs = []
    for density in (1000.0, 2000.0):
        setup = make_setup(mesh, frames=frames, material={"density": density, "damping": 0.0, "air_damping": 0.0})
        runs.append(NeurokRun(model, setup, integrator=integrator).bake())
    light, heavy = runs
    assert np.abs(light - heavy).max() < 1e-6 * diagonal(mesh)
    drop = com(light, mesh) - com(light[0], mesh)
    t = np.arange(frames) * dt
    h = dt / 2                                          # two latent substeps per 1/24 s frame
    expected = -0.5 * G * t ** 2 if integrator == "implicit_midpoint" else -0.5 * G * t * (t + h)  # BE: exact in discrete time
    np.testing.assert_allclose(drop[1:, 2], expected[1:], rtol=1e-2)
    np.testing.assert_allclose(drop[-1, 2], -0.5 * G * t[-1] ** 2, rtol=0.03)    # 1 s of fall, 3.6 diagonals
    assert np.abs(drop[:, :2]).max() < 1e-6 * diagonal(mesh)
    # rigid: every vertex moved with the centre of mass
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
        xs = NeurokRun(model, setup).bake()
        c = com(xs, mesh)
        paths.append((c - c[0]) / diagonal(mesh))
        moved.append(np.abs(paths[-1]).max())
    coarse, fine = paths
    assert np.abs(coarse - fine).max() < 0.02 + 0.1 * max(moved)
    if family != "sheet":   # cloth is stiff in stretch: it hardly moves; solids swing visibly
        assert min(moved) > 0.03
        assert np.abs(coarse - fine).max() < 0.2 * max(moved)


def test_free_fall_is_the_same_at_any_resolution(model):
    drops = []
    for vertices in (300, 1200):
        mesh = shape("sphere", 2, vertices)
        xs = NeurokRun(model, make_setup(mesh, frames=13)).bake()
        drops.append(com(xs, mesh) - com(xs[0], mesh))
    np.testing.assert_allclose(drops[0], drops[1], atol=1e-6)


# --------------------------------------------------------------------------- energy

def _latent_energies(model, integrator, preset="jelly", rate=2.0, frames=101):
    """Energy 1/2 |qd|^2 + w0^2 v(q) per frame: no damping, gravity, forces or floor; the body
    starts with a stretching and spinning velocity (2 substeps per frame: 200 steps)."""
    mesh = shape("box", 1)
    setup = make_setup(mesh, frames=frames, material={"preset": preset, "damping": 0.0, "air_damping": 0.0},
                       gravity=[0.0, 0.0, 0.0])
    centred = setup.rest - setup.rest.mean(axis=0)
    setup.v0 = rate * centred * np.array([1.0, -0.5, 0.3]) + np.cross([0.0, 0.0, rate], centred)
    run = NeurokRun(model, setup, integrator=integrator)
    assert run.substeps == 2
    energies, elastic = [], []
    for q, qd in run.latent_frames():
        v = run.scene.w0sq * float(vvalue(model, run.scene, q))
        energies.append(0.5 * float(np.dot(np.asarray(qd), np.asarray(qd))) + v)
        elastic.append(v)
    return np.asarray(energies), np.asarray(elastic)


def test_implicit_midpoint_keeps_energy(model):
    energies, elastic = _latent_energies(model, "implicit_midpoint")
    assert elastic.max() > 0.2 * energies[0], "the body must deform, not just drift"
    assert np.abs(energies / energies[0] - 1.0).max() < 0.01


def test_backward_euler_never_gains_energy(model):
    energies, _ = _latent_energies(model, "backward_euler")
    assert np.diff(energies).max() <= 1e-9 * energies[0]
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


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")   # the exploding step overflows on purpose
def test_a_blow_up_raises_simulation_fault_but_far_travel_does_not(model):
    mesh = shape("box", 1)
    # opposite enormous pushes on the two halves tear the body apart: a blow-up
    setup = make_setup(mesh, frames=8, forces=[
        {"select": {"box": {"min": [0.5, 0, 0], "max": [1, 1, 1]}}, "accel": [1e9, 0, 0], "profile": {"type": "constant", "start": 2}},
        {"select": {"box": {"min": [0, 0, 0], "max": [0.5, 1, 1]}}, "accel": [-1e9, 0, 0], "profile": {"type": "constant", "start": 2}}])
    with pytest.raises(SimulationFault) as info:
        NeurokRun(model, setup).bake()
    assert info.value.frame == 3 and len(info.value.positions) == 3
    # a uniform push of the same size only carries the body away rigidly: no fault
    setup = make_setup(mesh, frames=8, material={"air_damping": 0.0, "damping": 0.0},
                       forces=[{"select": {"box": {"min": [0, 0, 0], "max": [1, 1, 1]}}, "accel": [1e4, 0, 0]}])
    xs = NeurokRun(model, setup).bake()
    assert np.all(np.isfinite(xs)) and com(xs[-1], mesh)[0] - com(xs[0], mesh)[0] > 100 * diagonal(mesh)


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
    np.testing.assert_allclose(com(a, mesh), com(mesh.vertices, mesh), atol=1e-4 * diag)  # no drift
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


def test_ood_uses_training_statistics_from_the_checkpoint(model, tmp_path):
    setup = make_setup(shape("box", 1), material={"stiffness": 1e9})
    scene = latent_scene(model, setup)
    code = scene.red.s.numpy()
    meta = {"shape_code_stats": {"mean": code.tolist(), "std": (np.abs(code) + 1e-3).tolist()},
            "omega2_range": {"solid": [10.0, 1000.0]}}
    report = NeurokRun(model, setup, meta=meta).ood
    assert report["parts"]["shape"] < 0.01                        # the very shape it was trained on
    assert report["parts"]["material"] > 1.0 and report["level"] == "out_of_range"
    assert "material" in report["message"]


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
    torch.save({"format": CHECKPOINT_FORMAT, "config": '{"latent": 16}', "meta": "{}",
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
