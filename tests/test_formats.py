"""File formats (engine/formats.py) and scene validation (engine/scene.py): round trips, one-line
errors for malformed input, atomic writes, and property-based checks that readers only ever
raise FormatError."""
import io
import json
import os
import struct
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from engine.core.formats import (PC2_MAGIC, SCENE_FORMAT, SEQUENCE_FORMAT, FormatError, Mesh, Sequence,
                                 atomic_write_bytes, read_mesh, read_pc2, read_sequence, sequence_from_arrays,
                                 write_obj, write_pc2, write_sequence)
from engine.core.scene import (MATERIAL_PRESETS, PROFILE_TYPES, read_scene, setup_from_scene, setup_from_sequence,
                               validate_scene, write_scene)
from engine.core.setup import Setup

REQUIRED = ("format", "rest", "faces", "positions", "dt", "gravity", "material")
OPTIONAL = ("external_accel", "velocity0", "pin_weight", "pin_target", "vertex_mass")
# NEUROK_HYPOTHESIS_EXAMPLES=5000 for a longer hunt
FAST = settings(max_examples=int(os.environ.get("NEUROK_HYPOTHESIS_EXAMPLES", 150)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# --------------------------------------------------------------------------- helpers

def one_line_error(excinfo, *words):
    """The error is a FormatError with a one-line message containing every word."""
    err = excinfo.value
    assert isinstance(err, FormatError)
    message = str(err)
    assert message and "\n" not in message and "\r" not in message, repr(message)
    for w in words:
        assert w in message, f"{w!r} not in {message!r}"
    return message


def tetra_mesh():
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
    f = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    return Mesh(v, f)


def full_sequence(T=4, N=5, seed=0) -> Sequence:
    rng = np.random.default_rng(seed)
    rest = rng.normal(size=(N, 3)).astype(np.float32)
    return Sequence(
        rest=rest, faces=np.array([[0, 1, 2], [2, 3, 4]], np.int32),
        positions=(rest[None] + 0.01 * rng.normal(size=(T, N, 3))).astype(np.float32),
        dt=1.0 / 30.0, gravity=np.array([0, 0, -9.81], np.float32),
        material={"kind": "solid", "stiffness": 1e5, "density": 1000.0, "poisson": 0.4, "damping": 0.01, "bending": 0.0},
        external_accel=rng.normal(size=(T, N, 3)).astype(np.float32),
        velocity0=rng.normal(size=(N, 3)).astype(np.float32),
        pin_weight=np.array([1, 0, 0.5, 0, 0], np.float32),
        pin_target=rng.normal(size=(T, N, 3)).astype(np.float32),
        vertex_mass=rng.uniform(0.1, 1.0, size=N).astype(np.float32),
        floor_z=-0.25, meta={"source": "test", "seed": 7})


def raw_arrays(seq: Sequence) -> dict:
    """The arrays write_sequence would store, as a dict."""
    arrays = {
        "format": np.array(SEQUENCE_FORMAT), "rest": seq.rest, "faces": seq.faces, "positions": seq.positions,
        "dt": np.array(seq.dt), "gravity": seq.gravity, "material": np.array(json.dumps(seq.material)),
        "meta": np.array(json.dumps(seq.meta)),
        "floor_z": np.array(np.nan if seq.floor_z is None else seq.floor_z),
    }
    for key in OPTIONAL:
        if getattr(seq, key) is not None:
            arrays[key] = getattr(seq, key)
    return arrays


def save_npz(path, arrays):
    np.savez(path, **arrays)
    return path


# --------------------------------------------------------------------------- sequences

def test_sequence_round_trip_keeps_every_key(tmp_path):
    seq = full_sequence()
    write_sequence(tmp_path / "s.npz", seq)
    back = read_sequence(tmp_path / "s.npz")
    for key in ("rest", "positions", "gravity") + OPTIONAL:
        np.testing.assert_array_equal(getattr(back, key), getattr(seq, key), err_msg=key)
        assert getattr(back, key).dtype == np.float32, key
    np.testing.assert_array_equal(back.faces, seq.faces)
    assert back.faces.dtype == np.int32
    assert back.dt == pytest.approx(seq.dt, rel=1e-12)
    assert back.material == seq.material
    assert back.meta == seq.meta
    assert back.floor_z == pytest.approx(-0.25)
    assert back.frames == 4 and back.num_vertices == 5


def test_sequence_writer_never_drops_required_keys(tmp_path):
    seq = full_sequence()
    for key in OPTIONAL:
        setattr(seq, key, None)
    write_sequence(tmp_path / "s.npz", seq)
    with np.load(tmp_path / "s.npz") as z:
        assert set(REQUIRED) <= set(z.files)
        assert str(z["format"]) == SEQUENCE_FORMAT
        assert not set(OPTIONAL) & set(z.files)


def test_sequence_optional_keys_absent_read_as_none(tmp_path):
    seq = full_sequence()
    arrays = {k: v for k, v in raw_arrays(seq).items() if k in REQUIRED}
    back = read_sequence(save_npz(tmp_path / "min.npz", arrays))
    for key in OPTIONAL:
        assert getattr(back, key) is None, key
    assert back.floor_z is None
    assert back.meta == {}
    # floor_z NaN also means no floor, and writing None stores NaN
    seq.floor_z = None
    write_sequence(tmp_path / "nofloor.npz", seq)
    assert read_sequence(tmp_path / "nofloor.npz").floor_z is None


def test_sequence_reader_ignores_unknown_keys(tmp_path):
    arrays = raw_arrays(full_sequence())
    arrays["future_key"] = np.arange(7)
    arrays["notes"] = np.array("hello")
    back = read_sequence(save_npz(tmp_path / "extra.npz", arrays))
    np.testing.assert_array_equal(back.positions, arrays["positions"])


def test_sequence_reader_accepts_float64_and_int64(tmp_path):
    arrays = raw_arrays(full_sequence())
    arrays["rest"] = arrays["rest"].astype(np.float64)
    arrays["faces"] = arrays["faces"].astype(np.int64)
    back = read_sequence(save_npz(tmp_path / "wide.npz", arrays))
    assert back.rest.dtype == np.float32 and back.faces.dtype == np.int32


@pytest.mark.parametrize("key", REQUIRED)
def test_sequence_missing_required_key(tmp_path, key):
    arrays = raw_arrays(full_sequence())
    del arrays[key]
    with pytest.raises(FormatError) as e:
        read_sequence(save_npz(tmp_path / "bad.npz", arrays))
    one_line_error(e, f"'{key}'", "missing")


BAD_VALUES = [
    ("positions", lambda a: a["positions"][:, :-1], ["'positions'", "shape"]),
    ("positions", lambda a: a["positions"][0], ["'positions'", "shape"]),
    ("positions", lambda a: a["positions"][:0], ["'positions'", "no frames"]),
    ("rest", lambda a: np.where(np.arange(15).reshape(5, 3) == 4, np.nan, a["rest"]).astype(np.float32), ["'rest'", "NaN"]),
    ("rest", lambda a: a["rest"][:, :2], ["'rest'", "shape"]),
    ("rest", lambda a: a["rest"].astype(np.int32), ["'rest'", "floating"]),
    ("faces", lambda a: np.array([[0, 1, 9]], np.int32), ["'faces'", "vertex 9"]),
    ("faces", lambda a: np.array([[0, 1, -1]], np.int32), ["'faces'", "index -1"]),
    ("faces", lambda a: np.array([[0, 1, 2**32]], np.uint64), ["'faces'"]),
    ("faces", lambda a: a["faces"].astype(np.float32), ["'faces'", "integer"]),
    ("dt", lambda a: np.array(0.0), ["'dt'"]),
    ("dt", lambda a: np.array(-0.1), ["'dt'"]),
    ("dt", lambda a: np.array(np.nan), ["'dt'"]),
    ("dt", lambda a: np.array([0.1, 0.2]), ["'dt'"]),
    ("dt", lambda a: np.array("soon"), ["'dt'"]),
    ("gravity", lambda a: np.zeros(2, np.float32), ["'gravity'", "shape"]),
    ("material", lambda a: np.array(json.dumps({"kind": "liquid"})), ["'kind'", "liquid"]),
    ("material", lambda a: np.array(json.dumps({"kind": "so\nlid"})), ["'kind'"]),
    ("material", lambda a: np.array("{not json"), ["'material'", "JSON"]),
    ("material", lambda a: np.array("[1, 2]"), ["'material'", "object"]),
    ("format", lambda a: np.array("neurok.sequence/0"), ["'format'"]),
    ("format", lambda a: np.array([["a", "b"], ["c", "d"]]), ["'format'"]),
    ("meta", lambda a: np.array("]"), ["'meta'"]),
    ("floor_z", lambda a: np.array([1.0, 2.0]), ["'floor_z'"]),
    ("floor_z", lambda a: np.array(np.inf), ["'floor_z'"]),
    ("external_accel", lambda a: a["external_accel"][1:], ["'external_accel'", "shape"]),
    ("velocity0", lambda a: a["velocity0"].T, ["'velocity0'", "shape"]),
    ("pin_weight", lambda a: -a["pin_weight"] - 1, ["'pin_weight'"]),
    ("pin_target", lambda a: a["pin_target"][:, :, :2], ["'pin_target'", "shape"]),
    ("vertex_mass", lambda a: a["vertex_mass"] * 0, ["'vertex_mass'"]),
]


@pytest.mark.parametrize("key,change,words", BAD_VALUES, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(BAD_VALUES)])
def test_sequence_malformed_value(tmp_path, key, change, words):
    arrays = raw_arrays(full_sequence())
    arrays[key] = change(arrays)
    with pytest.raises(FormatError) as e:
        read_sequence(save_npz(tmp_path / "bad.npz", arrays))
    one_line_error(e, *words)


@pytest.mark.parametrize("content", [b"", b"not a zip at all", b"PK\x03\x04truncated", b"\x93NUMPY\x01\x00"],
                         ids=["empty", "text", "zip-magic", "npy-magic"])
def test_sequence_file_that_is_not_npz(tmp_path, content):
    (tmp_path / "x.npz").write_bytes(content)
    with pytest.raises(FormatError) as e:
        read_sequence(tmp_path / "x.npz")
    one_line_error(e, "x.npz")


def test_sequence_file_that_is_a_single_npy_array(tmp_path):
    np.save(tmp_path / "arr.npy", np.arange(3))
    os.replace(tmp_path / "arr.npy", tmp_path / "arr.npz")
    with pytest.raises(FormatError) as e:
        read_sequence(tmp_path / "arr.npz")
    one_line_error(e, ".npy")


def test_sequence_missing_file(tmp_path):
    with pytest.raises(FormatError) as e:
        read_sequence(tmp_path / "nope.npz")
    one_line_error(e, "no such")


def test_sequence_truncated_and_corrupted_files(tmp_path):
    write_sequence(tmp_path / "good.npz", full_sequence())
    data = (tmp_path / "good.npz").read_bytes()
    for cut in (10, len(data) // 3, len(data) // 2, len(data) - 30):
        (tmp_path / "cut.npz").write_bytes(data[:cut])
        with pytest.raises(FormatError) as e:
            read_sequence(tmp_path / "cut.npz")
        one_line_error(e)
    # flip bytes in the middle (compressed member data): zlib errors must become FormatError too
    rng = np.random.default_rng(0)
    for _ in range(20):
        bad = bytearray(data)
        for i in rng.integers(60, len(data) - 200, size=4):
            bad[i] ^= 0xFF
        (tmp_path / "flip.npz").write_bytes(bytes(bad))
        try:
            read_sequence(tmp_path / "flip.npz")
        except FormatError as err:
            assert "\n" not in str(err)


# --------------------------------------------------------------------------- PC2

def test_pc2_round_trip_and_header_layout(tmp_path):
    rng = np.random.default_rng(1)
    pos = rng.normal(size=(6, 9, 3)).astype(np.float32)
    write_pc2(tmp_path / "c.pc2", pos, start_frame=3.0, sample_rate=0.5)
    data = (tmp_path / "c.pc2").read_bytes()
    assert len(data) == 32 + 6 * 9 * 12
    assert struct.calcsize("<12s i i f f i") == 32
    magic, version, points, start, rate, samples = struct.unpack("<12s i i f f i", data[:32])
    assert (magic, version, points, start, rate, samples) == (b"POINTCACHE2\0", 1, 9, 3.0, 0.5, 6)
    assert PC2_MAGIC == b"POINTCACHE2\0"
    np.testing.assert_array_equal(np.frombuffer(data[32:], "<f4").reshape(6, 9, 3), pos)
    back, start, rate = read_pc2(tmp_path / "c.pc2")
    np.testing.assert_array_equal(back, pos)
    assert back.dtype == np.float32 and (start, rate) == (3.0, 0.5)


def test_pc2_writes_float64_input_as_float32(tmp_path):
    pos = np.arange(24, dtype=np.float64).reshape(2, 4, 3) / 7
    write_pc2(tmp_path / "c.pc2", pos)
    back, start, rate = read_pc2(tmp_path / "c.pc2")
    np.testing.assert_allclose(back, pos, rtol=1e-6)
    assert (start, rate) == (0.0, 1.0)


def test_pc2_malformed(tmp_path):
    pos = np.zeros((3, 4, 3), np.float32)
    write_pc2(tmp_path / "good.pc2", pos)
    data = (tmp_path / "good.pc2").read_bytes()
    cases = {
        "truncated": (data[:-5], ["truncated"]),
        "short": (data[:20], ["too short", "20 bytes"]),
        "magic": (b"POINTCACHE3\0" + data[12:], ["magic"]),
        "version": (data[:12] + struct.pack("<i", 2) + data[16:], ["version 2"]),
        "points": (data[:16] + struct.pack("<i", -4) + data[20:], ["-4 points"]),
        "extra": (data + b"\0" * 12, ["bytes"]),
    }
    for name, (content, words) in cases.items():
        (tmp_path / f"{name}.pc2").write_bytes(content)
        with pytest.raises(FormatError) as e:
            read_pc2(tmp_path / f"{name}.pc2")
        one_line_error(e, f"{name}.pc2", *words)
    with pytest.raises(FormatError) as e:
        read_pc2(tmp_path / "missing.pc2")
    one_line_error(e, "missing.pc2")
    with pytest.raises(FormatError) as e:
        write_pc2(tmp_path / "bad.pc2", np.zeros((3, 4)))
    one_line_error(e, "[3, 4]")
    assert not (tmp_path / "bad.pc2").exists()


# --------------------------------------------------------------------------- meshes

def test_obj_quads_and_ngons_are_fan_triangulated_in_order(tmp_path):
    text = """# a comment
o thing
v 0 0 0
v 1 0 0
v 1 1 0
v 0 1 0
v 2 0 0
v 3 1 0
v 2 2 0
vt 0 0
vn 0 0 1
s off
f 1 2 3 4
f 2/1/1 5/1/1 6/1/1 7/1/1 3/1/1
f 1//1 2//1 4//1
"""
    (tmp_path / "m.obj").write_text(text)
    m = read_mesh(tmp_path / "m.obj")
    assert m.vertices.shape == (7, 3)
    expected = [[0, 1, 2], [0, 2, 3], [1, 4, 5], [1, 5, 6], [1, 6, 2], [0, 1, 3]]
    np.testing.assert_array_equal(m.faces, expected)
    assert m.name == "m"


def test_obj_negative_indices_count_back_from_the_last_vertex(tmp_path):
    text = "v 0 0 0\nv 1 0 0\nv 0 1 0\nf -3 -2 -1\nv 0 0 1\nf -4/1 -2/2 -1/3\n"
    (tmp_path / "n.obj").write_text(text)
    m = read_mesh(tmp_path / "n.obj")
    np.testing.assert_array_equal(m.faces, [[0, 1, 2], [0, 2, 3]])


def test_obj_write_read_round_trip(tmp_path):
    mesh = tetra_mesh()
    write_obj(tmp_path / "t.obj", mesh)
    back = read_mesh(tmp_path / "t.obj")
    np.testing.assert_allclose(back.vertices, mesh.vertices)
    np.testing.assert_array_equal(back.faces, mesh.faces)


def _ply_header(fmt, nv, nf, extra_vertex_props=()):
    lines = ["ply", f"format {fmt} 1.0", "comment made by a test", f"element vertex {nv}",
             "property float x", "property float y", "property float z"]
    lines += [f"property {t} {n}" for t, n in extra_vertex_props]
    lines += [f"element face {nf}", "property list uchar int vertex_indices", "end_header"]
    return ("\n".join(lines) + "\n").encode("ascii")


QUAD_V = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0.5, 0.5, 1]], np.float32)
QUAD_F = [[0, 1, 2, 3], [0, 1, 4], [1, 2, 4]]
QUAD_TRIS = [[0, 1, 2], [0, 2, 3], [0, 1, 4], [1, 2, 4]]


def test_ply_ascii(tmp_path):
    body = "".join(f"{x} {y} {z} 7\n" for x, y, z in QUAD_V)
    body += "".join(f"{len(f)} {' '.join(map(str, f))}\n" for f in QUAD_F)
    (tmp_path / "a.ply").write_bytes(_ply_header("ascii", 5, 3, [("uchar", "red")]) + body.encode())
    m = read_mesh(tmp_path / "a.ply")
    np.testing.assert_allclose(m.vertices, QUAD_V)
    np.testing.assert_array_equal(m.faces, QUAD_TRIS)


def test_ply_binary_little_endian(tmp_path):
    body = b"".join(struct.pack("<fffd", *v, 0.25) for v in QUAD_V)
    body += b"".join(struct.pack("<B", len(f)) + struct.pack(f"<{len(f)}i", *f) for f in QUAD_F)
    (tmp_path / "b.ply").write_bytes(_ply_header("binary_little_endian", 5, 3, [("double", "quality")]) + body)
    m = read_mesh(tmp_path / "b.ply")
    np.testing.assert_allclose(m.vertices, QUAD_V)
    np.testing.assert_array_equal(m.faces, QUAD_TRIS)


def test_npz_mesh(tmp_path):
    mesh = tetra_mesh()
    np.savez(tmp_path / "v.npz", vertices=mesh.vertices, faces=mesh.faces)
    np.savez(tmp_path / "r.npz", rest=mesh.vertices.astype(np.float32), faces=mesh.faces.astype(np.int32), extra=1)
    for name in ("v.npz", "r.npz"):
        m = read_mesh(tmp_path / name)
        np.testing.assert_allclose(m.vertices, mesh.vertices)
        np.testing.assert_array_equal(m.faces, mesh.faces)
        assert m.vertices.dtype == np.float64 and m.faces.dtype == np.int64
    # a sequence file is also a mesh (its rest shape)
    write_sequence(tmp_path / "seq.npz", full_sequence())
    assert read_mesh(tmp_path / "seq.npz").vertices.shape == (5, 3)


MALFORMED_MESHES = {
    "range.obj": (b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 9\n", ["vertex 8", "3 vertices"]),
    "negrange.obj": (b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf -1 -2 -7\n", ["vertex -4", "3 vertices"]),
    "zero.obj": (b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 0 1 2\n", ["index 0"]),
    "float.obj": (b"v 0 zero 0\n", ["float"]),
    "short.obj": (b"v 0 0\n", ["three coordinates"]),
    "face2.obj": (b"v 0 0 0\nv 1 0 0\nf 1 2\n", ["three vertices"]),
    "empty.obj": (b"# nothing\n", ["no vertices"]),
    "nan.obj": (b"v 0 0 nan\nv 1 0 0\nv 0 1 0\nf 1 2 3\n", ["vertex 0", "NaN"]),
    "big.ply": (b"ply\nformat binary_big_endian 1.0\nelement vertex 0\nend_header\n", ["binary_big_endian"]),
    "magic.ply": (b"plx\nformat ascii 1.0\nend_header\n", ["not a PLY"]),
    "trunc.ply": (_ply_header("ascii", 5, 3) + b"0 0 0\n1 0 0\n", ["not a readable mesh"]),
    "truncbin.ply": (_ply_header("binary_little_endian", 5, 3) + b"\0" * 20, ["not a readable mesh"]),
    "novert.ply": (b"ply\nformat ascii 1.0\nelement face 0\nproperty list uchar int vertex_indices\nend_header\n",
                   ["no vertex element"]),
    "mesh.stl": (b"solid x\n", ["unknown mesh type", ".stl"]),
    "keys.npz": (None, ["'vertices'", "'faces'"]),
    "shape.npz": (None, ["'vertices'", "shape"]),
    "junk.npz": (b"garbage", ["not a readable .npz"]),
}


@pytest.mark.parametrize("name", list(MALFORMED_MESHES))
def test_malformed_mesh(tmp_path, name):
    content, words = MALFORMED_MESHES[name]
    path = tmp_path / name
    if name == "keys.npz":
        np.savez(path, points=np.zeros((3, 3)))
    elif name == "shape.npz":
        np.savez(path, vertices=np.zeros((3, 2)), faces=np.zeros((1, 3), int))
    else:
        path.write_bytes(content)
    with pytest.raises(FormatError) as e:
        read_mesh(path)
    one_line_error(e, name, *words)


def test_missing_mesh_file(tmp_path):
    with pytest.raises(FormatError) as e:
        read_mesh(tmp_path / "none.obj")
    one_line_error(e, "no such mesh file")


# --------------------------------------------------------------------------- atomic writes

def _write_all_kinds(folder, tag):
    write_sequence(folder / "s.npz", full_sequence(seed=tag))
    write_pc2(folder / "c.pc2", np.full((2, 3, 3), tag, np.float32))
    write_obj(folder / "m.obj", Mesh(tetra_mesh().vertices * (tag + 1), tetra_mesh().faces))
    write_scene(folder / "scene.json", {"format": SCENE_FORMAT, "frames": 10 + tag})


@pytest.mark.parametrize("fail_at", ["replace", "fsync", "write"])
def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch, fail_at):
    _write_all_kinds(tmp_path, 0)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    if fail_at == "replace":
        monkeypatch.setattr(os, "replace", boom)
    elif fail_at == "fsync":
        monkeypatch.setattr(os, "fsync", boom)
    else:
        real_fdopen = os.fdopen

        class Failing:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            def write(self, data):
                self.f.write(data[: len(data) // 2])
                raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fdopen", lambda fd, mode: Failing(real_fdopen(fd, mode)))
    for writer in (lambda: write_sequence(tmp_path / "s.npz", full_sequence(seed=1)),
                   lambda: write_pc2(tmp_path / "c.pc2", np.ones((2, 3, 3), np.float32)),
                   lambda: write_obj(tmp_path / "m.obj", tetra_mesh()),
                   lambda: write_scene(tmp_path / "scene.json", {"format": SCENE_FORMAT, "frames": 99})):
        with pytest.raises(OSError):
            writer()
    monkeypatch.undo()
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert after == before, "old files intact and no temp files left"
    read_sequence(tmp_path / "s.npz")
    assert read_scene(tmp_path / "scene.json")["frames"] == 10


def test_written_files_have_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        _write_all_kinds(tmp_path, 0)
        _write_all_kinds(tmp_path, 1)  # overwriting keeps normal permissions too
        for p in tmp_path.iterdir():
            assert p.stat().st_mode & 0o777 == 0o644, p.name
        os.umask(0o077)
        atomic_write_bytes(tmp_path / "private.bin", b"x")
        assert (tmp_path / "private.bin").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pc2", "m.obj", "private.bin", "s.npz", "scene.json"]


def test_atomic_write_creates_missing_folders(tmp_path):
    atomic_write_bytes(tmp_path / "a" / "b" / "f.bin", b"data")
    assert (tmp_path / "a" / "b" / "f.bin").read_bytes() == b"data"


# --------------------------------------------------------------------------- scenes

def base_scene(**kw):
    s = {"format": SCENE_FORMAT, "frames": 5, "dt": 1 / 24}
    s.update(kw)
    return s


def test_scene_defaults_and_presets():
    s = validate_scene({"format": SCENE_FORMAT})
    assert s["frames"] == 120 and s["dt"] == pytest.approx(1 / 24) and s["gravity"] == [0, 0, -9.81]
    assert s["material"]["preset"] == "rubber" and s["material"]["kind"] == "solid"
    assert s["pins"] == [] and s["forces"] == [] and s.get("floor") is None
    assert s["initial"]["velocity"] == [0, 0, 0]
    for preset in ("jelly", "rubber", "foam", "cloth", "leather"):
        m = validate_scene(base_scene(material={"preset": preset, "damping": 0.5}))["material"]
        assert m["damping"] == 0.5 and m["stiffness"] == MATERIAL_PRESETS[preset]["stiffness"]
    assert validate_scene(base_scene(material={"kind": "cloth"}))["material"]["preset"] == "cloth"


def test_scene_file_round_trip(tmp_path):
    scene = base_scene(pins=[{"select": {"indices": [0]}}], floor={"z": -1})
    write_scene(tmp_path / "s.json", scene)
    back = read_scene(tmp_path / "s.json")
    assert back["pins"][0]["strength"] == 1.0 and back["floor"]["z"] == -1.0


@pytest.mark.parametrize("text,words", [
    ("{not json", ["not valid JSON", "line 1"]),
    ("", ["not valid JSON"]),
    ("[1, 2]", ["JSON object"]),
    ('{"format": "neurok.scene/2"}', ["'format'", "neurok.scene/2"]),
    ("1" * 5000, ["not valid JSON"]),
    ("[" * 100000, ["not valid JSON"]),
])
def test_scene_file_malformed(tmp_path, text, words):
    (tmp_path / "s.json").write_text(text)
    with pytest.raises(FormatError) as e:
        read_scene(tmp_path / "s.json")
    one_line_error(e, "s.json", *words)


def test_scene_file_missing_or_binary(tmp_path):
    with pytest.raises(FormatError) as e:
        read_scene(tmp_path / "none.json")
    one_line_error(e, "no such scene file")
    (tmp_path / "b.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(FormatError) as e:
        read_scene(tmp_path / "b.json")
    one_line_error(e, "b.json")


BAD_SCENES = [
    ({"frames": 0}, ["'frames'"]),
    ({"frames": 2.5}, ["'frames'"]),
    ({"dt": -1}, ["'dt'"]),
    ({"dt": 10**400}, ["'dt'"]),
    ({"gravity": [0, 0]}, ["'gravity'"]),
    ({"gravity": [0, 0, float("nan")]}, ["'gravity'"]),
    ({"material": {"kind": "liquid"}}, ["'kind'", "liquid"]),
    ({"material": {"preset": "steel"}}, ["preset", "steel"]),
    ({"material": {"preset": ["rubber"]}}, ["preset"]),
    ({"material": {"stiffness": -5}}, ["'stiffness'"]),
    ({"material": {"poisson": 0.5}}, ["'poisson'"]),
    ({"material": {"youngs": 1}}, ["youngs"]),
    ({"material": "rubber"}, ["'material'"]),
    ({"pins": [{"select": {"lasso": [1]}}]}, ["pins[0].select", "unknown selector", "lasso"]),
    ({"pins": [{"select": {"indices": [0], "box": {}}}]}, ["pins[0].select"]),
    ({"pins": [{"select": {"indices": [-1]}}]}, ["pins[0].select.indices"]),
    ({"pins": [{"strength": 1}]}, ["pins[0]", "'select'"]),
    ({"pins": [{"select": {"indices": [0]}, "strength": 0}]}, ["pins[0].strength"]),
    ({"pins": [{"select": {"indices": [0]}, "target_offset": 5}]}, ["pins[0].target_offset"]),
    ({"pins": [{"select": {"indices": [0]}, "target_offset": [[0, [1, 2]]]}]}, ["pins[0].target_offset[0][1]"]),
    ({"pins": [{"select": {"indices": [0]}, "target_offset": [[]]}]}, ["pins[0].target_offset"]),
    ({"pins": {"select": {"indices": [0]}}}, ["'pins'"]),
    ({"forces": [{"select": {"indices": [0]}}]}, ["forces[0]", "'accel'"]),
    ({"forces": [{"select": {"indices": [0]}, "accel": [1, 0, 0], "profile": {"type": "square"}}]},
     ["forces[0].profile.type", "square"]),
    ({"forces": [{"select": {"indices": [0]}, "accel": [1, 0, 0], "profile": {"type": ["sine"]}}]},
     ["forces[0].profile.type"]),
    ({"forces": [{"select": {"indices": [0]}, "accel": [1, 0, 0], "profile": "sine"}]}, ["forces[0].profile"]),
    ({"forces": [{"select": {"indices": [0]}, "accel": [1, 0, 0], "profile": {"type": "sine", "frequency": 0}}]},
     ["forces[0].profile.frequency"]),
    ({"forces": [{"select": {"indices": [0]}, "accel": [1, 0, 0], "profile": {"type": "keyframes", "keys": [1]}}]},
     ["forces[0].profile.keys"]),
    ({"forces": [{"select": {"sphere": {"center": [0, 0, 0], "radius": -1}}, "accel": [1, 0, 0]}]},
     ["forces[0].select.sphere.radius"]),
    ({"floor": {"height": 0}}, ["'floor'"]),
    ({"floor": {"z": "low"}}, ["floor.z"]),
    ({"initial": {"velocity": [1, 2, "3"]}}, ["initial.velocity"]),
    ({"initial": []}, ["'initial'"]),
]


@pytest.mark.parametrize("change,words", BAD_SCENES, ids=[str(i) for i in range(len(BAD_SCENES))])
def test_scene_malformed(change, words):
    with pytest.raises(FormatError) as e:
        validate_scene(base_scene(**change), "my.json")
    one_line_error(e, "my.json", *words)


def test_scene_not_an_object():
    for bad in ([], "scene", None, 3):
        with pytest.raises(FormatError) as e:
            validate_scene(bad)
        one_line_error(e, "JSON object")


RESOLVE_ERRORS = [
    ({"pins": [{"select": {"indices": [0, 99]}}]}, ["pins[0].select", "index 99", "out of range", "4 vertices"]),
    ({"pins": [{"select": {"indices": []}}]}, ["pins[0] selects no vertex"]),
    ({"pins": [{"select": {"box": {"min": [2, 2, 2], "max": [3, 3, 3]}}}]}, ["pins[0] selects no vertex"]),
    ({"pins": [{"select": {"weights": [0, 0, 0, 0]}}]}, ["pins[0] selects no vertex"]),
    ({"pins": [{"select": {"weights": [1, 1]}}]}, ["pins[0].select", "2 weights", "4 vertices"]),
    ({"pins": [{"select": {"vertex_group": "Pin\nGroup"}}]}, ["pins[0].select", "vertex group"]),
    ({"forces": [{"select": {"sphere": {"center": [5, 5, 5], "radius": 0.1}}, "accel": [0, 1, 0]}]},
     ["forces[0] selects no vertex"]),
    ({"forces": [{"select": {"indices": [7]}, "accel": [0, 1, 0]}]}, ["forces[0].select", "index 7"]),
]


@pytest.mark.parametrize("change,words", RESOLVE_ERRORS, ids=[str(i) for i in range(len(RESOLVE_ERRORS))])
def test_scene_resolution_errors(change, words):
    with pytest.raises(FormatError) as e:
        setup_from_scene(tetra_mesh(), base_scene(**change), where="my.json")
    one_line_error(e, "my.json", *words)


def test_selectors_resolve_to_expected_vertices():
    mesh = tetra_mesh()  # vertices at the origin and the three unit axes
    groups = {"Top": np.array([0, 0, 0, 0.5])}
    scene = base_scene(pins=[{"select": {"box": {"min": [0, 0, 0], "max": [0.5, 0.5, 0.5]}}, "strength": 2.0},
                             {"select": {"sphere": {"center": [1, 0, 0], "radius": 0.1}}},
                             {"select": {"vertex_group": "Top"}}],
                       forces=[{"select": {"weights": [0, 1, 0, 0]}, "accel": [0, 5, 0],
                                "profile": {"type": "impulse", "start": 2}}])
    setup = setup_from_scene(mesh, scene, vertex_groups=groups)
    np.testing.assert_allclose(setup.pin_weight, [2.0, 1.0, 0.0, 0.5])
    acc = setup.accel_frames()
    assert acc.shape == (5, 4, 3)
    np.testing.assert_allclose(acc[2, 1], [0, 5, 0])
    assert np.count_nonzero(acc) == 1  # an impulse lasts one frame, on vertex 1 only


def test_profiles():
    scene = base_scene(frames=30, forces=[
        {"select": {"indices": [0]}, "accel": [1, 0, 0], "profile": {"type": "constant", "start": 2, "end": 4}},
        {"select": {"indices": [1]}, "accel": [1, 0, 0], "profile": {"type": "sine", "frequency": 1.0}},
        {"select": {"indices": [2]}, "accel": [1, 0, 0], "profile": {"type": "keyframes", "keys": [[0, 0], [10, 2]]}},
        {"select": {"indices": [3]}, "accel": [1, 0, 0], "profile": {"type": "sine", "frequency": None}}])
    acc = setup_from_scene(tetra_mesh(), scene).accel_frames()[:, :, 0]
    np.testing.assert_allclose(acc[:6, 0], [0, 0, 1, 1, 0, 0])
    np.testing.assert_allclose(acc[6, 1], np.sin(2 * np.pi * 6 / 24), rtol=1e-6)
    np.testing.assert_allclose(acc[[0, 5, 10, 20], 2], [0, 1, 2, 2])
    np.testing.assert_allclose(acc[:, 3], acc[:, 1])  # frequency null = default 1 Hz


def test_animated_pin_targets():
    scene = base_scene(frames=12, pins=[{"select": {"indices": [1, 2]},
                                         "target_offset": [[10, [0.1, 0, 0]], [0, [0, 0, 0]]]}])
    setup = setup_from_scene(tetra_mesh(), scene)
    targets = setup.pin_target_frames()
    np.testing.assert_allclose(targets[5, 1], [1.05, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(targets[11, 2], [0.1, 1, 0], rtol=1e-6)
    np.testing.assert_allclose(targets[:, 0], np.zeros((12, 3)))  # unpinned vertices stay at rest


def test_setup_sequence_round_trip(tmp_path):
    scene = base_scene(frames=6, pins=[{"select": {"indices": [0]}}], floor={"z": -2.0},
                       forces=[{"select": {"indices": [3]}, "accel": [0, 0, 3], "profile": {"type": "sine"}}],
                       initial={"velocity": [1, 2, 3]}, material={"preset": "foam"})
    setup = setup_from_scene(tetra_mesh(), scene)
    positions = np.repeat(setup.x0[None], 6, axis=0)
    write_sequence(tmp_path / "s.npz", setup.to_sequence(positions, meta={"simulator": "test"}))
    seq = read_sequence(tmp_path / "s.npz")
    assert seq.meta["simulator"] == "test"
    back = setup_from_sequence(seq)
    assert isinstance(back, Setup)
    assert back.frames == 6 and back.dt == pytest.approx(setup.dt) and back.floor_z == -2.0
    for key in ("rest", "x0", "v0", "gravity", "pin_weight"):
        np.testing.assert_allclose(getattr(back, key), getattr(setup, key), rtol=1e-6, err_msg=key)
    np.testing.assert_allclose(back.accel_frames(), setup.accel_frames(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(back.pin_target_frames(), setup.pin_target_frames(), rtol=1e-6)
    assert back.material == setup.material


# --------------------------------------------------------------------------- property-based

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-2**1100, max_value=2**1100),
                      st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                      st.sampled_from(["solid", "cloth", "rubber", "sine", "keyframes", "indices", "box", SCENE_FORMAT]))
SCENE_KEYS = ["format", "frames", "dt", "gravity", "material", "pins", "forces", "floor", "initial",
              "select", "strength", "target_offset", "accel", "profile", "type", "start", "end", "frequency", "keys",
              "indices", "weights", "box", "sphere", "min", "max", "center", "radius", "vertex_group", "z", "velocity",
              "kind", "preset", "stiffness", "density", "poisson", "damping", "air_damping", "bending"]
json_value = st.recursive(
    json_leaf,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.one_of(st.sampled_from(SCENE_KEYS), st.text(max_size=4)), children,
                                               max_size=5)),
    max_leaves=25)


def scene_like():
    """Dicts that look like scenes: the right format mostly, known keys with random values."""
    return st.dictionaries(st.sampled_from(SCENE_KEYS[1:]), json_value, max_size=8).flatmap(
        lambda d: st.sampled_from([SCENE_FORMAT, SCENE_FORMAT, SCENE_FORMAT, "neurok.scene/0", None]).map(
            lambda f: dict(d, format=f) if f is not None else d))


def _only_format_errors(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except FormatError as e:
        assert "\n" not in str(e), repr(str(e))
        return None


@FAST
@given(st.one_of(json_value, scene_like()))
def test_validate_scene_only_raises_format_error(data):
    out = _only_format_errors(validate_scene, data)
    if out is not None:
        _only_format_errors(setup_from_scene, tetra_mesh(), out)


MESH4 = tetra_mesh()
finite = st.floats(-5, 5, allow_nan=False)
vec3 = st.lists(finite, min_size=3, max_size=3)


@st.composite
def selectors(draw):
    """Selectors that select at least one vertex of MESH4."""
    kind = draw(st.sampled_from(["indices", "weights", "box", "sphere"]))
    if kind == "indices":
        return {"indices": draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))}
    if kind == "weights":
        w = draw(st.lists(st.floats(0, 3), min_size=4, max_size=4))
        w[draw(st.integers(0, 3))] = draw(st.floats(0.1, 3))
        return {"weights": w}
    if kind == "box":
        lo = draw(st.lists(st.floats(-1, 0), min_size=3, max_size=3))
        hi = draw(st.lists(st.floats(0, 2), min_size=3, max_size=3))
        return {"box": {"min": lo, "max": hi}}
    return {"sphere": {"center": draw(st.lists(st.floats(0, 1), min_size=3, max_size=3)),
                       "radius": draw(st.floats(1.75, 3))}}


@st.composite
def profiles(draw):
    kind = draw(st.sampled_from(PROFILE_TYPES))
    p = {"type": kind}
    if draw(st.booleans()):
        p["start"] = draw(st.integers(0, 10))
    if draw(st.booleans()):
        p["end"] = draw(st.integers(0, 20))
    if draw(st.booleans()):
        p["frequency"] = draw(st.floats(0.01, 10))
    if kind == "keyframes":
        p["keys"] = draw(st.lists(st.tuples(st.integers(0, 20), finite).map(list), min_size=1, max_size=4))
    return p


@st.composite
def valid_scenes(draw):
    preset = draw(st.sampled_from(sorted(MATERIAL_PRESETS)))
    material = {"preset": preset}
    if draw(st.booleans()):
        material["stiffness"] = draw(st.floats(1e2, 1e9))
    if draw(st.booleans()):
        material["poisson"] = draw(st.floats(0, 0.49))
    if draw(st.booleans()):
        material["damping"] = draw(st.floats(0, 1))
    scene = {"format": SCENE_FORMAT, "frames": draw(st.integers(1, 12)), "dt": draw(st.floats(1e-3, 0.1)),
             "gravity": draw(vec3), "material": material,
             "pins": [dict({"select": draw(selectors()), "strength": draw(st.floats(0.1, 10))},
                           **({"target_offset": draw(st.lists(st.tuples(st.integers(0, 12), vec3).map(list),
                                                               min_size=1, max_size=3))}
                              if draw(st.booleans()) else {}))
                      for _ in range(draw(st.integers(0, 2)))],
             "forces": [{"select": draw(selectors()), "accel": draw(vec3), "profile": draw(profiles())}
                        for _ in range(draw(st.integers(0, 2)))],
             "initial": {"velocity": draw(vec3)}}
    if draw(st.booleans()):
        scene["floor"] = draw(st.one_of(st.none(), st.builds(lambda z: {"z": z}, finite)))
    return scene


@FAST
@given(valid_scenes())
def test_valid_scenes_validate_and_resolve(tmp_path, scene):
    out = validate_scene(scene)
    assert validate_scene(out) == out  # validating again changes nothing
    json.dumps(out)  # still plain JSON
    setup = setup_from_scene(MESH4, scene)
    n, t = 4, scene["frames"]
    assert setup.frames == t and setup.x0.shape == (n, 3) and setup.v0.shape == (n, 3)
    assert setup.pin_weight.shape == (n,) and (setup.pin_weight > 0).any() == bool(scene["pins"])
    acc, targets = setup.accel_frames(), setup.pin_target_frames()
    assert acc.shape == (t, n, 3) and targets.shape == (t, n, 3)
    assert np.all(np.isfinite(acc)) and np.all(np.isfinite(targets))
    seq = setup.to_sequence(np.repeat(setup.x0[None], t, axis=0))
    path = tmp_path / "valid.npz"
    write_sequence(path, seq)
    back = setup_from_sequence(read_sequence(path))
    np.testing.assert_allclose(back.accel_frames(), acc, rtol=1e-5, atol=1e-5)


def _base_arrays():
    return raw_arrays(full_sequence(T=3, N=4))


any_array = hnp.arrays(
    dtype=st.one_of(hnp.floating_dtypes(), hnp.integer_dtypes(), hnp.unsigned_integer_dtypes(), hnp.boolean_dtypes(),
                    hnp.complex_number_dtypes(), hnp.unicode_string_dtypes(max_len=4), hnp.byte_string_dtypes(max_len=4)),
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
shaped_float = st.sampled_from([(3, 4, 3), (4, 3), (3,), (), (1, 4, 3), (3, 4, 3, 1), (0, 4, 3), (4,), (2, 4, 3)]).flatmap(
    lambda shape: hnp.arrays(np.float64, shape, elements=st.floats(allow_nan=True, allow_infinity=True, width=64)))
sequence_keys = st.sampled_from(list(REQUIRED) + list(OPTIONAL) + ["floor_z", "meta", "unknown"])


@FAST
@given(st.lists(st.tuples(sequence_keys, st.one_of(any_array, shaped_float, st.none())), max_size=4))
def test_sequence_reader_only_raises_format_error(changes):
    arrays = _base_arrays()
    for key, value in changes:
        if value is None:
            arrays.pop(key, None)
        else:
            arrays[key] = value
    seq = _only_format_errors(sequence_from_arrays, arrays, "random.npz")
    if seq is not None:
        assert np.all(np.isfinite(seq.positions)) and seq.positions.shape[1:] == seq.rest.shape


@FAST
@given(st.lists(st.tuples(sequence_keys, st.one_of(any_array, shaped_float)), max_size=3))
def test_sequence_file_reader_only_raises_format_error(tmp_path, changes):
    arrays = _base_arrays()
    for key, value in changes:
        arrays[key] = value
    path = tmp_path / "random.npz"
    np.savez(path, **arrays)
    _only_format_errors(read_sequence, path)


@FAST
@given(st.binary(max_size=300), st.integers(0, 2000), st.binary(max_size=8))
def test_sequence_reader_on_random_and_damaged_bytes(tmp_path, junk, cut, patch):
    path = tmp_path / "damaged.npz"
    path.write_bytes(junk)
    _only_format_errors(read_sequence, path)
    good = io.BytesIO()
    np.savez_compressed(good, **_base_arrays())
    data = good.getvalue()
    cut = cut % len(data)
    path.write_bytes(data[:cut] + patch + data[cut + len(patch):])
    _only_format_errors(read_sequence, path)


@FAST
@given(st.binary(max_size=200), st.integers(-3, 50), st.integers(-3, 50), st.integers(-20, 20),
       st.sampled_from([PC2_MAGIC, b"POINTCACHE2\1", b"\0" * 12]), st.integers(0, 2))
def test_pc2_reader_only_raises_format_error(tmp_path, body, points, samples, extra, magic, version):
    path = tmp_path / "random.pc2"
    path.write_bytes(body)
    _only_format_errors(read_pc2, path)
    header = struct.pack("<12siiffi", magic, version, points, 0.0, 1.0, samples)
    size = max(points, 0) * max(samples, 0) * 12 + extra
    path.write_bytes(header + bytes(max(size, 0)))
    out = _only_format_errors(read_pc2, path)
    if out is not None:
        pos, start, rate = out
        assert pos.shape == (samples, points, 3)


def test_zip_with_non_npy_member_is_a_format_error(tmp_path):
    path = tmp_path / "odd.npz"
    arrays = _base_arrays()
    np.savez(path, **arrays)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("readme.txt", "hello")
        z.writestr("rest2.npy", b"\x93NUMPY garbage")
    _only_format_errors(read_sequence, path)


def test_setup_from_arrays_checks_shapes_and_round_trips_through_the_scene_format():
    from engine.core.fields import Effector
    from engine.core.scene import scene_from_setup, setup_from_arrays
    mesh = Mesh(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1.0]]), np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]]))
    pins = np.array([1.0, 0.0, 0.0, 0.0])
    push = (np.array([0.0, 0.0, 1.0, 1.0]), np.array([0.0, 2.0, 0.0]), {"type": "constant"})
    wind = Effector("Wind", "WIND", np.eye(4), np.full(4, 3.0))
    setup = setup_from_arrays(mesh, frames=4, dt=0.04, gravity=(0, 0, -9.81), material={"preset": "jelly"},
                              pin_weight=2.0 * pins, force_terms=[push], floor_z=-1.0, effectors=[wind])
    assert setup.effectors == [wind] and setup.material.kind == "solid" and setup.accel_table is None
    with pytest.raises(FormatError):
        setup_from_arrays(mesh, frames=4, dt=0.04, gravity=(0, 0, 0), material={}, pin_weight=np.ones(3))
    scene = scene_from_setup(setup, pin_strength=2.0)
    back = setup_from_scene(mesh, scene)
    assert np.array_equal(back.pin_weight, setup.pin_weight) and back.floor_z == -1.0
    assert np.allclose(back.external_accel(0)[:, 1], push[0] * 2.0)  # the painted force; the wind: static terms
    assert len(back.force_terms) == 1 + 1 and back.effectors == []
