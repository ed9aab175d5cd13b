"""File formats: meshes (OBJ, PLY, NPZ), `neurok.sequence/1`, `neurok.scene/1`, PC2.

Every reader validates what it reads and raises `FormatError` with one line that names the
file and the bad key or shape. Every writer writes atomically (temp file + rename), so an
interrupted run never leaves half a file where a good one was.
"""
from __future__ import annotations

import io
import json
import math
import os
import struct
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import FormatError, NeurokError  # noqa: F401  (NeurokError: re-exported for readers of this module)

SEQUENCE_FORMAT = "neurok.sequence/1"
SCENE_FORMAT = "neurok.scene/1"


def brief(value, limit: int = 60) -> str:
    """A short, one-line rendering of a value for an error message (user text can hold
    newlines, numpy arrays print over several lines)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def one_line(text) -> str:
    return " ".join(str(text).split())


# --------------------------------------------------------------------------- atomic writes

def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path, data: bytes) -> None:
    """Write `data` to `path` through a temp file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


# --------------------------------------------------------------------------- meshes

@dataclass
class Mesh:
    vertices: np.ndarray  # float64 [N,3]
    faces: np.ndarray  # int64 [F,3]
    name: str = "mesh"

    def __post_init__(self):
        self.vertices = np.asarray(self.vertices, dtype=np.float64).reshape(-1, 3)
        self.faces = np.asarray(self.faces, dtype=np.int64).reshape(-1, 3)


def triangulate(polygons) -> np.ndarray:
    """Fan-triangulate polygons given as index lists (vertex order is kept)."""
    tris = []
    for poly in polygons:
        for k in range(1, len(poly) - 1):
            tris.append((poly[0], poly[k], poly[k + 1]))
    return np.asarray(tris, dtype=np.int64).reshape(-1, 3)


def validate_mesh(mesh: Mesh, where: str) -> Mesh:
    v, f = mesh.vertices, mesh.faces
    if len(v) == 0:
        raise FormatError(f"{where}: the mesh has no vertices")
    if not np.all(np.isfinite(v)):
        bad = int(np.argmax(~np.all(np.isfinite(v), axis=1)))
        raise FormatError(f"{where}: vertex {bad} has a NaN or infinite coordinate")
    if len(f) and (f.min() < 0 or f.max() >= len(v)):
        bad = int(f.min()) if f.min() < 0 else int(f.max())
        raise FormatError(f"{where}: a face refers to vertex {bad} but the mesh has {len(v)} vertices")
    return mesh


def read_mesh(path) -> Mesh:
    """Read an OBJ, PLY (ASCII or binary little-endian) or NPZ (`vertices`/`rest`, `faces`) mesh."""
    path = Path(path)
    if not path.is_file():
        raise FormatError(f"{path}: no such mesh file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".obj":
            mesh = _read_obj(path)
        elif suffix == ".ply":
            mesh = _read_ply(path)
        elif suffix == ".npz":
            mesh = _read_npz_mesh(path)
        else:
            raise FormatError(f"{path}: unknown mesh type '{suffix}' (use .obj, .ply or .npz)")
    except FormatError:
        raise
    except (ValueError, IndexError, KeyError, TypeError, struct.error, UnicodeDecodeError, zipfile.BadZipFile,
            zlib.error, EOFError, OSError) as e:
        raise FormatError(f"{path}: not a readable mesh ({type(e).__name__}: {one_line(e)[:120]})") from None
    mesh.name = path.stem
    return validate_mesh(mesh, str(path))


def _read_obj(path: Path) -> Mesh:
    verts, polys = [], []
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "v":
                if len(parts) < 4:
                    raise FormatError(f"{path}:{lineno}: a vertex needs three coordinates")
                verts.append([float(x) for x in parts[1:4]])
            elif parts[0] == "f":
                idx = []
                for tok in parts[1:]:
                    i = int(tok.split("/")[0])
                    if i == 0:
                        raise FormatError(f"{path}:{lineno}: face index 0 (OBJ indices start at 1)")
                    idx.append(i - 1 if i > 0 else len(verts) + i)
                if len(idx) < 3:
                    raise FormatError(f"{path}:{lineno}: a face needs at least three vertices")
                polys.append(idx)
    return Mesh(np.asarray(verts, dtype=np.float64).reshape(-1, 3), triangulate(polys))


_PLY_TYPES = {"char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
              "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
              "float": "f4", "float32": "f4", "double": "f8", "float64": "f8"}


def _read_ply(path: Path) -> Mesh:
    data = path.read_bytes()
    end = data.find(b"end_header")
    if not data.startswith(b"ply") or end < 0:
        raise FormatError(f"{path}: not a PLY file (no 'ply' magic or 'end_header')")
    header = data[:end].decode("ascii", errors="replace").splitlines()
    body_start = data.index(b"\n", end) + 1
    fmt = "ascii"
    elements = []  # (name, count, [(prop, type, list_types)])
    for line in header:
        p = line.split()
        if not p:
            continue
        if p[0] == "format":
            fmt = p[1]
        elif p[0] == "element":
            elements.append((p[1], int(p[2]), []))
        elif p[0] == "property":
            if p[1] == "list":
                elements[-1][2].append((p[4], p[3], p[2]))
            else:
                elements[-1][2].append((p[2], p[1], None))
    if fmt not in ("ascii", "binary_little_endian"):
        raise FormatError(f"{path}: PLY format '{fmt}' is not supported (ascii or binary_little_endian)")
    verts, polys = None, []
    if fmt == "ascii":
        tokens = data[body_start:].decode("ascii").split()
        pos = 0
        for name, count, props in elements:
            rows = []
            for _ in range(count):
                row = {}
                for pname, ptype, ltype in props:
                    if ltype is None:
                        row[pname] = float(tokens[pos]); pos += 1
                    else:
                        n = int(tokens[pos]); pos += 1
                        row[pname] = [int(t) for t in tokens[pos:pos + n]]; pos += n
                rows.append(row)
            if name == "vertex":
                verts = np.array([[r["x"], r["y"], r["z"]] for r in rows], dtype=np.float64)
            elif name == "face":
                key = props[0][0]
                polys = [r[key] for r in rows]
    else:
        buf = memoryview(data)[body_start:]
        pos = 0
        for name, count, props in elements:
            if all(l is None for _, _, l in props):
                dt = np.dtype([(p, "<" + _PLY_TYPES[t]) for p, t, _ in props])
                arr = np.frombuffer(buf, dtype=dt, count=count, offset=pos)
                pos += dt.itemsize * count
                if name == "vertex":
                    verts = np.stack([arr["x"], arr["y"], arr["z"]], axis=1).astype(np.float64)
            else:
                rows = []
                for _ in range(count):
                    row = []
                    for pname, ptype, ltype in props:
                        if ltype is None:
                            pos += np.dtype(_PLY_TYPES[ptype]).itemsize
                            continue
                        cdt = np.dtype("<" + _PLY_TYPES[ltype])
                        n = int(np.frombuffer(buf, dtype=cdt, count=1, offset=pos)[0]); pos += cdt.itemsize
                        idt = np.dtype("<" + _PLY_TYPES[ptype])
                        row = np.frombuffer(buf, dtype=idt, count=n, offset=pos).tolist(); pos += idt.itemsize * n
                    rows.append(row)
                if name == "face":
                    polys = rows
    if verts is None:
        raise FormatError(f"{path}: PLY file has no vertex element")
    return Mesh(verts, triangulate(polys))


def _load_npz(path) -> dict:
    """All arrays of an .npz file (no pickles); FormatError for anything that is not one."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except Exception as e:  # noqa: BLE001 - any failure to parse is a malformed file
        raise FormatError(f"{path}: not a readable .npz file ({type(e).__name__})") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise FormatError(f"{path}: not an .npz archive (a single .npy array)")
    try:
        with loaded as z:
            return {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001 - corrupt members: bad zlib data, bad .npy headers, pickles
        raise FormatError(f"{path}: not a readable .npz file ({type(e).__name__})") from None


def _read_npz_mesh(path: Path) -> Mesh:
    z = _load_npz(path)
    key = "vertices" if "vertices" in z else "rest" if "rest" in z else None
    if key is None or "faces" not in z:
        raise FormatError(f"{path}: an .npz mesh needs 'vertices' (or 'rest') and 'faces'")
    v, f = np.asarray(z[key]), np.asarray(z["faces"])
    if v.ndim != 2 or v.shape[1] != 3 or not np.issubdtype(v.dtype, np.number):
        raise FormatError(f"{path}: '{key}' has shape {list(v.shape)} ({v.dtype}), expected [N,3] numbers")
    if f.ndim != 2 or f.shape[1] != 3 or not np.issubdtype(f.dtype, np.integer):
        raise FormatError(f"{path}: 'faces' has shape {list(f.shape)} ({f.dtype}), expected [F,3] integers")
    return Mesh(v, f)


def write_obj(path, mesh: Mesh) -> None:
    lines = [f"v {x:.7g} {y:.7g} {z:.7g}" for x, y, z in mesh.vertices]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in mesh.faces]
    atomic_write_text(path, "\n".join(lines) + "\n")


# --------------------------------------------------------------------------- sequences

@dataclass
class Sequence:
    """One 4D sequence in `neurok.sequence/1` (see DESIGN.md section 4)."""
    rest: np.ndarray
    faces: np.ndarray
    positions: np.ndarray
    dt: float
    gravity: np.ndarray
    material: dict
    external_accel: np.ndarray | None = None
    velocity0: np.ndarray | None = None
    pin_weight: np.ndarray | None = None
    pin_target: np.ndarray | None = None
    vertex_mass: np.ndarray | None = None
    floor_z: float | None = None
    floor_friction: float | None = None    # the floor's Coulomb coefficient (None: the default)
    meta: dict = field(default_factory=dict)

    @property
    def frames(self) -> int:
        return int(self.positions.shape[0])

    @property
    def num_vertices(self) -> int:
        return int(self.rest.shape[0])


def _shape_check(where, key, arr, shape, dtype=np.float32):
    arr = np.asarray(arr)
    if arr.ndim != len(shape) or any(s is not None and a != s for a, s in zip(arr.shape, shape)):
        want = "[" + ",".join("?" if s is None else str(s) for s in shape) + "]"
        raise FormatError(f"{where}: '{key}' has shape {list(arr.shape)}, expected {want}")
    if dtype is np.float32:
        if not np.issubdtype(arr.dtype, np.floating):
            raise FormatError(f"{where}: '{key}' must be floating point, got {arr.dtype}")
        with np.errstate(over="ignore", invalid="ignore"):
            arr = arr.astype(np.float32)
        if not np.all(np.isfinite(arr)):
            raise FormatError(f"{where}: '{key}' contains NaN or infinite values")
    else:
        if not np.issubdtype(arr.dtype, np.integer):
            raise FormatError(f"{where}: '{key}' must be integer, got {arr.dtype}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) > np.iinfo(np.int32).max):
            bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
            raise FormatError(f"{where}: '{key}' holds the index {bad}, out of range")
        arr = arr.astype(np.int32)
    return arr


def _json_field(where, key, raw):
    try:
        value = json.loads(str(raw))
    except json.JSONDecodeError as e:
        raise FormatError(f"{where}: '{key}' is not valid JSON ({e.msg})") from None
    except (ValueError, RecursionError) as e:  # e.g. integers with too many digits, deep nesting
        raise FormatError(f"{where}: '{key}' is not valid JSON ({type(e).__name__})") from None
    if not isinstance(value, dict):
        raise FormatError(f"{where}: '{key}' must be a JSON object")
    return value


def read_sequence(path) -> Sequence:
    where = str(path)
    if not Path(path).exists():
        raise FormatError(f"{where}: no such sequence file")
    return sequence_from_arrays(_load_npz(path), where)


def sequence_from_arrays(raw: dict, where: str = "sequence") -> Sequence:
    for key in ("format", "rest", "faces", "positions", "dt", "gravity", "material"):
        if key not in raw:
            raise FormatError(f"{where}: missing required key '{key}'")
    fmt = str(raw["format"])
    if fmt != SEQUENCE_FORMAT:
        raise FormatError(f"{where}: 'format' is {brief(fmt)}, expected '{SEQUENCE_FORMAT}'")
    rest = _shape_check(where, "rest", raw["rest"], (None, 3))
    n = rest.shape[0]
    if n == 0:
        raise FormatError(f"{where}: 'rest' has no vertices")
    faces = _shape_check(where, "faces", raw["faces"], (None, 3), dtype=np.int32)
    if faces.size and (faces.min() < 0 or faces.max() >= n):
        raise FormatError(f"{where}: 'faces' refers to vertex {int(faces.max())} but 'rest' has {n}")
    positions = _shape_check(where, "positions", raw["positions"], (None, n, 3))
    t = positions.shape[0]
    if t < 1:
        raise FormatError(f"{where}: 'positions' has no frames")
    try:
        dt = float(np.asarray(raw["dt"]).reshape(()))
    except (ValueError, TypeError, OverflowError):
        raise FormatError(f"{where}: 'dt' must be one number") from None
    if not (math.isfinite(dt) and dt > 0):
        raise FormatError(f"{where}: 'dt' must be a positive number of seconds, got {dt}")
    gravity = _shape_check(where, "gravity", raw["gravity"], (3,))
    material = _json_field(where, "material", raw["material"])
    kind = material.get("kind", "solid")
    if kind not in ("solid", "cloth"):
        raise FormatError(f"{where}: material 'kind' is {brief(kind)}, expected 'solid' or 'cloth'")
    seq = Sequence(rest=rest, faces=faces, positions=positions, dt=dt, gravity=gravity, material=material)
    if "external_accel" in raw:
        seq.external_accel = _shape_check(where, "external_accel", raw["external_accel"], (t, n, 3))
    if "velocity0" in raw:
        seq.velocity0 = _shape_check(where, "velocity0", raw["velocity0"], (n, 3))
    if "pin_weight" in raw:
        seq.pin_weight = _shape_check(where, "pin_weight", raw["pin_weight"], (n,))
        if seq.pin_weight.min() < 0:
            raise FormatError(f"{where}: 'pin_weight' must be non-negative")
    if "pin_target" in raw:
        seq.pin_target = _shape_check(where, "pin_target", raw["pin_target"], (t, n, 3))
    if "vertex_mass" in raw:
        seq.vertex_mass = _shape_check(where, "vertex_mass", raw["vertex_mass"], (n,))
        if seq.vertex_mass.min() <= 0:
            raise FormatError(f"{where}: 'vertex_mass' must be positive")
    if "floor_z" in raw:
        try:
            fz = float(np.asarray(raw["floor_z"]).reshape(()))
        except (ValueError, TypeError, OverflowError):
            raise FormatError(f"{where}: 'floor_z' must be one number (NaN: no floor)") from None
        if math.isinf(fz):
            raise FormatError(f"{where}: 'floor_z' must be finite (NaN: no floor), got {fz}")
        seq.floor_z = None if math.isnan(fz) else fz
    if "floor_friction" in raw:
        try:
            mu = float(np.asarray(raw["floor_friction"]).reshape(()))
        except (ValueError, TypeError, OverflowError):
            raise FormatError(f"{where}: 'floor_friction' must be one number") from None
        if not (math.isfinite(mu) and mu >= 0.0):
            raise FormatError(f"{where}: 'floor_friction' must be a finite number >= 0, got {mu}")
        seq.floor_friction = mu
    if "meta" in raw:
        seq.meta = _json_field(where, "meta", raw["meta"])
    return seq


def write_sequence(path, seq: Sequence, compact: bool = False) -> None:
    """`compact`: positions in float16 (the data set kept in the repository: a quarter of the
    size, 0.05% of each coordinate; `read_sequence` gives float32 back)."""
    arrays = {
        "format": np.array(SEQUENCE_FORMAT),
        "rest": np.asarray(seq.rest, np.float32),
        "faces": np.asarray(seq.faces, np.int32),
        "positions": np.asarray(seq.positions, np.float16 if compact else np.float32),
        "dt": np.array(float(seq.dt)),
        "gravity": np.asarray(seq.gravity, np.float32).reshape(3),
        "material": np.array(json.dumps(seq.material)),
        "meta": np.array(json.dumps(seq.meta)),
        "floor_z": np.array(np.nan if seq.floor_z is None else float(seq.floor_z)),
    }
    if seq.floor_friction is not None:
        arrays["floor_friction"] = np.array(float(seq.floor_friction))
    for key in ("external_accel", "velocity0", "pin_weight", "pin_target", "vertex_mass"):
        value = getattr(seq, key)
        if value is not None:
            arrays[key] = np.asarray(value, np.float32)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


# --------------------------------------------------------------------------- PC2 point caches

PC2_MAGIC = b"POINTCACHE2\0"
_PC2_HEADER = struct.Struct("<12siiffi")


def write_pc2(path, positions, start_frame: float = 0.0, sample_rate: float = 1.0) -> None:
    """Write frames [T,N,3] as a PC2 point cache (Blender's Mesh Cache modifier reads it)."""
    pos = np.ascontiguousarray(positions, dtype="<f4")
    if pos.ndim != 3 or pos.shape[2] != 3:
        raise FormatError(f"{path}: PC2 positions must be [frames, points, 3], got {list(pos.shape)}")
    header = _PC2_HEADER.pack(PC2_MAGIC, 1, pos.shape[1], float(start_frame), float(sample_rate), pos.shape[0])
    atomic_write_bytes(path, header + pos.tobytes())


def read_pc2(path) -> tuple[np.ndarray, float, float]:
    """Return (positions [T,N,3] float32, start frame, sample rate)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise FormatError(f"{path}: cannot read PC2 file ({e.strerror})") from None
    if len(data) < _PC2_HEADER.size:
        raise FormatError(f"{path}: too short for a PC2 header ({len(data)} bytes)")
    magic, version, points, start, rate, samples = _PC2_HEADER.unpack_from(data)
    if magic != PC2_MAGIC:
        raise FormatError(f"{path}: not a PC2 file (bad magic)")
    if version != 1 or points <= 0 or samples < 0:
        raise FormatError(f"{path}: bad PC2 header (version {version}, {points} points, {samples} samples)")
    expected = _PC2_HEADER.size + 12 * points * samples
    if len(data) != expected:
        raise FormatError(f"{path}: PC2 file is {len(data)} bytes, header promises {expected} (truncated or corrupt)")
    pos = np.frombuffer(data, dtype="<f4", offset=_PC2_HEADER.size).reshape(samples, points, 3)
    return pos.copy(), start, rate
