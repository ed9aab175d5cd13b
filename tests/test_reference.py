"""Physics checks of the reference simulator (engine/reference/) against textbook results.

Run with `-s` to see the measured figures (they are quoted in docs/PHYSICS.md):
    .venv/bin/python -m pytest -q -s tests/test_reference.py
"""
import math

import numpy as np
import pytest

from engine.core.formats import Mesh, read_sequence, write_sequence
from engine.reference.simulator import ReferenceSimulator
from engine.core.scene import setup_from_scene, setup_from_sequence
from engine.training.shapes import _box_lattice, make_shape

G = 9.81
FACE = 1e-6  # thickness (normalized coordinates) of the box selecting the vertices of one face


# --------------------------------------------------------------------------- helpers

def box_mesh(size, counts=(1, 1, 1), lo=(0.0, 0.0, 0.0)) -> Mesh:
    """A closed box [lo, lo + size], each side split into counts quads (counts=(1,1,1): 8 vertices)."""
    unit, faces = _box_lattice(counts)
    return Mesh((unit + 1.0) / 2.0 * np.asarray(size, float) + np.asarray(lo, float), faces)


def grid_mesh(width, height, nx, ny, plane="xy") -> Mesh:
    """An open nx x ny vertex grid, x in [0, width], second axis in [0, height]."""
    x, y = np.meshgrid(np.linspace(0, width, nx), np.linspace(0, height, ny))
    v = np.stack([x.ravel(), y.ravel(), np.zeros(nx * ny)], axis=1)
    if plane == "xz":
        v = v[:, [0, 2, 1]]
    faces = []
    for j in range(ny - 1):
        for i in range(nx - 1):
            a, b, c, d = j * nx + i, j * nx + i + 1, (j + 1) * nx + i + 1, (j + 1) * nx + i
            faces += [(a, b, c), (a, c, d)]
    return Mesh(v, np.asarray(faces))


def scene(**kw):
    out = {"format": "neurok.scene/1"}
    out.update(kw)
    return out


def solid(E, rho, nu=0.0, damping=0.0, air=0.0):
    return {"kind": "solid", "stiffness": E, "density": rho, "poisson": nu, "damping": damping, "air_damping": air}


def face_pin(axis, side=0, strength=1.0, **extra):
    lo, hi = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
    if side == 0:
        hi[axis] = FACE
    else:
        lo[axis] = 1.0 - FACE
    return dict({"select": {"box": {"min": lo, "max": hi}}, "strength": strength}, **extra)


def frames_of(sim) -> np.ndarray:
    return np.array(list(sim.iter_frames()))


def centre_of_mass(sim, x):
    m = sim.vertex_mass
    return (m[:, None] * x).sum(axis=0) / m.sum()


def dof_centre_of_mass(sim):
    """Centre of mass of the simulated degrees of freedom (exact for the discretisation)."""
    return (sim.dof_mass[:, None] * sim.y).sum(axis=0) / sim.dof_mass.sum()


def crossing_period(signal, dt):
    """Period from the zero crossings of an oscillating signal (linear interpolation)."""
    s = np.asarray(signal)
    idx = np.nonzero(np.sign(s[:-1]) * np.sign(s[1:]) < 0)[0]
    assert len(idx) >= 3, f"only {len(idx)} zero crossings"
    t = (idx + s[idx] / (s[idx] - s[idx + 1])) * dt
    return 2.0 * float(np.mean(np.diff(t)))


def released_oscillation(mesh, material, pin, load, probe, seconds, dt=1.0 / 96.0):
    """Hold the body at its static equilibrium under a small uniform `load` (m/s^2), then
    release it (load off) and return the period of the mean displacement of `probe` vertices
    along the load."""
    frames = int(round(seconds / dt)) + 1
    setup = setup_from_scene(mesh, scene(frames=frames, dt=dt, gravity=list(load), material=material, pins=[pin]))
    sim = ReferenceSimulator(setup)
    sim.solve_static()
    setup.gravity = np.zeros(3)  # release
    direction = np.asarray(load, float) / np.linalg.norm(load)
    signal = [(x[probe] - mesh.vertices[probe]).mean(axis=0) @ direction for x in sim.iter_frames()]
    return crossing_period(signal, dt)


# --------------------------------------------------------------------------- (a) hanging bar

BAR = dict(size=(0.1, 0.1, 1.0), E=1.0e5, rho=1000.0)


def _bar_setup(frames=1, dt=1.0 / 24.0, air=0.0):
    mesh = box_mesh(BAR["size"])
    material = solid(BAR["E"], BAR["rho"], nu=0.0, air=air)
    setup = setup_from_scene(mesh, scene(frames=frames, dt=dt, material=material, pins=[face_pin(2, side=1)]))
    return mesh, setup


def _bar_theory():
    L = BAR["size"][2]
    return BAR["rho"] * G * L ** 2 / (2.0 * BAR["E"])


def test_hanging_bar_static_stretch_matches_rho_g_L2_over_2E():
    mesh, setup = _bar_setup()
    sim = ReferenceSimulator(setup)  # default resolution
    x = sim.solve_static()
    bottom = mesh.vertices[:, 2] < 1e-9
    stretch = -float((x[bottom, 2] - mesh.vertices[bottom, 2]).mean())
    theory = _bar_theory()
    print(f"\n[a] hanging bar 0.1x0.1x1.0 m, E=1e5 Pa, rho=1000, nu=0: static stretch {stretch * 1e3:.3f} mm, "
          f"theory rho g L^2/(2E) = {theory * 1e3:.3f} mm, error {100 * (stretch / theory - 1):+.2f} %")
    assert stretch == pytest.approx(theory, rel=0.05)


def test_hanging_bar_damped_dynamics_settle_to_the_static_stretch():
    # mass-proportional damping near critical for the 2.5 Hz axial mode: settles in about 1 s
    mesh, setup = _bar_setup(frames=49, air=30.0)
    sim = ReferenceSimulator(setup)
    xs = frames_of(sim)
    bottom = mesh.vertices[:, 2] < 1e-9
    stretch = -(xs[:, bottom, 2] - mesh.vertices[bottom, 2]).mean(axis=1)
    theory = _bar_theory()
    print(f"[a] hanging bar, damped dynamic run (2 s): stretch {stretch[-1] * 1e3:.3f} mm, "
          f"error {100 * (stretch[-1] / theory - 1):+.2f} %")
    assert stretch[-1] == pytest.approx(theory, rel=0.05)
    assert abs(stretch[-1] - stretch[-5]) < 1e-3 * theory, "still moving"


# --------------------------------------------------------------------------- (b) frequencies

def test_axial_frequency_of_fixed_free_bar_matches_textbook():
    mesh = box_mesh(BAR["size"])
    bottom = np.nonzero(mesh.vertices[:, 2] < 1e-9)[0]
    material = solid(BAR["E"], BAR["rho"], nu=0.0)
    period = released_oscillation(mesh, material, face_pin(2, side=1), (0, 0, -1.0), bottom, seconds=1.0)
    f = 1.0 / period
    textbook = math.sqrt(BAR["E"] / BAR["rho"]) / (4.0 * BAR["size"][2])
    print(f"[b] fixed-free bar, first axial mode: {f:.3f} Hz, textbook (1/4L) sqrt(E/rho) = {textbook:.3f} Hz, "
          f"error {100 * (f / textbook - 1):+.2f} %")
    assert f == pytest.approx(textbook, rel=0.15)


def test_frequency_scales_as_sqrt_E_over_rho():
    """Bending oscillation of a cantilever (nu = 0.3) pinned at one end, released from a small
    static load: 4E doubles the frequency, 4 rho halves it."""
    size = (0.5, 0.1, 0.1)
    mesh = box_mesh(size)
    tip = np.nonzero(mesh.vertices[:, 0] > size[0] - 1e-9)[0]
    E, rho = 1.0e6, 1000.0
    load = (0, 0, -0.5)

    def freq(E_, rho_, seconds):
        return 1.0 / released_oscillation(mesh, solid(E_, rho_, nu=0.3), face_pin(0), load, tip, seconds)

    f0 = freq(E, rho, 1.2)
    f_E = freq(4 * E, rho, 0.7)
    f_rho = freq(E, 4 * rho, 2.0)
    # Euler-Bernoulli cantilever: f = 1.875^2 / (2 pi L^2) sqrt(E I / (rho A)), I / A = h^2 / 12
    beam = 1.875 ** 2 / (2 * math.pi * size[0] ** 2) * math.sqrt(E / rho * size[2] ** 2 / 12.0)
    print(f"[b] cantilever 0.5x0.1x0.1 m, nu=0.3: f(E,rho) = {f0:.3f} Hz (Euler-Bernoulli {beam:.3f} Hz, "
          f"{100 * (f0 / beam - 1):+.1f} %); f(4E)/f(E) = {f_E / f0:.3f} (ideal 2); "
          f"f(4rho)/f(rho) = {f_rho / f0:.3f} (ideal 0.5)")
    assert f_E / f0 == pytest.approx(2.0, rel=0.10)
    assert f_rho / f0 == pytest.approx(0.5, rel=0.10)
    assert f0 == pytest.approx(beam, rel=0.15)


# --------------------------------------------------------------------------- (c) energy

def _undamped_energy_run(mesh, material, velocity, frames=101, **sim_kw):
    setup = setup_from_scene(mesh, scene(frames=frames, dt=1.0 / 24.0, gravity=[0, 0, 0], material=material))
    setup.v0 = velocity(mesh.vertices)
    sim = ReferenceSimulator(setup, **sim_kw)
    e0 = sim.energy()
    energies = [e0]
    for _ in range(frames - 1):
        sim.step_frame()
        energies.append(sim.energy())
    return np.array(energies)


def test_undamped_solid_energy_does_not_grow():
    mesh = box_mesh((0.3, 0.2, 0.2), (3, 2, 2), lo=(-0.15, -0.1, -0.1))

    def velocity(x):  # spin about z plus a stretching (non-rigid) part
        spin = np.cross([0.0, 0.0, 3.0], x)
        return spin + np.array([2.0, -1.0, 1.0]) * x

    e = _undamped_energy_run(mesh, solid(1.0e5, 1000.0, nu=0.3), velocity, lattice_cells=5)
    print(f"[c] undamped solid, 100 frames: E(100)/E(0) = {e[-1] / e[0]:.4f}, max E(t)/E(0) = {e.max() / e[0]:.6f}")
    assert np.all(np.isfinite(e))
    assert e[-1] <= e[0] * 1.001
    assert e.max() <= e[0] * 1.001


def test_undamped_cloth_energy_does_not_grow():
    mesh = grid_mesh(0.4, 0.4, 11, 11)
    material = {"preset": "cloth", "damping": 0.0, "air_damping": 0.0, "bending": 1e-3}

    def velocity(x):  # out-of-plane bump and an in-plane stretch
        v = np.zeros_like(x)
        v[:, 2] = 0.5 * np.sin(np.pi * x[:, 0] / 0.4) * np.sin(np.pi * x[:, 1] / 0.4)
        v[:, 0] = 0.3 * (x[:, 0] - 0.2)
        return v

    e = _undamped_energy_run(mesh, material, velocity)
    print(f"[c] undamped cloth, 100 frames: E(100)/E(0) = {e[-1] / e[0]:.4f}, max E(t)/E(0) = {e.max() / e[0]:.6f}")
    assert np.all(np.isfinite(e))
    assert e[-1] <= e[0] * 1.001
    assert e.max() <= e[0] * 1.001


# --------------------------------------------------------------------------- (d) pins

ANIMATED = [[0, [0.0, 0.0, 0.0]], [10, [0.1, 0.0, 0.0]]]


def _pin_drift(mesh, sc, **sim_kw):
    setup = setup_from_scene(mesh, sc)
    sim = ReferenceSimulator(setup, **sim_kw)
    pinned = setup.pin_weight > 0
    diag = float(np.linalg.norm(np.ptp(mesh.vertices, axis=0)))
    drift = max(float(np.linalg.norm(x[pinned] - setup.pin_target(t)[pinned], axis=1).max())
                for t, x in enumerate(sim.iter_frames()))
    return drift / diag, setup


@pytest.mark.parametrize("animated", [False, True], ids=["still", "animated"])
def test_solid_pins_stay_on_target(animated):
    """A jelly cube hanging from its top face (the pins hold the whole body as it drops into them)."""
    mesh = box_mesh((0.25, 0.25, 0.25), (3, 3, 3))
    pin = face_pin(2, side=1, target_offset=ANIMATED) if animated else face_pin(2, side=1)
    sc = scene(frames=17, dt=1.0 / 24.0, material={"preset": "jelly"}, pins=[pin])
    drift, setup = _pin_drift(mesh, sc, lattice_cells=4)
    if animated:
        pinned = setup.pin_weight > 0
        assert setup.pin_target(10)[pinned, 0] == pytest.approx(mesh.vertices[pinned, 0] + 0.1)
        assert setup.pin_target(5)[pinned, 0] == pytest.approx(mesh.vertices[pinned, 0] + 0.05)
    print(f"[d] solid pins, hanging jelly cube ({'animated' if animated else 'still'}): "
          f"max drift {drift:.2e} of the diagonal")
    assert drift < 1e-3


def test_heavily_loaded_solid_pin_drift_is_small():
    """Worst case for mass-proportional penalty pins: a 0.5 m rubber cantilever held only by the
    four corners of its end face (6 % of its mass) sags 35 cm; the pins give a little."""
    mesh = box_mesh((0.5, 0.1, 0.1), (5, 1, 1))
    sc = scene(frames=25, dt=1.0 / 24.0, material={"preset": "rubber"}, pins=[face_pin(0)])
    drift, _ = _pin_drift(mesh, sc, lattice_cells=8)
    print(f"[d] solid pins, loaded rubber cantilever: max drift {drift:.2e} of the diagonal")
    assert drift < 1e-2


@pytest.mark.parametrize("animated", [False, True], ids=["still", "animated"])
def test_cloth_flag_pins_stay_on_target(animated):
    mesh = grid_mesh(0.6, 0.4, 13, 9, plane="xz")  # a flag hanging in the XZ plane, pole at x = 0
    pin = face_pin(0, target_offset=ANIMATED) if animated else face_pin(0)
    sc = scene(frames=25, dt=1.0 / 24.0, material={"preset": "cloth"}, pins=[pin],
               forces=[{"select": {"box": {"min": [0, 0, 0], "max": [1, 1, 1]}}, "accel": [0, 3.0, 0],
                        "profile": {"type": "sine", "frequency": 1.0}}])
    drift, _ = _pin_drift(mesh, sc)
    print(f"[d] cloth flag pins ({'animated' if animated else 'still'}): max drift {drift:.2e} of the diagonal")
    assert drift < 1e-3


# --------------------------------------------------------------------------- (e) floor

def test_dropped_body_lands_on_floor_and_comes_to_rest():
    size = 0.2
    mesh = box_mesh((size, size, size), (4, 4, 4), lo=(-0.1, -0.1, 0.15))  # 15 cm above the floor
    material = {"preset": "rubber", "damping": 0.01}
    setup = setup_from_scene(mesh, scene(frames=49, dt=1.0 / 24.0, material=material, floor={"z": 0.0}))
    sim = ReferenceSimulator(setup, lattice_cells=4)
    xs = frames_of(sim)
    lowest = float(xs[:, :, 2].min())
    print(f"[e] box dropped 15 cm: deepest point {lowest / size * 100:+.3f} % of its size, "
          f"final {xs[-1, :, 2].min() / size * 100:+.3f} %")
    assert lowest >= -0.01 * size
    assert xs[-1, :, 2].min() < 0.01 * size, "it reached the floor"
    com = xs.mean(axis=1)
    assert np.abs(com[-1] - com[-6]).max() < 1e-3 * size, "at rest"
    assert np.abs(sim.v).max() < 0.01


def test_a_box_on_its_edge_falls_onto_a_face_when_only_the_body_meets_the_floor():
    """A rubber cube turned 30 deg about y stands on one edge, its centre of mass beside it: it must
    fall onto a face (turn back about 30 deg, its centre 30 mm lower). The lattice's cells reach past
    the body; its nodes outside the body may sink below the floor (lattice_floor "body", the default),
    so only the body stands on it (with "nodes", solid physics 3, the lattice's flat sole held the cube
    up on its edge)."""
    from engine.core.measures import best_rotation
    size, turn = 0.2, np.radians(30.0)
    mesh = box_mesh((size, size, size), (4, 4, 4), lo=(-0.1, -0.1, -0.1))
    R = np.array([[np.cos(turn), 0.0, np.sin(turn)], [0.0, 1.0, 0.0], [-np.sin(turn), 0.0, np.cos(turn)]])
    mesh = Mesh(mesh.vertices @ R.T, mesh.faces)
    floor = float(mesh.vertices[:, 2].min())
    setup = setup_from_scene(mesh, scene(frames=16, dt=1.0 / 24.0, material={"preset": "rubber"},
                                         floor={"z": floor, "friction": 0.5}))
    xs = frames_of(ReferenceSimulator(setup, lattice_cells=4))
    turned = np.degrees(np.arccos(np.clip(best_rotation(xs[0], xs[-1])[2, 2], -1.0, 1.0)))
    drop = xs[0].mean(axis=0)[2] - xs[-1].mean(axis=0)[2]
    flat = size / 2 - (mesh.vertices.mean(axis=0)[2] - floor)          # its centre's height on a face, less on the edge
    print(f"[e] cube on its edge: turned {turned:.1f} deg, centre {1000 * drop:.1f} mm lower (on a face: {-1000 * flat:.1f})")
    assert 25.0 < turned < 35.0
    assert abs(drop + flat) < 0.005
    assert xs[:, :, 2].min() > floor - 0.01 * size


# --------------------------------------------------------------------------- (f) free fall

def _free_fall(rho, seconds=2.0):
    """Drop of the centre of mass per frame, and the largest deformation at the end."""
    mesh = box_mesh((0.2, 0.15, 0.1), (2, 2, 1))
    dt = 1.0 / 24.0
    setup = setup_from_scene(mesh, scene(frames=int(round(seconds / dt)) + 1, dt=dt, material=solid(1e5, rho, nu=0.3)))
    sim = ReferenceSimulator(setup, lattice_cells=4)
    c0 = dof_centre_of_mass(sim)
    drops = [0.0]
    for _ in range(setup.frames - 1):
        sim.step_frame()
        drops.append(float(c0[2] - dof_centre_of_mass(sim)[2]))
    x = sim.vertices()
    deformation = float(np.abs((x - x.mean(axis=0)) - (mesh.vertices - mesh.vertices.mean(axis=0))).max())
    return np.array(drops), dt, deformation


def test_free_fall_matches_half_g_t_squared_and_ignores_density():
    drops, dt, deformation = _free_fall(1000.0)
    t = np.arange(len(drops)) * dt
    theory = 0.5 * G * t[-1] ** 2
    print(f"[f] free fall 2 s: centre of mass dropped {drops[-1]:.4f} m, 1/2 g t^2 = {theory:.4f} m, "
          f"error {100 * (drops[-1] / theory - 1):+.2f} %")
    assert drops[-1] == pytest.approx(theory, rel=0.01)
    assert deformation < 1e-6, "a uniform body falls without deforming"
    drops2, _, _ = _free_fall(2000.0)
    np.testing.assert_allclose(drops2, drops, rtol=1e-6, atol=1e-9)


# --------------------------------------------------------------------------- (g) stiff material

@pytest.mark.parametrize("substep", [None, 1.0 / 24.0], ids=["default_substep", "one_substep"])
def test_stiff_material_at_24_fps_stays_finite_and_bounded(substep):
    size = (0.5, 0.1, 0.1)
    mesh = box_mesh(size, (5, 1, 1), lo=(0, 0, 0.1))
    sc = scene(frames=25, dt=1.0 / 24.0, material=solid(1e9, 1000.0, nu=0.3, damping=0.0),
               pins=[face_pin(0)], floor={"z": 0.0}, initial={"velocity": [0.0, 0.0, -0.5]})
    setup = setup_from_scene(mesh, sc)
    kw = {} if substep is None else {"substep": substep}
    sim = ReferenceSimulator(setup, lattice_cells=8, **kw)
    xs = frames_of(sim)
    assert np.all(np.isfinite(xs))
    diag = float(np.linalg.norm(size))
    move = float(np.linalg.norm(xs - mesh.vertices[None], axis=2).max())
    print(f"[g] E=1e9 cantilever at dt=1/24 ({sim.substeps} substep(s)): largest displacement {move / diag:.2e} of the diagonal")
    assert move < 0.01 * diag  # a 1 GPa, 0.5 m cantilever hardly bends


# --------------------------------------------------------------------------- (h) cloth bending

def _cantilever_sheet_sag(bending):
    mesh = grid_mesh(0.3, 0.2, 13, 9)
    material = {"preset": "cloth", "bending": bending, "air_damping": 5.0}
    # pin the first two columns: a clamped edge (a single row would be a hinge)
    pin = {"select": {"box": {"min": [0, 0, 0], "max": [0.09, 1, 1]}}}
    setup = setup_from_scene(mesh, scene(frames=37, dt=1.0 / 24.0, material=material, pins=[pin]))
    xs = frames_of(ReferenceSimulator(setup))
    assert np.all(np.isfinite(xs))
    tip = mesh.vertices[:, 0] > 0.3 - 1e-9
    return -float(xs[-1, tip, 2].mean()), xs


def test_cloth_sheet_hangs_and_bending_reduces_sag():
    sag1, xs = _cantilever_sheet_sag(0.01)
    sag2, _ = _cantilever_sheet_sag(0.02)
    print(f"[h] cloth 0.3x0.2 m clamped along one edge: tip sag {sag1 * 100:.2f} cm (bending 0.01), "
          f"{sag2 * 100:.2f} cm (bending 0.02)")
    assert 0.0 < sag2 < sag1 < 0.3
    assert np.abs(xs).max() < 1.0  # bounded
    assert np.abs(xs[-1] - xs[-2]).max() < 2e-3, "settled"


# --------------------------------------------------------------------------- (i) replay

@pytest.mark.parametrize("kind", ["solid", "cloth"])
def test_setup_replays_identically_from_its_sequence(kind, tmp_path):
    if kind == "solid":
        mesh = box_mesh((0.3, 0.2, 0.2), (3, 2, 2), lo=(0, 0, 0.05))
        material = {"preset": "jelly"}
        kw = {"lattice_cells": 5}
    else:
        mesh = grid_mesh(0.3, 0.3, 7, 7, plane="xz")
        mesh.vertices[:, 2] += 0.05
        material = {"preset": "cloth"}
        kw = {}
    sc = scene(frames=8, dt=1.0 / 24.0, material=material, floor={"z": 0.0},
               pins=[face_pin(0, target_offset=[[0, [0, 0, 0]], [6, [0, 0.05, 0.02]]])],
               forces=[{"select": {"box": {"min": [0.5, 0, 0.5], "max": [1, 1, 1]}}, "accel": [0, 15, 0],
                        "profile": {"type": "impulse", "start": 1, "end": 4}}],
               initial={"velocity": [0.2, 0, -0.1]})
    setup = setup_from_scene(mesh, sc)
    first = frames_of(ReferenceSimulator(setup, **kw))
    write_sequence(tmp_path / "run.npz", setup.to_sequence(first))
    replay = setup_from_sequence(read_sequence(tmp_path / "run.npz"))
    second = frames_of(ReferenceSimulator(replay, **kw))
    assert second.shape == first.shape
    err = float(np.abs(second - first).max())
    print(f"[i] {kind} replay from its sequence file: max difference {err:.1e} m")
    assert err < 1e-5


# --------------------------------------------------------------------------- (j) initial velocity

@pytest.mark.parametrize("shape", ["box", "sphere"])
def test_initial_velocity_moves_centre_of_mass(shape):
    if shape == "box":
        mesh = box_mesh((0.3, 0.2, 0.2))  # only 8 vertices: most lattice nodes touch no vertex
    else:
        mesh = make_shape("sphere", np.random.default_rng(0), 200)  # interior nodes
    v0 = np.array([0.5, -0.2, 0.3])
    sc = scene(frames=2, dt=1.0 / 24.0, gravity=[0, 0, 0], material={"preset": "rubber", "air_damping": 0.0},
               initial={"velocity": v0.tolist()})
    setup = setup_from_scene(mesh, sc)
    sim = ReferenceSimulator(setup, lattice_cells=5)
    xs = frames_of(sim)
    np.testing.assert_allclose(sim.v.mean(axis=0), v0, rtol=1e-6, atol=1e-9)  # every node moves
    moved = (centre_of_mass(sim, xs[1]) - centre_of_mass(sim, xs[0])) / setup.dt
    np.testing.assert_allclose(moved, v0, rtol=1e-3, atol=1e-6)
