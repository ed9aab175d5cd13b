"""CI smoke test of the evaluation suite (`make eval-small` / `make eval` run the real presets):
a shrunken small preset end to end — eval set, baselines and oracle, held-out scenes with
contact sheets and a GIF, the beam, stress, bench and the report from its template."""
import json

import pytest
import torch
from PIL import Image

from engine.learned.checkpoint import save_checkpoint
from engine.evaluation.key_figures import read_figures, readme_table, scenes_table
from engine.evaluation.suite import rebuild_report, run_suite
from engine.learned.model import NeurokModel


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_small_preset_writes_a_report(tmp_path):
    torch.manual_seed(0)
    model = tmp_path / "m.ckpt"
    save_checkpoint(model, NeurokModel())
    docs = tmp_path / "docs"
    report = run_suite("small", tmp_path / "out", model_path=str(model), docs_dir=docs, data_dir=tmp_path / "data",
                       sequences=2, heldout=1, frames=12, mlp_minutes=0.05, long_frames=20,
                       force_scales=(1.0, 100.0), stress_frames=6, resolutions=(300,), truth_max_vertices=400,
                       bench_sizes=(300,), bench_frames=2, scenes=("toy_drop", "torus", "flag_wind"), scene_frames=8,
                       noise_scenes=("torus",), noise_frames=3, noise_sequences=1, beam_frames=12, gif_frames=4,
                       energy_steps=10, truth_lattice=4, set_lattice=4)   # ground truth on the generator's lattice: fast
    text = open(report).read()
    assert "$" not in text.replace("$$", "")                      # every template field was filled
    headline = text.split("## Headline", 1)[1]
    assert "volume min" in headline.split("\n|")[1] and "oracle" in headline and "noise floor" in headline
    assert "## Where the model falls short" in text and "## Physical quantities" in text
    for name in ("toy_drop", "torus"):
        sheet = docs / "figures" / f"eval_{name}_sheet.png"
        gif = docs / "figures" / f"eval_{name}.gif"
        assert f"figures/eval_{name}_sheet.png" in text and f"figures/eval_{name}.gif" in text
        assert Image.open(sheet).size[0] > 600
        with Image.open(gif) as g:
            assert g.format == "GIF" and g.n_frames >= 2
    out = tmp_path / "out" / "small"
    result = json.loads((out / "eval.json").read_text())
    assert set(result["splits"]) >= {"heldout"} and {"hold_still", "oracle"} <= set(result["baselines"])
    assert result["model_latent"] == 96 and result["baselines_info"]["oracle"]["handles"] == "per mesh"   # as the model's
    assert set(result["energy_drift"]) == {"backward_euler", "implicit_midpoint"}               # measured, not "not available"
    assert result["splits"]["all"]["plausibility"]["strain_mean"] is not None
    assert result["reference"]["all"]["plausibility"]["strain_mean"] is not None
    scenes = json.loads((out / "scenes.json").read_text())
    assert [r["name"] for r in scenes["scenes"]] == ["toy_drop", "torus", "flag_wind"]
    flag = scenes["scenes"][2]["cloth"]                           # the sheets' own measures, in the report too
    assert flag["far_edge_fall_4"]["reference"] > 0.02 and flag["crossing_pairs"]["neurok"] >= 0
    assert "crossing triangle pairs a frame" in text
    beam = json.loads((out / "beam.json").read_text())
    assert beam["quantities"]["reference"]["sag"] > 0
    figures = read_figures(docs / "EVALUATION.json")             # the run's figures file, beside its report
    assert figures["preset"] == "small" and set(figures["scenes"]) == {"toy_drop", "torus", "flag_wind"}
    assert figures["scenes"]["flag_wind"]["far_edge_fall_4"]["reference"] > 0.02
    assert "toy_drop" in scenes_table(figures) and "`make eval-small` (small preset)" in readme_table(figures)
    assert rebuild_report("small", tmp_path / "out", docs) == docs / "EVALUATION.md"
