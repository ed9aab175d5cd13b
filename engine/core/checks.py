"""Input checks: what is wrong with a mesh before anything is simulated, in one sentence each.

`inspect_mesh` returns findings; `check_mesh` raises on the first error and returns the
warnings, which the command line prints and the add-on shows next to its OOD score.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import FormatError
from .geometry import triangle_areas
from .formats import Mesh

MAX_VERTICES = 2_000_000          # beyond this the engine refuses (memory: ~1.2 KB per vertex)
BYTES_PER_VERTEX = 1200           # measured peak of encode + bake per vertex (basis, frames)
EXTREME_ASPECT = 1e4


@dataclass
class Finding:
    level: str      # "error" or "warning"
    message: str


def inspect_mesh(mesh: Mesh, frames: int = 0) -> list[Finding]:
    v, f = np.asarray(mesh.vertices), np.asarray(mesh.faces)
    out = []
    if len(v) == 0:
        return [Finding("error", "the mesh has no vertices")]
    if not np.all(np.isfinite(v)):
        bad = int(np.argmax(~np.all(np.isfinite(v), axis=1)))
        return [Finding("error", f"vertex {bad} has a NaN or infinite coordinate")]
    if len(v) > MAX_VERTICES:
        return [Finding("error", f"the mesh has {len(v):,} vertices; the limit is {MAX_VERTICES:,} "
                                 f"(about {MAX_VERTICES * BYTES_PER_VERTEX / 2**30:.1f} GiB of working memory)")]
    if len(f) == 0:
        return [Finding("error", "the mesh has no faces (a point cloud cannot be simulated)")]
    extent = np.ptp(v, axis=0)
    if extent.max() <= 0:
        return [Finding("error", "all vertices are at the same point")]
    degenerate = int(np.sum(2.0 * triangle_areas(v, f) <= 1e-12 * extent.max() ** 2))
    if degenerate == len(f):
        return [Finding("error", "every face is degenerate (zero area)")]
    if degenerate:
        out.append(Finding("warning", f"{degenerate} degenerate (zero-area) face(s); they carry no mass or stiffness"))
    used = np.zeros(len(v), dtype=bool)
    used[f.ravel()] = True
    if not used.all():
        out.append(Finding("warning", f"{int((~used).sum())} loose vertex(es) belong to no face; they follow the nearest material"))
    rounded = np.round(v / (1e-7 * extent.max()))
    dup = len(v) - len(np.unique(rounded, axis=0))
    if dup:
        out.append(Finding("warning", f"{dup} duplicate vertex(es) at the same position (unwelded seams move apart)"))
    edges = np.sort(np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]), axis=1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    nonmanifold = int(np.sum(counts > 2))
    if nonmanifold:
        out.append(Finding("warning", f"{nonmanifold} non-manifold edge(s) (shared by more than two faces)"))
    from scipy.sparse import coo_matrix  # lazy: the add-on imports core without scipy to say what is missing
    from scipy.sparse.csgraph import connected_components
    n_comp = connected_components(coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(len(v), len(v))),
                                  directed=False)[0] - int((~used).sum())
    if n_comp > 1:
        out.append(Finding("warning", f"the mesh has {n_comp} separate parts; they are simulated as one body"))
    aspect = extent.max() / max(np.sort(extent)[1], 1e-30)
    if aspect > EXTREME_ASPECT:
        out.append(Finding("warning", f"extreme aspect ratio ({aspect:.0f}:1); thin directions are poorly resolved"))
    return out


def check_mesh(mesh: Mesh, where: str = "mesh", frames: int = 0) -> list[str]:
    """Raise FormatError for the first error; return the warnings' messages."""
    findings = inspect_mesh(mesh, frames)
    for finding in findings:
        if finding.level == "error":
            raise FormatError(f"{where}: {finding.message}")
    return [x.message for x in findings]



FEW_PINS = 3      # a solid held by fewer vertices hangs from points


def support_notes(setup) -> list[str]:
    """One line when a solid is held by fewer than three vertices: a point support, whose sag grows
    without bound as the discretisation refines (a 0.5 m rod held by its cap's centre vertex sagged
    14.8 / 17.2 / 24.8 mm in the reference at 6 / 12 / 16 lattice cells). The run goes on."""
    if setup.material.kind != "solid":
        return []
    held = int(np.count_nonzero(np.asarray(setup.pin_weight) > 0))
    if not 0 < held < FEW_PINS:
        return []
    return [f"the solid is held by {held} pinned vertex{'es' if held > 1 else ''} only: its sag there is set by "
            "the mesh, not the material (pin three or more vertices, a face or a region)"]
