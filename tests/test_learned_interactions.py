"""The learned engine feels colliders and force fields (engine/learned/latent_world_forces.py, issue 13):

- a soft body dropped onto a static collider box (a mesh, not the floor plane) rests on it, and
  falls through where there is no collider;
- an animated collider pushes a body aside and stays behind it;
- the collider term's and its Coulomb friction's gradients are the derivatives of their energies;
- wind is evaluated on the deformed surface every step: a sheet turned edge-on to the wind feels
  (almost) nothing although its rest surface faced the wind; face-on it is blown away;
- a body carried through a Force field's falloff feels nothing outside it and is pushed inside.

All with the bundled checkpoint (the classical physics model: no training); no mocks.
"""
import numpy as np
import pytest
import torch

from engine.api import open_engine
from engine.core.fields import Effector, total_accel
from engine.core.formats import Mesh
from engine.core.measures import best_rotation
from engine.core.scene import setup_from_scene
from engine.learned.checkpoint import default_model_path
from engine.learned.latent_scene import LatentScene
from engine.learned.integrators import StepContext
from engine.learned.terms import collider_contact, friction
from engine.training.shapes import make_shape

from test_colliders_fields import box, grid_sheet, with_fields


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def engine():
    return open_engine("neurok", model=str(default_model_path()))


def ball():
    return make_shape("sphere", np.random.default_rng(0), 300)


def scene(frames, material, colliders=(), gravity=(0, 0, -9.81), velocity=(0, 0, 0)):
    return {"format": "neurok.scene/1", "frames": frames, "gravity": list(gravity), "material": material,
            "pins": [], "forces": [], "floor": None, "colliders": list(colliders),
            "initial": {"velocity": list(velocity)}}


def table_under(mesh, gap=0.1, size=2.0):
    """A closed box whose top face lies `gap` below the mesh."""
    v, f = box(size, center=(0.0, 0.0, float(np.min(mesh.vertices[:, 2])) - gap - size / 2))
    return {"name": "table", "faces": f.tolist(), "vertices": v.tolist(), "thickness": 0.02, "friction": 0.3}, v


def run(engine, setup):
    return np.stack([x for _, x in engine.prepare(setup).frames()])


def test_soft_body_rests_on_a_static_collider_box(engine):
    mesh = ball()
    table, tv = table_under(mesh)
    top = tv[:, 2].max()
    xs = run(engine, setup_from_scene(mesh, scene(30, {"preset": "rubber"}, [table])))
    low = xs[:, :, 2].min(axis=1)
    assert low.min() > top - 0.02, low            # never more than the thickness into the box
    assert np.all(np.abs(low[-8:] - (top + 0.02)) < 0.03), low[-8:]   # and settled on its shell
    assert abs(xs[-1, :, :2].mean(axis=0)).max() < 0.5             # still on the 2 m table (it rolls a little,
                                                                   # as on the floor plane: a lumpy ball)
    free = run(engine, setup_from_scene(mesh, scene(12, {"preset": "rubber"})))
    assert free[-1, :, 2].min() < top - 0.2                         # without it the body falls through


def test_animated_collider_pushes_a_body_aside(engine):
    mesh = ball()
    cv, cf = box(0.5)
    frames = 24
    path = [cv + [-1.0 + 1.6 * t / (frames - 1), 0.0, 0.0] for t in range(frames)]
    pusher = {"name": "pusher", "faces": cf.tolist(), "positions": [p.tolist() for p in path], "thickness": 0.02}
    xs = run(engine, setup_from_scene(mesh, scene(frames, {"preset": "rubber"}, [pusher], gravity=(0, 0, 0))))
    front = np.array([p[:, 0].max() for p in path])
    assert xs[-1, :, 0].mean() > 0.8                                 # carried along +x by more than its radius
    assert np.all(xs[:, :, 0].min(axis=1) > front - 0.03)            # never entered by the pusher
    assert abs(xs[-1, :, 1].mean()) < 0.05


def test_a_ball_squeezed_between_two_closing_plates_stays_where_it_is(engine):
    """Two Collision boxes close in on a jelly ball resting on the floor (friction 0.5 on both) until
    their gap is 70 % of its diameter, then hold: it is held between them, untilted and in place, as
    the reference's is (on 8 cells: centre within 1 mm, tilt 0.0 deg, width 199 mm; issue 55)."""
    from engine.evaluation.scenes import box_collider, uv_sphere
    frames, r, closed = 40, 0.15, 0.105
    mesh = uv_sphere(r)
    mesh.vertices[:, 2] += r

    def plate(side):            # an animated box: its corners at every frame ("positions")
        path = []
        for t in range(frames):
            inner = r + 0.01 + (closed - r - 0.01) * min(t / 24.0, 1.0)         # the plate's inner face
            x0, x1 = (inner, inner + 0.1) if side > 0 else (-inner - 0.1, -inner)
            path.append(box_collider((x0, -0.3, 0.0), (x1, 0.3, 0.5))["vertices"])
        return {"name": f"plate {side}", "faces": box_collider((0, 0, 0), (1, 1, 1))["faces"], "positions": path,
                "friction": 0.5, "thickness": 0.005}
    vise = dict(scene(frames, {"preset": "jelly"}, [plate(1), plate(-1)]), floor={"z": 0.0, "friction": 0.5})
    xs = run(engine, setup_from_scene(mesh, vise))
    width = np.ptp(xs[-1, :, 0])
    assert 2 * closed - 0.02 < width < 2 * closed + 0.01, width       # squeezed to the gap, less the shells
    assert np.abs(xs[:, :, :2].mean(axis=1)).max() < 0.005            # its centre stays within 5 mm
    assert max(np.degrees(np.arccos(np.clip(best_rotation(xs[0], x)[2, 2], -1, 1))) for x in xs) < 2.0


def test_collider_gradient_matches_energy(engine):
    mesh = ball()
    table, _ = table_under(mesh, gap=-0.05)                          # the ball starts 5 cm into it
    table["friction"] = 0.5
    setup = setup_from_scene(mesh, scene(4, {"preset": "rubber"}, [table]))
    with torch.no_grad():
        s = LatentScene(engine.model, setup)
        g = torch.Generator().manual_seed(0)
        q_n = 1e-3 * torch.randn(s.dims, generator=g, dtype=torch.float64)
        ctx = StepContext.build(s, 0, q_n, torch.zeros_like(q_n), 1.0 / 48)
        q = q_n + 1e-3 * torch.randn(s.dims, generator=g, dtype=torch.float64)
        assert ctx.slip is not None                                     # friction contacts found at q_n

        def terms(y):
            return collider_contact(y, ctx) + friction(y, ctx)

        t = terms(q)
        assert float(t.energy) > 0
        for i in range(6):
            e = torch.zeros_like(q)
            e[i] = 1e-7
            num = (terms(q + e).energy - terms(q - e).energy) / 2e-7
            assert float(num) == pytest.approx(float(t.grad[i]), rel=1e-4, abs=1e-6 * float(t.grad.abs().max()))
        assert torch.linalg.eigvalsh(t.hess).min() > -1e-9 * float(t.hess.abs().max())


# --------------------------------------------------------------------------- force fields

def wind(strength=8.0, frames=1):
    return Effector("Wind", "WIND", np.eye(4), np.full(frames, strength))    # along +Z


def test_wind_on_an_edge_on_sheet_is_weaker_than_face_on(engine):
    mesh = grid_sheet(11)
    rot = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]], float)            # 90 deg about X: normal +Z -> -Y
    frames = 10
    moved = {}
    for name, x0 in (("face_on", mesh.vertices), ("edge_on", mesh.vertices @ rot.T)):
        setup = setup_from_scene(mesh, scene(frames, {"preset": "cloth"}, gravity=(0, 0, 0)))
        setup.x0 = np.array(x0, dtype=np.float64)
        setup = with_fields(setup, [wind(frames=frames)], surface=True)
        # the generalised force of the first step, on the deformed (here: turned) surface
        with torch.no_grad():
            s = LatentScene(engine.model, setup)
            f = StepContext.build(s, 0, s.q0, s.qd0, 1.0 / 48).force
        moved[name] = (float(torch.linalg.norm(f)), run(engine, setup))
    f_face, xs_face = moved["face_on"]
    f_edge, xs_edge = moved["edge_on"]
    assert f_edge < 0.05 * f_face
    dz_face = xs_face[-1, :, 2].mean() - xs_face[0, :, 2].mean()
    dz_edge = xs_edge[-1, :, 2].mean() - xs_edge[0, :, 2].mean()
    assert dz_face > 0.1                               # blown along +Z
    assert abs(dz_edge) < 0.1 * dz_face                # the rest table alone would have blown it as far


def test_force_field_falloff_felt_along_the_path(engine):
    mesh = ball()
    start = np.array([-2.0, 0.0, 0.0])
    moved = Mesh(np.asarray(mesh.vertices) + start, mesh.faces, name="ball")
    frames = 48                                                  # 2 s at 2 m/s: from x = -2 to x = +2
    m = np.eye(4)
    m[:3, 3] = [0.0, -0.8, 0.0]
    field = Effector("Force", "FORCE", m, np.full(frames, 20.0), use_max=True, max=1.0)
    setup = setup_from_scene(moved, scene(frames, {"preset": "rubber"}, gravity=(0, 0, 0), velocity=(2, 0, 0)))
    setup = with_fields(setup, [field], surface=False)
    assert not total_accel(setup.effectors, 0, setup.rest).any()  # at rest (x = -2) the field is out of reach
    xs = run(engine, setup)
    c = xs.mean(axis=1)
    reach = 1.0 + 0.4                                            # falloff radius + the ball's radius
    far = np.hypot(c[:, 0], c[:, 1] + 0.8) > reach + 0.2
    assert far[:8].all() and np.abs(c[:8, 1]).max() < 1e-4          # outside the falloff: nothing
    assert c[-1, 1] > 0.1                                            # pushed away from the field's centre
    vy = np.diff(c[:, 1])
    passed = np.nonzero((c[:-1, 0] > 0.0) & far[:-1])[0]
    inside = np.nonzero(~far[:-1])[0]
    assert vy[inside].max() > 0 and np.ptp(vy[passed]) < 0.2 * vy[inside].max()   # steady once out again
