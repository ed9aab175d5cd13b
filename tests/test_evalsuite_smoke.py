"""CI smoke test of the evaluation suite (`make eval-small` / `make eval` run the real presets):
a shrunken small preset end to end — eval set, baselines, eval, stress, bench and the report."""
import json

import pytest
import torch

from engine.learned.checkpoint import save_checkpoint
from engine.evaluation.suite import run_suite
from engine.learned.model import NeurokModel


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def test_small_preset_writes_a_report(tmp_path):
    torch.manual_seed(0)
    model = tmp_path / "m.ckpt"
    save_checkpoint(model, NeurokModel())
    report = run_suite("small", tmp_path / "out", model_path=str(model), docs_dir=tmp_path / "docs",
                       sequences=2, heldout=1, frames=12, mlp_minutes=0.05, long_frames=20,
                       force_scales=(1.0, 100.0), stress_frames=6, resolutions=(300,), truth_max_vertices=400,
                       bench_sizes=(300,), bench_frames=2)
    text = open(report).read()
    assert "rel_l2" in text and "ms" in text
    result = json.loads((tmp_path / "out" / "small" / "eval.json").read_text())
    assert set(result["splits"]) >= {"heldout"} and "hold_still" in result["baselines"]
