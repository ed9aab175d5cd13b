"""The resolution noise floor (DESIGN.md section 5): the reference simulator against itself at
twice the resolution, on the same setup. No accuracy figure means anything below it.

The measurement is `engine/evaluation/noise_floor.py` (`noise_floor(setup, frames=None) -> dict`,
two runs of the reference simulator); this module calls it and reads its answer into two numbers:
rel_l2 (rollout mean, / diagonal) and its ratio to hold-still.
"""
from __future__ import annotations

import numbers

from .noise_floor import noise_floor

NOT_AVAILABLE = "not measured"


def _number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, dict):
        for key in ("mean", "all", "rollout_mean", "value"):
            if key in value:
                return _number(value[key])
    return None


def read_noise_floor(raw: dict) -> dict:
    """{"rel_l2": float|None, "ratio_to_hold_still": float|None, "raw": raw} from the reference's
    answer, whatever names it uses for the two figures."""
    rel, ratio = _number(raw.get("rel_l2")), _number(raw.get("ratio_to_hold_still"))
    for key, value in raw.items():
        if rel is not None and ratio is not None:
            break
        if "hold_still_rel_l2" in str(key):
            continue
        k = str(key).lower()
        if ratio is None and ("hold" in k or "ratio" in k):
            ratio = _number(value)
        elif rel is None and "rel_l2" in k:
            rel = _number(value)
    return {"available": True, "rel_l2": rel, "ratio_to_hold_still": ratio, "raw": raw}


def noise_floor_for(setup, frames=None, **kwargs) -> dict:
    """The noise floor of one setup, or {"available": False, "note": ...}; `kwargs` go to
    `noise_floor` (a solid's `lattice_cells`)."""
    try:
        raw = noise_floor(setup, frames=frames, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a failed measurement is reported, not fatal
        return {"available": False, "note": f"failed: {type(exc).__name__}: {str(exc)[:160]}"}
    return read_noise_floor(dict(raw))


def mean_noise_floor(entries) -> dict:
    """Mean of several `noise_floor_for` answers (the available ones)."""
    got = [e for e in entries if e.get("available")]
    if not got:
        notes = {e.get("note") for e in entries} or {NOT_AVAILABLE}
        return {"available": False, "note": sorted(n for n in notes if n)[0] if any(notes) else NOT_AVAILABLE}
    out = {"available": True, "sequences": len(got)}
    for key in ("rel_l2", "ratio_to_hold_still"):
        vals = [e[key] for e in got if e.get(key) is not None]
        out[key] = sum(vals) / len(vals) if vals else None
    return out
