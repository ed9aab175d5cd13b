"""Distances between a predicted and a true rollout (DESIGN.md section 5; all lengths divided by
the rest bounding-box diagonal).

- rel_l2(t): mean over vertices of |x_pred - x_true| at frame t.
- horizons: the mean of rel_l2 over frames 1..24, 1..100 and the whole rollout (a plausible
  simulator whose phase drifts loses at long horizons what it keeps at short ones).
- chamfer_l1: symmetric Chamfer-L1 between the surfaces: 2048 points sampled on each by area
  (the same random numbers on both, so identical surfaces give 0), mean nearest-point distance
  (scipy cKDTree) in each direction, averaged.
- unstable: NaN/Inf, or a vertex further than 10 rest half-diagonals from the centre of the true
  frame's bounding box. Frames after such an event are held at the last good frame.
- pin drift: mean distance of pinned vertices from their (possibly animated) targets.
- centroid path error and motion amplitude: does the body go where, and move as much as, the
  reference.
- end turn: the angle between the body's up axis (its rest z axis turned by its best-fit
  rotation) in the last predicted frame and in the last true one: does it end standing as the
  reference does, or lying where the reference lies.
"""
from __future__ import annotations

import numpy as np

from ..core.geometry import bbox_diagonal, triangle_areas
from ..core.measures import best_rotation

REPORT_FRAMES = (1, 10, 50, 100, 200)
HORIZONS = (24, 100)            # plus "all": the whole rollout
CHAMFER_POINTS = 2048
CHAMFER_FRAMES = 25
UNSTABLE_RADIUS = 10.0          # in rest half-diagonals


def rel_l2_curve(pred, true, diag) -> np.ndarray:
    """rel_l2 per frame [T]."""
    return np.linalg.norm(np.asarray(pred, np.float64) - np.asarray(true, np.float64), axis=-1).mean(axis=-1) / diag


def horizon_means(curve) -> dict:
    """{"24": mean of frames 1..24, "100": ..., "all": frames 1..T-1}; None where the rollout is
    shorter than the horizon."""
    curve = np.asarray(curve, np.float64)
    T = len(curve)
    out = {str(h): (float(curve[1:h + 1].mean()) if T > h else None) for h in HORIZONS}
    out["all"] = float(curve[1:].mean()) if T > 1 else 0.0
    return out


def sample_surface(x, faces, n=CHAMFER_POINTS, seed=0) -> np.ndarray:
    """n points on the triangle surface x[faces], drawn by area (vertices if there are no faces)."""
    x = np.asarray(x, np.float64)
    faces = np.asarray(faces)
    rng = np.random.default_rng(seed)
    if len(faces) == 0:
        return x
    a, b, c = x[faces[:, 0]], x[faces[:, 1]], x[faces[:, 2]]
    area = triangle_areas(x, faces)
    total = area.sum()
    p = area / total if total > 0 and np.isfinite(total) else np.full(len(faces), 1.0 / len(faces))
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    f = np.searchsorted(cdf, rng.random(n), side="right").clip(0, len(faces) - 1)
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1
    u[flip], v[flip] = 1 - u[flip], 1 - v[flip]
    return a[f] + u[:, None] * (b[f] - a[f]) + v[:, None] * (c[f] - a[f])


def chamfer_l1(x_pred, x_true, faces, diag, n=CHAMFER_POINTS, seed=0) -> float:
    """Symmetric Chamfer-L1 (mean of both directions' mean nearest distances) / diag."""
    from scipy.spatial import cKDTree
    p = sample_surface(x_pred, faces, n, seed)
    t = sample_surface(x_true, faces, n, seed)
    d_pt = cKDTree(t).query(p)[0]
    d_tp = cKDTree(p).query(t)[0]
    return float(0.5 * (d_pt.mean() + d_tp.mean()) / diag)


def chamfer_frames(T, count=CHAMFER_FRAMES):
    frames = set(int(round(v)) for v in np.linspace(1, T - 1, min(count, max(T - 1, 1)))) if T > 1 else set()
    frames |= {f for f in REPORT_FRAMES if f < T}
    return sorted(f for f in frames if 1 <= f < T)


def first_unstable_frame(pred, rest, true=None, radius=UNSTABLE_RADIUS):
    """Index of the first frame that is NaN/Inf or leaves the rest bounding sphere scaled by
    `radius` (centred on the true frame's bounding-box centre when the truth is given); None if
    the whole rollout is fine."""
    pred = np.asarray(pred)
    rest = np.asarray(rest, np.float64)
    half = 0.5 * bbox_diagonal(rest)
    finite = np.all(np.isfinite(pred.reshape(len(pred), -1)), axis=1)
    if true is not None:
        true = np.asarray(true, np.float64)
        centre = 0.5 * (true.min(axis=1) + true.max(axis=1))            # [T,3]
    else:
        centre = np.repeat((0.5 * (rest.min(axis=0) + rest.max(axis=0)))[None], len(pred), axis=0)
    with np.errstate(invalid="ignore", over="ignore"):
        dist = np.linalg.norm(np.where(np.isfinite(pred), pred, 0.0) - centre[:, None, :], axis=-1).max(axis=1)
    bad = ~finite | (dist > radius * half)
    idx = np.nonzero(bad)[0]
    return int(idx[0]) if len(idx) else None


def hold_from(pred, frame):
    """Copy of pred with frames >= `frame` held at frame - 1 (the last good one)."""
    pred = np.array(pred, dtype=np.float32, copy=True)
    if frame is not None and frame < len(pred):
        pred[frame:] = pred[max(frame - 1, 0)]
    return pred


def pin_drift(pred, setup, diag) -> float | None:
    pinned = np.nonzero(np.asarray(setup.pin_weight) > 0)[0]
    if len(pinned) == 0 or len(pred) < 2:
        return None
    d = [np.linalg.norm(pred[t][pinned] - setup.pin_target(t)[pinned], axis=1).mean() for t in range(1, len(pred))]
    return float(np.mean(d) / diag)


def centroid_path_error(pred, true, diag) -> float | None:
    """Mean over frames 1..T-1 of the distance between the predicted and true centroids / diag."""
    pred, true = np.asarray(pred, np.float64), np.asarray(true, np.float64)
    if len(true) < 2:
        return None
    return float(np.linalg.norm(pred.mean(axis=1) - true.mean(axis=1), axis=-1)[1:].mean() / diag)


def motion_amplitude(frames) -> float:
    """Mean over frames 1..T-1 and vertices of the distance from frame 0 (metres)."""
    frames = np.asarray(frames, np.float64)
    if len(frames) < 2:
        return 0.0
    return float(np.linalg.norm(frames[1:] - frames[:1], axis=-1).mean())


def amplitude_ratio(pred, true, diag) -> float | None:
    """Motion amplitude of the prediction over the reference's (1: moves as much; 0: still).
    None when the reference hardly moves (under 0.1% of the diagonal)."""
    a_true = motion_amplitude(true)
    if a_true < 1e-3 * diag:
        return None
    return motion_amplitude(pred) / a_true


def up_axis(rest, x) -> np.ndarray:
    """The body's rest z axis turned by the best-fit rotation of rest -> x."""
    return best_rotation(np.asarray(rest, np.float64), np.asarray(x, np.float64))[:, 2]


def end_turn_degrees(pred, true, rest) -> float | None:
    """Angle (degrees) between the up axes of the last predicted and last true frames."""
    if len(pred) < 2 or len(true) < 2:
        return None
    c = float(np.dot(up_axis(rest, pred[-1]), up_axis(rest, true[-1])))
    return float(np.degrees(np.arccos(np.clip(c, -1.0, 1.0))))
