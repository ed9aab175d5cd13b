"""Training end to end on a tiny real data set: generate 4 short sequences with the reference
simulator, train through all three stages (autoencoder, Euler-Lagrange, rollouts), check that
the model improved on its data, replay a sequence through `neurok simulate`, and resume.

Sized for a loaded 2-core machine: about a minute in all.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.learned.checkpoint import load_checkpoint
from engine.cli import main
from engine.learned.dynamics import decode, encode
from engine.core.formats import read_sequence
from engine.training.generate import generate, load_index
from engine.learned.model import NeurokModel
from engine.learned.latent_scene import LatentScene
from engine.learned.runtime import NeurokEngine, NeurokRun
from engine.training.train import AUTOENCODER_SHARE, EULER_LAGRANGE_SHARE, load_items, mass_rms, train

STEPS = 20          # 3 autoencoder, 2 Euler-Lagrange, 15 rollout steps
MORE_STEPS = 24     # the resumed run adds 4
SEED = 0            # train()'s default seed: the initial model is manual_seed(0); NeurokModel()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    result = generate(folder, 4, seed=3, frames=12, quiet=True)
    assert result["written"] == 4
    splits = [e["split"] for e in load_index(folder)]
    assert splits.count("train") >= 2, splits       # seed 3: three train sequences, one held out
    return folder


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "tiny.ckpt"
    model, history = train(data, out, steps=STEPS, seed=SEED, quiet=True)
    return out, model, history


def _fit(model, items):
    """(mean projection error of every frame, mean rel. error of a full runtime rollout), both
    in bounding-box diagonals, over the training sequences. Deterministic: no noise injected."""
    proj, roll = [], []
    with torch.no_grad():
        for item in items:
            scene = LatentScene(model, item.setup, mt=item.mt)
            back = decode(scene.red, scene.mt, encode(scene.red, scene.mt, item.xs))
            proj.append(float(mass_rms(item.mt.mu, back - item.xs).mean()))
            pred = NeurokRun(model, item.setup).bake()
            true = item.mt.norm.inverse(item.xs.numpy())
            roll.append(float(np.linalg.norm(pred - true, axis=2).mean()) / item.mt.norm.scale)
    return float(np.mean(proj)), float(np.mean(roll))


def test_training_runs_all_stages_and_improves_the_fit(data, trained):
    out, model, history = trained
    assert len(history) == STEPS and [h["step"] for h in history] == list(range(1, STEPS + 1))
    stages = [h["stage"] for h in history]
    n_ae = sum(k / STEPS < AUTOENCODER_SHARE for k in range(STEPS))                       # 3
    n_el = sum(AUTOENCODER_SHARE <= k / STEPS < AUTOENCODER_SHARE + EULER_LAGRANGE_SHARE for k in range(STEPS))  # 2
    assert n_ae >= 2 and n_el >= 1
    assert stages == ["autoencoder"] * n_ae + ["euler_lagrange"] * n_el + ["rollout"] * (STEPS - n_ae - n_el)
    for h in history:
        assert np.isfinite(h["recon"]) and h["recon"] > 0
        if h["stage"] == "euler_lagrange":
            assert np.isfinite(h["el"])
        if h["stage"] == "rollout":
            assert np.isfinite(h["rollout"]) and 0 < h["rollout"] < 1.0
    items = load_items(data)
    torch.manual_seed(SEED)
    before = _fit(NeurokModel(), items)
    after = _fit(load_checkpoint(out)[0], items)
    assert after[0] < 0.9 * before[0], (before, after)     # the basis spans the data better
    assert after[1] < before[1], (before, after)           # and the dynamics follow it better
    assert after[1] < 0.5


def test_the_trained_checkpoint_loads_with_its_statistics(data, trained):
    out, model, _ = trained
    loaded, meta = load_checkpoint(out)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    assert meta["steps"] == STEPS and meta["sequences"] == 3
    assert {"recon", "rollout"} <= set(meta["final_losses"])
    assert all(np.isfinite(v) for v in meta["final_losses"].values())
    assert len(meta["shape_code_stats"]["mean"]) == loaded.cfg.shape_code
    # a training sequence is inside the material range the checkpoint records
    item = load_items(data)[0]
    report = NeurokEngine(out).prepare(item.setup).ood
    assert {"force", "shape", "material"} <= set(report["parts"]) and report["parts"]["material"] == 0.0


def test_simulate_replays_a_sequence_with_the_trained_model(data, trained, tmp_path, capsys):
    out, _, _ = trained
    source = next(e for e in load_index(data) if e["split"] == "train")["path"]
    dest = tmp_path / "replay.npz"
    code = main(["simulate", "--engine", "neurok", "--model", str(out), "--replay", source, "--out", str(dest),
                 "--device", "cpu"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "wrote 12 frames" in captured.out
    original, replay = read_sequence(source), read_sequence(dest)
    assert replay.positions.shape == original.positions.shape
    assert np.all(np.isfinite(replay.positions))
    np.testing.assert_array_equal(replay.positions[0], original.positions[0])
    np.testing.assert_array_equal(replay.faces, original.faces)
    assert replay.meta.get("engine") == "neurok"
    diag = float(np.linalg.norm(np.ptp(original.rest, axis=0)))
    assert np.linalg.norm(replay.positions - original.positions, axis=2).mean() < 0.5 * diag


def test_training_again_resumes_from_the_saved_step(data, trained):
    out, _, _ = trained
    resume = out.with_name(out.name + ".resume")
    assert resume.is_file()
    _, history = train(data, out, steps=MORE_STEPS, seed=SEED, quiet=True)
    assert [h["step"] for h in history] == list(range(STEPS + 1, MORE_STEPS + 1))
    assert all(h["stage"] == "rollout" for h in history)      # it picks up late in the schedule
    _, meta = load_checkpoint(out)
    assert meta["steps"] == MORE_STEPS
    # nothing left to do: the same budget again is a no-op
    _, history = train(data, out, steps=MORE_STEPS, seed=SEED, quiet=True)
    assert history == [] and load_checkpoint(out)[1]["steps"] == MORE_STEPS


@pytest.mark.parametrize("folder", ("missing", "empty"))
def test_train_cli_reports_a_bad_data_folder_in_one_line(tmp_path, capsys, folder):
    data = tmp_path / folder
    if folder == "empty":
        data.mkdir()
    out = tmp_path / "m.ckpt"
    code = main(["train", "--data", str(data), "--out", str(out), "--steps", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("neurok train: error:") and str(data) in err
    assert "Traceback" not in err and not out.exists()
