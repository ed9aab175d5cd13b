"""Plausibility of a rollout, per frame and per sequence: what a viewer sees first (DESIGN.md
section 5). Measured the same way for the model, the reference and the oracle, with the shared
`core.measures.MeshMeasures` (the runtime guard uses the same measures).

Per frame: enclosed volume / rest (closed surfaces only), mean and max edge strain
|len / rest_len - 1|, share of flipped triangles (normals turned against the body's best-fit
rotation), growth (bounding box in the body's frame / rest) and penetration below the floor
(deepest vertex under floor_z, / diagonal).
Per sequence: the extremes and means of those over frames 1..T-1 (or a horizon).
"""
from __future__ import annotations

import numpy as np

from ..core.measures import MeshMeasures
from .distances import bbox_diagonal

MAX_MEASURED_FRAMES = 400       # longer rollouts are measured on evenly spaced frames


def measured_frames(T, limit=MAX_MEASURED_FRAMES):
    if T <= limit:
        return np.arange(T)
    return np.unique(np.round(np.linspace(0, T - 1, limit)).astype(int))


def plausibility_series(frames, setup, measures: MeshMeasures | None = None) -> dict:
    """Per-frame plausibility {"frame": [k], "volume_ratio": [k] (NaN: open surface), "strain_mean",
    "strain_max", "flipped", "growth", "penetration"} of a rollout [T,N,3]."""
    frames = np.asarray(frames)
    measures = measures or MeshMeasures(setup.rest, setup.faces)
    diag = bbox_diagonal(setup.rest)
    idx = measured_frames(len(frames))
    keys = ("volume_ratio", "strain_mean", "strain_max", "flipped", "growth", "penetration")
    out = {k: np.full(len(idx), np.nan) for k in keys}
    out["frame"] = idx
    for j, t in enumerate(idx):
        x = np.asarray(frames[t], np.float64)
        if not np.all(np.isfinite(x)):
            continue
        m = measures.frame(x)
        out["volume_ratio"][j] = np.nan if m["volume_ratio"] is None else m["volume_ratio"]
        out["strain_mean"][j] = m["edge_strain_mean"]
        out["strain_max"][j] = m["edge_strain_max"]
        out["flipped"][j] = m["flipped_share"]
        out["growth"][j] = m["growth"]
        out["penetration"][j] = (max(0.0, float(setup.floor_z - x[:, 2].min())) / diag
                                 if setup.floor_z is not None else 0.0)
    return out


def _nan(fn, a):
    a = np.asarray(a, np.float64)
    a = a[np.isfinite(a)]
    return float(fn(a)) if len(a) else None


def plausibility_summary(series, horizon=None) -> dict:
    """Per-sequence figures over frames 1..horizon (all frames after 0 when None)."""
    sel = series["frame"] >= 1
    if horizon is not None:
        sel &= series["frame"] <= horizon
    pick = {k: np.asarray(v)[sel] for k, v in series.items() if k != "frame"}
    vol = pick["volume_ratio"]
    return {"volume_ratio_min": _nan(np.min, vol), "volume_ratio_max": _nan(np.max, vol),
            "volume_error_max": _nan(np.max, np.abs(vol - 1.0)),
            "strain_mean": _nan(np.mean, pick["strain_mean"]), "strain_max": _nan(np.max, pick["strain_max"]),
            "flipped_mean": _nan(np.mean, pick["flipped"]), "flipped_max": _nan(np.max, pick["flipped"]),
            "growth_max": _nan(np.max, pick["growth"]), "penetration_max": _nan(np.max, pick["penetration"])}


# how each per-sequence figure is combined over sequences for the worst case
WORST = {"volume_ratio_min": min, "volume_ratio_max": max, "volume_error_max": max, "strain_mean": max,
         "strain_max": max, "flipped_mean": max, "flipped_max": max, "growth_max": max, "penetration_max": max}


def aggregate_plausibility(summaries) -> tuple[dict, dict]:
    """(mean over sequences, worst over sequences) of per-sequence summaries."""
    mean, worst = {}, {}
    for key, pick in WORST.items():
        vals = [s.get(key) for s in summaries if s and s.get(key) is not None and np.isfinite(s.get(key))]
        mean[key] = float(np.mean(vals)) if vals else None
        worst[key] = float(pick(vals)) if vals else None
    return mean, worst


def crossing_triangle_pairs(x, faces) -> int:
    """How many pairs of triangles that share no vertex pass through each other in the surface x
    [N,3]: a sheet folded through itself (neither engine has self-contact for sheets). One
    triangle's edge piercing the other, either way round, counts the pair once."""
    from scipy.spatial import cKDTree
    faces = np.asarray(faces)
    tri = np.asarray(x, dtype=np.float64)[faces]                           # [F,3,3]
    centre = tri.mean(axis=1)
    reach = np.linalg.norm(tri - centre[:, None], axis=2).max()
    pairs = np.array(sorted(cKDTree(centre).query_pairs(2.0 * reach)), dtype=np.int64).reshape(-1, 2)
    if not len(pairs):
        return 0
    shared = (faces[pairs[:, 0]][:, :, None] == faces[pairs[:, 1]][:, None, :]).any(axis=(1, 2))
    pairs = pairs[~shared]
    hit = np.zeros(len(pairs), dtype=bool)
    for a, b in ((0, 1), (1, 0)):
        for k in range(3):
            start, end = tri[pairs[:, a], k], tri[pairs[:, a], (k + 1) % 3]
            hit |= _segment_hits_triangle(start, end, tri[pairs[:, b]])
    return int(hit.sum())


def _segment_hits_triangle(p, q, tri, eps=1e-12) -> np.ndarray:
    """Whether segments p->q [P,3] pass through triangles tri [P,3,3] (Moller-Trumbore)."""
    d = q - p
    e1, e2 = tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
    h = np.cross(d, e2)
    det = np.einsum("pi,pi->p", e1, h)
    ok = np.abs(det) > eps
    inv = np.where(ok, 1.0 / np.where(ok, det, 1.0), 0.0)
    s = p - tri[:, 0]
    u = inv * np.einsum("pi,pi->p", s, h)
    qv = np.cross(s, e1)
    v = inv * np.einsum("pi,pi->p", d, qv)
    t = inv * np.einsum("pi,pi->p", e2, qv)
    return ok & (u >= 0) & (v >= 0) & (u + v <= 1) & (t >= 0) & (t <= 1)
