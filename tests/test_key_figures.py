"""The documents' tables are the full evaluation's figures, from one file: README.md and
docs/MODEL_CARD.md agree with docs/EVALUATION.json, a changed figure is caught, and a measured
target that was missed is reported as missed."""
import copy
import re
import shutil

from engine.cli import main
from engine.evaluation.key_figures import ROOT, TABLES, read_figures, stale_tables, write_tables
from engine.evaluation.targets import energy_target

DATED = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b|\b(January|February|March|April|May|June|July|August|September|October|"
                   r"November|December) 20\d\d\b")


def test_the_documents_tables_are_the_committed_figures_file():
    figures = read_figures()
    assert figures["preset"] == "full" and figures["command"] == "make eval"
    assert stale_tables(ROOT, figures) == []
    assert main(["figures", "--check"]) == 0


def test_the_documents_stay_short_and_undated():
    readme, card = (ROOT / "README.md").read_text(), (ROOT / "docs/MODEL_CARD.md").read_text()
    assert len(readme.splitlines()) <= 180 and len(card.splitlines()) <= 300
    assert not DATED.search(readme) and not DATED.search(card)


def test_a_figure_that_moved_is_caught_and_written(tmp_path):
    for rel in TABLES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    figures = copy.deepcopy(read_figures())
    scene = figures["scenes"]["toy_drop"]
    scene["rel_l2"] = round(scene["rel_l2"] + 0.01, 4)            # the toy's distance moved: in both documents
    assert stale_tables(tmp_path, figures) == [tmp_path / "README.md", tmp_path / "docs/MODEL_CARD.md"]
    write_tables(tmp_path, figures)
    assert stale_tables(tmp_path, figures) == []
    assert f"{scene['rel_l2']:.3f}" in (tmp_path / "docs/MODEL_CARD.md").read_text()
    outside = (tmp_path / "README.md").read_text().split("<!-- figures:readme")[0]
    assert outside == (ROOT / "README.md").read_text().split("<!-- figures:readme")[0]   # the rest untouched


def _drift(**per_mesh):
    return {"energy_drift_detail": {"steps": 1000, "per_mesh": {
        mesh: {"implicit_midpoint": {"max": drift, "steps": steps}} for mesh, (drift, steps) in per_mesh.items()}}}


def test_an_energy_run_that_blew_up_is_a_missed_target_not_an_unmeasured_one():
    name, measured, verdict = energy_target(_drift(jelly=(0.0798, 1000), flag=(None, 45)))
    assert verdict == "missed" and "flag blew up at step 45" in measured and "jelly 7.98%" in measured
    assert energy_target(_drift(jelly=(0.004, 1000), soft_toy=(0.009, 1000)))[2] == "met"
    assert energy_target({})[2] == "not measured"


def test_the_self_collision_and_full_layer_rows_are_their_own_and_judge_no_target():
    """`neurok bench`'s cloth rows with self-collision and with the layer on every vertex are filed
    apart from the plain layered row (the default run's, on its proxy), and the creasing sheet's
    speed target is judged on the plain one."""
    from engine.evaluation.key_figures import _speed
    from engine.evaluation.targets import _sheet_speed
    row = lambda ms, **extra: dict({"engine": "neurok_cloth", "device": "cpu", "vertices": 10000,  # noqa: E731
                                    "ms_per_frame": ms, "encode_ms": 1000.0, "sheet_layer": True}, **extra)
    bench = {"rows": [row(300.0, self_collision=True), row(150.0), row(400.0, full_layer=True),
                      {"engine": "blender_cloth_sheet", "device": "cpu", "vertices": 10000, "ms_per_frame": 150.0,
                       "encode_ms": 40.0}]}
    speed = _speed(bench)
    assert speed["cloth_layer"] == [[10000, 150.0, 1.0]] and speed["cloth_self_collision"] == [[10000, 300.0, 1.0]]
    assert speed["cloth_full_layer"] == [[10000, 400.0, 1.0]]
    _, text, verdict = _sheet_speed(bench)
    assert text.startswith("150 ms/frame") and "1.00x" in text and verdict == "missed"
