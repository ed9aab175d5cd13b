"""The reference simulator feels colliders and force fields (engine/reference/world_forces.py, issue 13):

- a soft ball dropped onto a static collider box (a mesh, no floor plane) rests on its thickness
  shell, and falls through where there is no collider;
- an animated collider pushes a body aside and never enters it;
- the collider term's and its Coulomb friction's gradients are the derivatives of their energies;
- wind is evaluated on the deformed surface every substep: a cloth sheet turned edge-on to the wind
  feels (almost) nothing although its rest surface faced the wind; face-on it is blown away;
- both engines agree on the first case: the learned engine (bundled checkpoint) rests the same
  ball on the same box at the same height.

Real simulator, small meshes, few frames, no mocks.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from engine.core.colliders import Collider
from engine.core.fields import Effector
from engine.core.formats import Mesh
from engine.core.scene import setup_from_scene
from engine.core.friction import friction_contacts
from engine.reference.world_forces import collider_terms, friction_terms
from engine.reference.simulator import ReferenceSimulator
from engine.training.shapes import _geodesic_sphere

from test_colliders_fields import box, grid_sheet, with_fields

LATTICE = 4          # the generator's lattice: fast, and the collider acts on vertices and nodes alike
RADIUS = 0.3
GAP = 0.05
THICKNESS = 0.02


def ball():
    v, f = _geodesic_sphere(3)                     # 92 vertices, symmetric: it cannot roll off
    return Mesh(RADIUS * v, f, name="ball")


def scene(frames, material, colliders=(), gravity=(0, 0, -9.81), velocity=(0, 0, 0)):
    return {"format": "neurok.scene/1", "frames": frames, "gravity": list(gravity), "material": material,
            "pins": [], "forces": [], "floor": None, "colliders": list(colliders),
            "initial": {"velocity": list(velocity)}}


RUBBER = {"preset": "rubber", "damping": 0.02}     # a little more damping than the preset: it settles in frames


def table_under(mesh, gap=GAP, size=2.0):
    """A closed box whose top face lies `gap` below the mesh."""
    v, f = box(size, center=(0.0, 0.0, float(np.min(mesh.vertices[:, 2])) - gap - size / 2))
    return {"name": "table", "faces": f.tolist(), "vertices": v.tolist(), "thickness": THICKNESS,
            "friction": 0.3}, float(v[:, 2].max())


def run_reference(setup):
    return np.stack(list(ReferenceSimulator(setup, lattice_cells=LATTICE).iter_frames()))


@pytest.fixture(scope="module")
def dropped():
    """The reference ball dropped onto the table: (positions [T,N,3], top of the table)."""
    mesh = ball()
    table, top = table_under(mesh)
    return run_reference(setup_from_scene(mesh, scene(12, RUBBER, [table]))), top


def test_ball_rests_on_a_static_collider_box(dropped):
    xs, top = dropped
    low = xs[:, :, 2].min(axis=1)
    assert low.min() > top, low                                       # never into the box
    assert np.all(np.abs(low[-4:] - (top + THICKNESS)) < 0.005), low  # settled on its thickness shell
    assert np.abs(xs[-1, :, :2].mean(axis=0)).max() < 0.01            # straight down, no slide
    mesh = ball()
    free = run_reference(setup_from_scene(mesh, scene(8, RUBBER)))
    assert free[-1, :, 2].min() < top - 0.2                           # without it the ball falls through


def test_animated_collider_pushes_a_body_aside():
    mesh = ball()
    cv, cf = box(0.5)
    frames = 16
    path = [cv + [-0.9 + 1.2 * t / (frames - 1), 0.0, 0.0] for t in range(frames)]   # front: -0.65 -> +0.55
    pusher = {"name": "pusher", "faces": cf.tolist(), "positions": [p.tolist() for p in path],
              "thickness": THICKNESS}
    xs = run_reference(setup_from_scene(mesh, scene(frames, RUBBER, [pusher], gravity=(0, 0, 0))))
    front = np.array([p[:, 0].max() for p in path])
    assert np.all(xs[:, :, 0].min(axis=1) > front - 0.005)           # never entered by the pusher
    assert xs[-1, :, 0].min() > front[-1]                              # carried in front of it
    assert xs[-1, :, 0].mean() > 0.5                                   # moved by more than its radius
    assert np.abs(xs[-1, :, 1:].mean(axis=0)).max() < 0.01            # pushed straight along +x


def test_collider_gradient_matches_energy():
    v, f = box(1.0)
    frames = np.stack([v, v + [0.05, 0.02, 0.0]])                      # moving: friction is relative to it
    col = Collider("box", f, frames, thickness_outer=0.05, friction=0.5)
    rng = np.random.default_rng(1)
    x = np.column_stack([rng.uniform(-0.4, 0.4, 12), rng.uniform(-0.4, 0.4, 12), rng.uniform(0.45, 0.54, 12)])
    x_prev = x + rng.normal(0, 0.01, x.shape)
    mass = rng.uniform(0.5, 2.0, len(x))
    h, t1, t0 = 1 / 96, 0.75, 0.5
    setup = SimpleNamespace(floor_z=None, floor_friction=0.0, colliders=[col])
    slip = friction_contacts(setup, x_prev, mass, t0, t0, t1)             # lagged: found at the step's start
    assert slip is not None and len(slip.index) > 0

    def terms(y, need_hess=True):
        e1, g1, H1 = collider_terms([col], y, mass, t1, need_hess)
        e2, g2, H2 = friction_terms(slip, y, x_prev, h, need_hess)
        return e1 + e2, g1 + g2, (H1 + H2 if need_hess else None)

    e, g, H = terms(x)
    assert e > 0
    num = np.zeros(x.size)
    for i in range(x.size):
        d = np.zeros(x.size)
        d[i] = 1e-7
        num[i] = (terms(x + d.reshape(-1, 3), False)[0] - terms(x - d.reshape(-1, 3), False)[0]) / 2e-7
    assert np.allclose(num, g, rtol=1e-4, atol=1e-6 * np.abs(g).max())
    assert np.linalg.eigvalsh(H.toarray()).min() > -1e-9 * np.abs(H).max()


# --------------------------------------------------------------------------- force fields

def test_wind_on_an_edge_on_sheet_is_weaker_than_face_on():
    mesh = grid_sheet()
    rot = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]], float)            # 90 deg about X: normal +Z -> -Y
    frames = 8
    out = {}
    for name, x0 in (("face_on", mesh.vertices), ("edge_on", mesh.vertices @ rot.T)):
        setup = setup_from_scene(mesh, scene(frames, {"preset": "cloth"}, gravity=(0, 0, 0)))
        setup.x0 = np.array(x0, dtype=np.float64)
        setup = with_fields(setup, [Effector("Wind", "WIND", np.eye(4), np.full(frames, 8.0))], surface=True)
        sim = ReferenceSimulator(setup)
        push = float(np.linalg.norm(sim._external_forces(0)))               # the first substep's force
        xs = np.stack(list(sim.iter_frames()))
        out[name] = push, xs[-1, :, 2].mean() - xs[0, :, 2].mean()
    (f_face, dz_face), (f_edge, dz_edge) = out["face_on"], out["edge_on"]
    assert f_face > 0 and f_edge < 0.1 * f_face
    assert dz_face > 0.1                                # blown along +Z
    assert abs(dz_edge) < 0.1 * dz_face                 # the rest table alone would have blown it as far


def test_without_effectors_the_table_is_used_unchanged():
    mesh = grid_sheet(5)
    setup = setup_from_scene(mesh, scene(3, {"preset": "cloth"}, gravity=(0, 0, 0)))
    setup.accel_table = np.random.default_rng(0).normal(size=(3, len(mesh.vertices), 3))
    sim = ReferenceSimulator(setup)
    f = sim._external_forces(1).reshape(-1, 3)
    assert np.allclose(f, sim.vertex_mass[:, None] * setup.accel_table[1])


# --------------------------------------------------------------------------- both engines

def test_both_engines_rest_the_ball_on_the_box(dropped):
    torch = pytest.importorskip("torch")
    from engine.api import open_engine
    from engine.learned.checkpoint import default_model_path

    torch.set_num_threads(1)
    engine = open_engine("neurok", model=str(default_model_path()))
    mesh = ball()
    table, top = table_under(mesh)
    frames = 24
    learned = np.stack([x for _, x in engine.prepare(setup_from_scene(mesh, scene(frames, RUBBER, [table]))).frames()])
    ref, _ = dropped
    diag = float(np.linalg.norm(np.ptp(mesh.vertices, axis=0)))
    rest_at = top + THICKNESS
    low_ref, low_learned = ref[-4:, :, 2].min(axis=1), learned[-4:, :, 2].min(axis=1)
    assert learned[:, :, 2].min() > top - THICKNESS                   # neither passes into the box
    assert np.all(np.abs(low_ref - rest_at) < 0.03 * diag), low_ref
    assert np.all(np.abs(low_learned - rest_at) < 0.03 * diag), low_learned
    assert abs(low_ref.mean() - low_learned.mean()) < 0.01 * diag                   # measured: 0.3 mm apart
