"""Engine-independent collider and force-field helpers (engine/core/colliders.py, engine/core/fields.py) and
the scene format's "colliders" key."""
from __future__ import annotations

import numpy as np
import pytest

from engine.core import colliders as C
from engine.core import fields as F
from engine.core.errors import FormatError
from engine.core.formats import SCENE_FORMAT, Mesh
from engine.core.scene import setup_from_scene, validate_scene


def box(size=1.0, center=(0.0, 0.0, 0.0)):
    h = size / 2
    v = np.array([[x, y, z] for x in (-h, h) for y in (-h, h) for z in (-h, h)]) + np.asarray(center)
    f = [[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
         [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]]
    return v, np.array(f)

def grid_sheet(n=9, size=1.0):
    """A flat square sheet in the XY plane (normal +Z), n x n vertices."""
    u = np.linspace(-size / 2, size / 2, n)
    v = np.array([[x, y, 0.0] for y in u for x in u])
    f = []
    for j in range(n - 1):
        for i in range(n - 1):
            a = j * n + i
            f += [[a, a + 1, a + n + 1], [a, a + n + 1, a + n]]
    return Mesh(v, np.array(f), name="sheet")


def with_fields(setup, effectors, surface):
    """What the add-on does: the force fields go to the setup, for the engines to evaluate every step."""
    setup.effectors = effectors
    return setup



def plane(size=2.0):
    h = size / 2
    return np.array([[-h, -h, 0], [h, -h, 0], [h, h, 0], [-h, h, 0]], float), np.array([[0, 1, 2], [0, 2, 3]])


def test_closest_points_and_signed_distance_box():
    v, f = box()
    assert C.is_closed_surface(f)
    pts = np.array([[0, 0, 1.0], [0, 0, 0.25], [0.9, 0.9, 0.0], [0.0, 0.0, 0.5]])
    sd, direction, closest = C.signed_distance(pts, v, f)
    assert np.allclose(sd, [0.5, -0.25, np.hypot(0.4, 0.4), 0.0], atol=1e-9)
    assert np.allclose(direction[0], [0, 0, 1]) and np.allclose(direction[1], [0, 0, 1])
    assert np.allclose(closest[2], [0.5, 0.5, 0.0])


def test_signed_distance_open_plane_uses_face_normal():
    v, f = plane()
    assert not C.is_closed_surface(f)
    sd, direction, _ = C.signed_distance(np.array([[0, 0, 0.3], [0.1, 0, -0.2]]), v, f)
    assert np.allclose(sd, [0.3, -0.2]) and np.allclose(direction, [[0, 0, 1], [0, 0, 1]])


def test_penalty_gradient_matches_finite_differences():
    v, f = box()
    col = C.Collider("box", f, v, thickness_outer=0.05)
    pts = np.array([[0.1, -0.2, 0.52], [0.0, 0.3, 0.4], [2.0, 0, 0]])
    m = np.array([1.0, 2.0, 1.0])
    e, g, h = C.contact_penalty(pts, col, 0, stiffness=100.0, mass=m)
    assert e > 0 and np.allclose(g[2], 0) and np.allclose(h[2], 0)
    num = np.zeros_like(pts)
    for i in range(2):
        for k in range(3):
            d = np.zeros_like(pts)
            d[i, k] = 1e-6
            num[i, k] = (C.contact_penalty(pts + d, col, 0, 100.0, m)[0] - C.contact_penalty(pts - d, col, 0, 100.0, m)[0]) / 2e-6
    assert np.allclose(num, g, atol=1e-4)


def test_resolve_contacts_pushes_out_and_applies_friction():
    v, f = plane()
    col = C.Collider("ground", f, v, thickness_outer=0.01, friction=0.5)
    x = np.array([[0.0, 0.0, -0.05], [0.2, 0.0, 0.5]])
    vel = np.array([[1.0, 0.0, -2.0], [0.0, 0.0, -1.0]])
    x2, v2, hit = C.resolve_contacts(x, vel, col, 0, 1 / 24)
    assert hit.tolist() == [True, False]
    assert np.isclose(x2[0, 2], 0.01) and np.allclose(x2[1], x[1])
    assert np.isclose(v2[0, 2], 0.0)  # no approach left
    assert np.isclose(v2[0, 0], 0.0)  # friction 0.5 × 2 m/s removed the 1 m/s slide
    assert np.allclose(v2[1], vel[1])


def test_moving_collider_interpolates_and_carries_points():
    v, f = plane()
    pos = np.stack([v, v + [0, 0, 0.1]])
    col = C.Collider("lift", f, pos, thickness_outer=0.0)
    assert np.allclose(col.at(0.5)[:, 2], 0.05)
    x2, v2, hit = C.resolve_contacts(np.array([[0, 0, 0.05]]), np.zeros((1, 3)), col, 1, 0.1)
    assert hit[0] and np.isclose(x2[0, 2], 0.1)


def test_scene_colliders_key_is_validated_and_backward_compatible():
    mesh = Mesh(*box(0.2, (0, 0, 1)))
    base = {"format": SCENE_FORMAT, "frames": 3}
    assert setup_from_scene(mesh, base).colliders == []
    v, f = plane()
    sc = dict(base, colliders=[{"name": "ground", "faces": f.tolist(), "vertices": v.tolist(), "thickness": 0.01,
                                "friction": 0.3}])
    setup = setup_from_scene(mesh, sc)
    (col,) = setup.colliders
    assert col.name == "ground" and col.frames == 1 and col.friction == 0.3 and col.thickness_outer == 0.01
    moving = dict(base, colliders=[{"faces": f.tolist(), "positions": [v.tolist(), (v + 0.1).tolist()]}])
    assert setup_from_scene(mesh, moving).colliders[0].frames == 2
    for bad in ({"faces": f.tolist()}, {"faces": [[0, 1, 9]], "vertices": v.tolist()},
                {"faces": f.tolist(), "vertices": v.tolist(), "thickness": -1},
                {"faces": f.tolist(), "vertices": v.tolist(), "damping": 2}):
        with pytest.raises(FormatError):
            validate_scene(dict(base, colliders=[bad]))


def eff(type_, **kw):
    return F.Effector(name=type_.lower(), type=type_, matrix=np.eye(4), strength=kw.pop("strength", 2.0), **kw)


def test_force_wind_vortex_harmonic_drag():
    p = np.array([[1.0, 0, 0], [0, 2.0, 0]])
    assert np.allclose(F.accel(eff("FORCE"), 0, p), [[2, 0, 0], [0, 2, 0]])
    assert np.allclose(F.accel(eff("WIND"), 0, p), [[0, 0, 2], [0, 0, 2]])
    assert np.allclose(F.accel(eff("VORTEX"), 0, p), [[0, 2, 0], [-2, 0, 0]])
    assert np.allclose(F.accel(eff("HARMONIC", harmonic_damping=1.0), 0, p, velocities=[[0, 0, 1], [0, 0, 0]]),
                       [[-2, 0, -1], [0, -4, 0]])
    assert np.allclose(F.accel(eff("DRAG", flow=1.0), 0, p, velocities=[[1, 0, 0], [0, 0, 0]]), [[-3, 0, 0], [0, 0, 0]])
    fo = F.accel(eff("FORCE", power=2.0, use_max=True, max=1.5), 0, p)
    assert np.allclose(fo, [[2 * 2.0 ** -2, 0, 0], [0, 0, 0]])


def test_wind_on_a_surface_acts_along_the_normal():
    p = np.zeros((2, 3))
    normals = np.array([[0, 0, 1.0], [1.0, 0, 0]])  # facing the wind / edge-on
    a = F.accel(eff("WIND", strength=3.0), 0, p, normals=normals, surface=True)
    assert np.allclose(a, [[0, 0, 3], [0, 0, 0]])
    air = F.accel(eff("WIND", strength=3.0, flow=1.0), 0, p, velocities=[[0, 0, 3.0], [0, 0, 0]], normals=normals,
                  surface=True)
    assert np.allclose(air, 0)  # moving with the air stream: no push


def test_turbulence_is_smooth_seeded_and_bounded():
    p = np.random.default_rng(0).uniform(-2, 2, (200, 3))
    a = F.accel(eff("TURBULENCE", strength=1.0, size=0.5, seed=3), 0, p)
    b = F.accel(eff("TURBULENCE", strength=1.0, size=0.5, seed=3), 0, p + 1e-4)
    c = F.accel(eff("TURBULENCE", strength=1.0, size=0.5, seed=4), 0, p)
    assert np.abs(a).max() <= 1.0 + 1e-9 and np.abs(a).std() > 0.1
    assert np.abs(a - b).max() < 0.01 and np.abs(a - c).max() > 0.1


def test_tube_cone_falloff_and_animated_matrix():
    m = np.stack([np.eye(4), np.eye(4)])
    m[1, :3, 3] = [0, 0, 1]
    e = eff("FORCE", falloff_type="TUBE", radial_power=0.0, use_radial_max=True, radial_max=0.5)
    e.matrix = m
    p = np.array([[0.3, 0, 0], [1.0, 0, 0]])
    assert np.allclose(np.linalg.norm(F.accel(e, 0, p), axis=1), [2, 0])
    assert np.allclose(F.accel(e, 1, p)[0], 2 * np.array([0.3, 0, -1]) / np.linalg.norm([0.3, 0, -1]))
    cone = eff("FORCE", falloff_type="CONE", use_radial_max=True, radial_max=30.0)
    assert np.allclose(np.linalg.norm(F.accel(cone, 0, [[0, 0, 1.0], [1.0, 0, 0.1]]), axis=1), [2, 0])


def test_vertex_normals_of_a_plane():
    v, f = plane()
    assert np.allclose(F.vertex_normals(v, f), [[0, 0, 1]] * 4)
