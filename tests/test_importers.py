"""Foreign 4D data (engine/importers.py, tools/bake_blender_cloth.py): PC2/MDD + mesh -> sequence,
one-line errors, Blender's cloth units, and a tiny bake with Blender's own cloth solver whose
sequences the trainer accepts."""
from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import pytest

from engine.core.formats import FormatError, Mesh, read_sequence, write_obj, write_pc2, write_sequence
from engine.training.importers import (blender_cloth_gravity, blender_cloth_material, import_mdd, import_pc2,
                              import_point_cache, read_mdd, sequence_from_point_cache, write_mdd)
from engine.core.scene import setup_from_sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import bake_blender_cloth as bake  # noqa: E402

CLOTH = {"kind": "cloth", "stiffness": 2e3, "density": 0.3, "bending": 1e-4, "damping": 0.005}


def sheet(res=4):
    verts, quads, tris = bake.grid(res, 1.0)
    return verts, tris


def swinging(verts, frames=5, dt=1 / 24):
    """Frames of a sheet whose far edge droops a little more each frame."""
    t = np.arange(frames)[:, None, None]
    droop = np.zeros_like(verts)
    droop[:, 2] = -0.1 * (verts[:, 1] - verts[:, 1].min())
    return (verts[None] + t * droop[None]).astype(np.float32)


def one_line(excinfo, *words):
    msg = str(excinfo.value)
    assert isinstance(excinfo.value, FormatError) and "\n" not in msg, repr(msg)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    return msg


# --------------------------------------------------------------------------- PC2 and MDD

def test_pc2_obj_round_trip(tmp_path):
    verts, tris = sheet()
    pos = swinging(verts, 6)
    write_obj(tmp_path / "sheet.obj", Mesh(verts, tris))
    write_pc2(tmp_path / "sheet.pc2", pos, start_frame=1.0, sample_rate=1.0)
    pins = (verts[:, 1] == verts[:, 1].min()).astype(float)
    seq = import_pc2(tmp_path / "sheet.pc2", tmp_path / "sheet.obj", dt=1 / 24, material=CLOTH,
                     gravity=(0, 0, -9.81), pin_weight=pins, meta={"split": "train", "note": "test"})
    write_sequence(tmp_path / "seq.npz", seq)
    back = read_sequence(tmp_path / "seq.npz")
    np.testing.assert_allclose(back.rest, verts, atol=1e-6)
    np.testing.assert_array_equal(back.faces, tris)
    np.testing.assert_allclose(back.positions, pos, atol=1e-6)
    np.testing.assert_allclose(back.pin_weight, pins)
    np.testing.assert_allclose(back.pin_target, pos, atol=1e-6)  # recorded pinned positions
    np.testing.assert_allclose(back.gravity, [0, 0, -9.81], atol=1e-6)
    assert back.dt == pytest.approx(1 / 24) and back.frames == 6
    assert back.material["kind"] == "cloth" and back.material["stiffness"] == 2e3
    assert back.meta["source"] == "PC2" and back.meta["note"] == "test"
    assert back.external_accel is None  # only gravity and pins
    setup = setup_from_sequence(back)  # what replay and training build
    assert setup.frames == 6 and setup.pin_weight.sum() == pins.sum()


def test_pin_target_frame0_and_velocity(tmp_path):
    verts, tris = sheet()
    pos = swinging(verts, 4)
    seq = sequence_from_point_cache(verts, tris, pos, 0.04, (0, 0, -9.81), CLOTH,
                                    pin_weight=np.ones(len(verts)), pin_target="frame0", velocity0="difference")
    np.testing.assert_allclose(seq.pin_target, np.repeat(pos[:1], 4, axis=0))
    np.testing.assert_allclose(seq.velocity0, (pos[1] - pos[0]) / 0.04, atol=1e-5)


def test_mdd_reader_on_a_handwritten_file(tmp_path):
    rng = np.random.default_rng(0)
    frames, points = 3, 5
    pos = rng.normal(size=(frames, points, 3)).astype(np.float32)
    times = [0.0, 0.04, 0.08]
    body = struct.pack(">ii", frames, points) + struct.pack(f">{frames}f", *times)
    for f in range(frames):
        for p in range(points):
            body += struct.pack(">fff", *pos[f, p])
    (tmp_path / "a.mdd").write_bytes(body)
    got, t = read_mdd(tmp_path / "a.mdd")
    np.testing.assert_array_equal(got, pos)
    np.testing.assert_allclose(t, times, atol=1e-7)
    write_mdd(tmp_path / "b.mdd", pos, times)  # our writer makes the same bytes
    assert (tmp_path / "b.mdd").read_bytes() == body


def test_mdd_import_takes_dt_from_frame_times(tmp_path):
    verts, tris = sheet()
    pos = swinging(verts, 5)
    write_obj(tmp_path / "m.obj", Mesh(verts, tris))
    write_mdd(tmp_path / "m.mdd", pos, dt=1 / 30)
    seq = import_point_cache(tmp_path / "m.mdd", tmp_path / "m.obj", None, CLOTH)
    assert seq.dt == pytest.approx(1 / 30, rel=1e-5)
    np.testing.assert_allclose(seq.positions, pos, atol=1e-6)


def test_mdd_truncated_is_one_line(tmp_path):
    body = struct.pack(">ii", 2, 4) + struct.pack(">2f", 0, 1) + b"\0" * 20
    (tmp_path / "t.mdd").write_bytes(body)
    with pytest.raises(FormatError) as e:
        read_mdd(tmp_path / "t.mdd")
    one_line(e, "t.mdd", "bytes")


def test_vertex_count_mismatch_is_one_line(tmp_path):
    verts, tris = sheet(4)
    write_obj(tmp_path / "mesh.obj", Mesh(verts, tris))
    write_pc2(tmp_path / "other.pc2", swinging(sheet(5)[0], 3))
    with pytest.raises(FormatError) as e:
        import_pc2(tmp_path / "other.pc2", tmp_path / "mesh.obj", 1 / 24, CLOTH)
    one_line(e, "other.pc2", "25 points", "16 vertices")
    write_mdd(tmp_path / "other.mdd", swinging(sheet(5)[0], 3))
    with pytest.raises(FormatError) as e:
        import_mdd(tmp_path / "other.mdd", tmp_path / "mesh.obj", 1 / 24, CLOTH)
    one_line(e, "25 points", "16 vertices")


def test_unknown_material_key_and_bad_pins_are_one_line():
    verts, tris = sheet()
    pos = swinging(verts, 2)
    with pytest.raises(FormatError) as e:
        sequence_from_point_cache(verts, tris, pos, 0.04, (0, 0, -9.81), dict(CLOTH, blender={"mass": 0.3}))
    one_line(e, "unknown material key")
    with pytest.raises(FormatError) as e:
        sequence_from_point_cache(verts, tris, pos, 0.04, (0, 0, -9.81), CLOTH, pin_weight=np.ones(3))
    one_line(e, "pin_weight")


def test_blender_y_up_export_is_detected(tmp_path):
    verts, tris = sheet()
    pos = swinging(verts, 3)
    y_up = np.stack([verts[:, 0], verts[:, 2], -verts[:, 1]], axis=1)  # what Blender's OBJ export writes
    write_obj(tmp_path / "y.obj", Mesh(y_up, tris))
    write_pc2(tmp_path / "y.pc2", pos)
    seq = import_pc2(tmp_path / "y.pc2", tmp_path / "y.obj", 1 / 24, CLOTH)
    np.testing.assert_allclose(seq.rest, verts, atol=1e-6)
    assert "Y-up" in seq.meta["import_note"]


def test_importer_command_line(tmp_path):
    verts, tris = sheet()
    write_obj(tmp_path / "c.obj", Mesh(verts, tris))
    write_pc2(tmp_path / "c.pc2", swinging(verts, 3))
    ok = subprocess.run([sys.executable, "-m", "engine.training.importers", "--cache", str(tmp_path / "c.pc2"),
                         "--mesh", str(tmp_path / "c.obj"), "--out", str(tmp_path / "c.npz"), "--pins", "0,1,2"],
                        cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert read_sequence(tmp_path / "c.npz").pin_weight.sum() == 3
    write_pc2(tmp_path / "bad.pc2", swinging(sheet(5)[0], 3))
    bad = subprocess.run([sys.executable, "-m", "engine.training.importers", "--cache", str(tmp_path / "bad.pc2"),
                          "--mesh", str(tmp_path / "c.obj"), "--out", str(tmp_path / "x.npz")],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "vertices" in bad.stderr


# --------------------------------------------------------------------------- Blender units and plans

def test_blender_cloth_units():
    np.testing.assert_allclose(blender_cloth_gravity((0, 0, -9.81), 24), [0, 0, -5.65056], rtol=1e-6)
    assert not blender_cloth_gravity(use_gravity=False).any()
    m = blender_cloth_material(bake.BLENDER_DEFAULTS, 24, spring_length=0.05, area_per_vertex=1 / 441)
    assert m["stiffness"] == pytest.approx(15 / 0.05 * 24 ** 2)
    assert m["density"] == pytest.approx(0.3 * 441)
    assert m["air_damping"] == pytest.approx(0.8)
    assert set(m) <= {"kind", "preset", "stiffness", "density", "poisson", "damping", "air_damping", "bending"}


def test_bake_plans_are_deterministic_and_vary():
    a, b = bake.plan_sequence(0, 7), bake.plan_sequence(0, 7)
    assert a == b and a != bake.plan_sequence(1, 7)
    modes = {bake.plan_sequence(0, i)["pin_mode"] for i in range(4)}
    assert modes == set(bake.PIN_MODES)
    for i in range(8):
        s = bake.plan_sequence(0, i)["settings"]
        assert 0.7 * 15 <= s["tension_stiffness"] <= 1.3 * 15 and 0.7 * 0.5 <= s["bending_stiffness"] <= 1.3 * 0.5
    counts = {m: int(bake.pin_weights(m, 2, 21).sum()) for m in bake.PIN_MODES}
    assert counts == {"edge": 21, "two_corners": 8, "one_corner": 4, "edge_middle": 3}
    flat = bake.grid(5)[0]
    bent = bake.bend(flat, 1.5, 0.4)  # isometric: grid edges keep their length (up to arc vs chord)
    _, quads, _ = bake.grid(5)
    e = np.concatenate([quads[:, [0, 1]], quads[:, [1, 2]]])
    np.testing.assert_allclose(np.linalg.norm(bent[e[:, 0]] - bent[e[:, 1]], axis=1),
                               np.linalg.norm(flat[e[:, 0]] - flat[e[:, 1]], axis=1), rtol=1e-2)  # chords of arcs


# --------------------------------------------------------------------------- Blender's own cloth solver

CHILD = """
import json, sys
sys.path.insert(0, {tools!r})
import bake_blender_cloth as bake
print(json.dumps(bake.bake_dataset({out!r}, sequences=2, frames=6, seed=3, resolution=5, validation=1, quiet=True)))
"""


@pytest.mark.blender
@pytest.mark.skipif(importlib.util.find_spec("bpy") is None, reason="bpy is not installed")
def test_tiny_blender_cloth_bake_trains(tmp_path):
    runs = []
    for name in ("a", "b"):  # bpy state stays in the child processes
        out = tmp_path / name
        r = subprocess.run([sys.executable, "-c", CHILD.format(tools=str(ROOT / "tools"), out=str(out))],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(out)
    index = json.loads((runs[0] / "index.json").read_text())
    assert [e["split"] for e in index["sequences"]] == ["train", "validation"]
    assert {e["family"] for e in index["sequences"]} == {"blender_cloth"}
    for e in index["sequences"]:
        seq = read_sequence(runs[0] / e["file"])
        assert seq.positions.shape == (6, 25, 3) and np.all(np.isfinite(seq.positions))
        assert seq.pin_weight.sum() > 0 and seq.vertex_mass is not None
        np.testing.assert_allclose(seq.positions[0], seq.rest, atol=1e-6)   # starts at rest
        pinned = seq.pin_weight > 0
        np.testing.assert_allclose(seq.positions[:, pinned], seq.positions[:1, pinned].repeat(6, 0), atol=1e-5)
        assert np.abs(seq.positions[-1] - seq.positions[0]).max() > 1e-3  # Blender's cloth moved it
        assert seq.meta["blender"]["settings"]["quality"] == 5
        again = read_sequence(runs[1] / e["file"])
        np.testing.assert_array_equal(seq.positions, again.positions)     # deterministic per seed
    from engine.learned.model import NeurokModel
    from engine.training.train import load_items
    model = NeurokModel()
    train_items = load_items(model, runs[0], ("train",))
    val_items = load_items(model, runs[0], ("validation",))
    assert len(train_items) == 1 and len(val_items) == 1
    item = train_items[0]
    assert item.positions.shape == (6, 25, 3) and item.setup.material.kind == "cloth"
    assert item.qs.shape == (6, item.scene.dims) and bool(torch.isfinite(item.qs).all())
