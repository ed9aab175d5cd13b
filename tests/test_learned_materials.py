"""Materials learned from data (issue 24): the reference's Mooney-Rivlin law as a data source,
learned materials as presets a scene can name, and `neurok train --material` learning one from
sequences without touching anything else of the model.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from engine.core.errors import FormatError, NeurokError
from engine.core.formats import Mesh
from engine.core.scene import known_presets, resolve_material, setup_from_scene
from engine.learned.checkpoint import default_model_path, load_checkpoint, read_payload, save_checkpoint
from engine.learned.latent_scene import LatentScene
from engine.learned.strain_energy import DTYPE, PRESET_PARAMETERS, StrainEnergy, lame
from engine.learned.model import NeurokModel
from engine.reference.simulator import ReferenceSimulator
from engine.reference.solid import StableNeoHookean
from engine.training.generate import generate, load_index
from engine.training.train import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")

G = 9.81
E, NU, SHARE = 1.0e5, 0.45, 0.7


def isochoric_stretch(stretch):
    """Uniaxial stretch along x at constant volume."""
    return np.diag([stretch, stretch ** -0.5, stretch ** -0.5])


def mooney_rivlin_pa(F, young=E, poisson=NU, share=SHARE):
    """The law's energy per volume (Pa) at an isochoric F: mu/2 ((1-s)(I1 - 3) + s(I2 - 3))."""
    mu = young / (2 * (1 + poisson))
    C = F.T @ F
    I1, I2 = np.trace(C), 0.5 * (np.trace(C) ** 2 - np.trace(C @ C))
    return 0.5 * mu * ((1 - share) * (I1 - 3) + share * (I2 - 3))


def one_tet_energy_density(F, share):
    nodes = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    law = StableNeoHookean(nodes, np.array([[0, 1, 2, 3]]), E, NU, order=1, i2_share=share)
    energy, grad, hess = law.energy_grad_hess(nodes @ F.T)
    return energy / law.vol.sum(), grad, hess


@pytest.mark.parametrize("stretch", [1.3, 1.8, 0.7])
def test_the_reference_mooney_rivlin_law_stores_its_energy_in_pascals(stretch):
    F = isochoric_stretch(stretch)
    psi, _, hess = one_tet_energy_density(F, SHARE)
    assert psi == pytest.approx(mooney_rivlin_pa(F), rel=1e-9)
    neo, _, _ = one_tet_energy_density(F, 0.0)
    assert neo == pytest.approx(mooney_rivlin_pa(F, share=0.0), rel=1e-9)
    assert abs(psi / neo - 1) > 0.02, "the second invariant changes the large-strain energy"
    assert np.linalg.eigvalsh(hess.toarray()).min() > -1e-6 * E


def _bar_stretch(young, law):
    from tests.test_reference_solid import bar_mesh, box_pin
    mesh = bar_mesh((0.1, 0.1, 1.0), (1, 1, 100))
    sc = {"format": "neurok.scene/1", "frames": 1, "dt": 1 / 24, "pins": [box_pin(2, 0.97, 1.0)],
          "material": {"kind": "solid", "stiffness": young, "density": 1000.0, "poisson": 0.3, **law}}
    x = ReferenceSimulator(setup_from_scene(mesh, sc)).solve_static()
    bottom = mesh.vertices[:, 2] < 1e-9
    return -float((x[bottom, 2] - mesh.vertices[bottom, 2]).mean())


def test_a_mooney_rivlin_bar_hangs_like_linear_elasticity_says_and_softens_in_tension():
    """At 0.5 % strain the law is linear elasticity (rho g L^2 / 2E, as neo-Hookean); at 5 % its
    second invariant softens it in tension: nominal stress 2 (C10 + C01 / l)(l - 1/l^2), about
    2 % less than neo-Hookean's over the bar."""
    mr = {"law": "mooney_rivlin", "i2_share": SHARE}
    stiff = 2e6
    theory = 1000.0 * G * 0.97 ** 2 / (2 * stiff)
    small_mr, small_nh = _bar_stretch(stiff, mr), _bar_stretch(stiff, {})
    large_mr, large_nh = _bar_stretch(stiff / 10, mr), _bar_stretch(stiff / 10, {})
    print(f"[m] bar 0.1x0.1x1 m hanging, Mooney-Rivlin s = {SHARE}: E = 2 MPa {small_mr * 1e3:.3f} mm "
          f"(neo-Hookean {small_nh * 1e3:.3f}, rho g L^2/2E {theory * 1e3:.3f}); E = 200 kPa {large_mr * 1e3:.2f} mm "
          f"(neo-Hookean {large_nh * 1e3:.2f})")
    assert small_mr == pytest.approx(theory, rel=0.05)
    assert small_mr == pytest.approx(small_nh, rel=0.005)
    assert 1.01 < large_mr / large_nh < 1.04


def test_scene_files_name_the_law_and_bad_ones_get_one_line():
    m = resolve_material({"kind": "solid", "law": "mooney_rivlin"})
    assert m.law == "mooney_rivlin" and m.i2_share == 0.7
    assert "law" not in resolve_material({"kind": "solid", "law": "neo_hookean"}).to_dict()
    for bad, words in (({"law": "ogden"}, "unknown 'law'"), ({"i2_share": 0.5}, "needs"),
                       ({"law": "mooney_rivlin", "i2_share": 1.5}, "[0, 1]"),
                       ({"kind": "cloth", "law": "mooney_rivlin"}, "for solids")):
        with pytest.raises(FormatError, match=None) as e:
            resolve_material(bad)
        assert words in str(e.value) and "\n" not in str(e.value)


def _learned_rubber(share):
    energy = StrainEnergy()
    p = energy.add_preset("rubber_test", {"kind": "solid", "law": "mooney_rivlin", "i2_share": share})
    with torch.no_grad():
        p[PRESET_PARAMETERS.index("i2_term")] = math.atanh(share)
    return energy


@torch.no_grad()
def test_a_learned_rubber_with_weight_s_is_the_mooney_rivlin_law():
    energy = _learned_rubber(SHARE)
    feats = energy.features_for(resolve_material({"kind": "solid", "poisson": NU, "law": "mooney_rivlin", "i2_share": SHARE}))
    mu, lam = lame(NU)
    for stretch in (1.3, 1.8, 0.7):
        F = isochoric_stretch(stretch)
        y = torch.tensor(F.reshape(1, 9), dtype=DTYPE)
        psi = float(energy.solid_energy(y, feats, mu, lam)[0]) * E          # dimensionless x Young's modulus
        assert psi == pytest.approx(mooney_rivlin_pa(F), rel=1e-9)
        # gradient and Hessian written out agree with the energy (finite differences)
        _, g, H = energy.solid(y, feats, mu, lam, project=False)
        fd = np.array([(float(energy.solid_energy(y + d, feats, mu, lam)[0]) - float(energy.solid_energy(y - d, feats, mu, lam)[0]))
                       / 2e-6 for d in 1e-6 * torch.eye(9, dtype=DTYPE)[:, None]])
        np.testing.assert_allclose(g[0].numpy(), fd, atol=1e-7)
        fdH = np.stack([(energy.solid(y + d, feats, mu, lam, need_hess=False)[1] - energy.solid(y - d, feats, mu, lam, need_hess=False)[1])[0].numpy()
                        / 2e-6 for d in 1e-6 * torch.eye(9, dtype=DTYPE)[:, None]])
        np.testing.assert_allclose(H[0].numpy(), fdH, atol=1e-5)
    # at rest nothing changes: the sliders' small-strain stiffness is the neo-Hookean prior's
    rest = torch.eye(3, dtype=DTYPE).reshape(1, 9)
    prior = StrainEnergy().solid(rest, StrainEnergy.features(resolve_material({"kind": "solid", "poisson": NU})), mu, lam, project=False)[2]
    torch.testing.assert_close(energy.solid(rest, feats, mu, lam, project=False)[2], prior)


def cloth_sheet(n=6):
    g = np.linspace(0.0, 1.0, n)
    xx, yy = np.meshgrid(g, g)
    verts = np.stack([xx.ravel(), yy.ravel(), np.zeros(n * n)], 1)
    faces = [[i * n + j, i * n + j + 1, (i + 1) * n + j + 1] for i in range(n - 1) for j in range(n - 1)]
    faces += [[i * n + j, (i + 1) * n + j + 1, (i + 1) * n + j] for i in range(n - 1) for j in range(n - 1)]
    return Mesh(verts, np.array(faces))


def test_a_learned_material_round_trips_through_a_checkpoint_and_scenes_can_name_it(tmp_path):
    model, _ = load_checkpoint(default_model_path())
    base = resolve_material({"kind": "cloth", "stiffness": 5e3, "density": 0.3, "bending": 1e-4})
    p = model.energy.add_preset("silk_test", base)
    with torch.no_grad():
        p[PRESET_PARAMETERS.index("log_bending")] = math.log(3.0)
        p[PRESET_PARAMETERS.index("log_damping")] = math.log(2.0)
    save_checkpoint(tmp_path / "m.ckpt", model)
    loaded, _ = load_checkpoint(tmp_path / "m.ckpt")
    loaded.requires_grad_(False)                      # as the engine runs it
    assert "silk_test" in known_presets()
    named = resolve_material({"preset": "silk_test", "density": 0.5})
    assert named.stiffness == 5e3 and named.density == 0.5 and named.preset == "silk_test"
    scene = {"format": "neurok.scene/1", "frames": 2, "material": {"preset": "silk_test"}}
    s = LatentScene(loaded, setup_from_scene(cloth_sheet(), scene))
    assert float(s.bending_scale()) == pytest.approx(3.0)
    assert float(s.damping_scales()[0]) == pytest.approx(2.0)
    plain = LatentScene(loaded, setup_from_scene(cloth_sheet(), dict(scene, material={"preset": "cloth"})))
    assert float(plain.bending_scale()) == pytest.approx(1.0)
    # a Mooney-Rivlin scene that names no learned material uses the learned rubber of its law
    rubber = _learned_rubber(0.6)
    assert rubber.preset_for(resolve_material({"kind": "solid", "law": "mooney_rivlin", "i2_share": 0.7})) == "rubber_test"
    assert rubber.preset_for(resolve_material({"kind": "solid"})) is None
    with pytest.raises(FormatError, match="unknown material preset 'nope'|unknown material preset \"nope\""):
        resolve_material({"preset": "nope"})


def _material_loss(model, data, material=None):
    """The training objective without noise, from fixed start frames: deterministic."""
    from engine.training.train import load_items, rollout_loss
    items = load_items(model, data, material=material)
    with torch.no_grad():
        return float(np.mean([float(rollout_loss(item, 3, t0=t0, noise=0.0)) for item in items for t0 in (1, 3)]))


@pytest.fixture(scope="module")
def rubber_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mr")
    generate(folder, 3, seed=5, frames=8, quiet=True, law={"law": "mooney_rivlin", "i2_share": SHARE})
    return folder


def test_generate_makes_mooney_rivlin_solids(rubber_data):
    from engine.core.formats import read_sequence
    for e in load_index(rubber_data):
        m = read_sequence(e["path"]).material
        assert m["kind"] == "solid" and m["law"] == "mooney_rivlin" and m["i2_share"] == SHARE


def test_learning_a_material_changes_that_material_only(rubber_data, tmp_path):
    init = default_model_path()
    out = tmp_path / "rubber.ckpt"
    model, history = train(rubber_data, out, init=init, steps=3, quiet=True, material="rubber_mine")
    assert len(history) == 3 and all(np.isfinite(h["dynamics"]) for h in history)
    learned = read_payload(out)
    before = read_payload(init)["state"]
    for key, value in before.items():
        torch.testing.assert_close(learned["state"][key], value, rtol=0, atol=0)   # nothing else moved
    p = learned["state"]["energy.presets.rubber_mine"]
    assert p.shape == (len(PRESET_PARAMETERS),) and bool(p.abs().max() > 0)
    loaded, meta = load_checkpoint(out)
    before, after = _material_loss(load_checkpoint(init)[0], rubber_data), _material_loss(loaded, rubber_data, "rubber_mine")
    print(f"[l] rollout loss on its data: {before:.6f} before, {after:.6f} after 3 steps")
    assert after < before, "learning a material lowers the loss on its data"
    assert loaded.energy.preset_materials["rubber_mine"]["law"] == "mooney_rivlin"
    assert meta["material"]["name"] == "rubber_mine" and meta["materials"]["rubber_mine"]["steps"] == 3
    init_meta = json.loads(read_payload(init)["meta"])
    assert meta["omega2_range"] == init_meta["omega2_range"], "the model's own record (familiarity ranges) is kept"
    # the learned rubber answers scenes of its law
    assert loaded.energy.preset_for(resolve_material({"kind": "solid", "law": "mooney_rivlin", "i2_share": SHARE})) == "rubber_mine"


def test_a_built_in_material_name_cannot_be_learned_over(rubber_data, tmp_path):
    with pytest.raises(NeurokError, match="built-in"):
        train(rubber_data, tmp_path / "x.ckpt", steps=1, quiet=True, material="rubber")


def test_a_material_of_known_stiffness_learns_only_what_its_law_leaves_open(rubber_data, tmp_path):
    """`--learn damping,air_damping,i2_term`: the stiffness, lambda and bending multipliers stay exactly 1,
    so a scene's stiffness in Pa still means Pa with the learned rubber."""
    out = tmp_path / "law.ckpt"
    train(rubber_data, out, steps=3, quiet=True, material="rubber_law", learn=["damping", "air_damping", "i2_term"])
    p = read_payload(out)["state"]["energy.presets.rubber_law"]
    held = [PRESET_PARAMETERS.index(n) for n in ("log_stiffness", "log_lambda", "log_bending")]
    assert bool((p[held] == 0).all()) and bool(p.abs().max() > 0)
    with pytest.raises(NeurokError, match="unknown material number 'stretch'"):
        train(rubber_data, tmp_path / "bad.ckpt", steps=1, quiet=True, material="rubber_law", learn=["stretch"])
