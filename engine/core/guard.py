"""The plausibility guard: no engine hands the user a frame that has visibly exploded.

Every frame a `Run` yields (preview or bake, either engine, any checkpoint) is measured with
`MeshMeasures` against limits derived from the material and the forces of its `Setup`:

- growth: bounding-box diagonal in the body's own frame (best-fit rotation removed) over rest;
- mean and max edge strain |len/rest - 1| (much tighter for cloth, whose membrane barely stretches);
- enclosed volume / rest of closed solids (both bounds; negative = inside out);
- share of surface triangles flipped against the body's rotation (solids only: cloth folds).

The reasoning behind each number is in docs/RELIABILITY.md. A frame that breaks a limit is
retried by the engine with more substeps (`Run._retry_frame`); if it still breaks it, the run
stops with `ImplausibleFrame` (a `SimulationFault`) whose message names the frame and the limit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import SimulationFault
from .measures import MeshMeasures
from .memo import MeshMemo

# ---- solids (stiffness = Young's modulus E in Pa, density in kg/m^3)
SOLID_STRAIN_MEAN = (0.30, 1.00)   # (limit with no load, cap) for the mean edge strain
SOLID_STRAIN_MAX = (1.50, 8.00)
SOLID_GROWTH = (1.80, 3.00)
SOLID_VOLUME_FLOOR = 0.20          # never accept less than 20% of the rest volume
SOLID_FLIPPED = 0.40               # share of surface triangles turned against the body's best-fit rotation
GUARD_SAMPLE = 10_000             # edges, triangles and points the strain and flip checks look at (a fixed sample)
QUICK_SAMPLE = 1_000               # the same for the quick check between two full ones (no volume)
                                   # (bending legitimately turns a free end: the reference bends 21% this way)
# ---- cloth (stiffness = membrane stiffness k in N/m, density = areal density in kg/m^2)
CLOTH_STRAIN_MEAN = (0.10, 0.50)
CLOTH_STRAIN_MAX = (1.00, 2.00)
CLOTH_GROWTH = (1.80, 2.50)
# how much the expected strain (see `load_strain`) widens each limit before its cap
STRAIN_MEAN_PER_LOAD = 1.5
STRAIN_MAX_PER_LOAD = 3.0
GROWTH_PER_LOAD = 1.5
EDGE_QUANTILE = 0.99              # "max" edge strain = the 99th percentile over edges
INITIAL_MARGIN = 1.25              # a frame 0 that is already deformed widens the limits to 1.25x its own measures

MEASURE_ORDER = ("finite", "growth", "volume_low", "volume_high", "edge_strain_mean", "edge_strain_max",
                 "flipped_share")


class ImplausibleFrame(SimulationFault):
    """A run stopped by the guard: `violation` says which limit `frame` broke; `positions`
    (filled by `Run.bake`) holds the plausible frames before it."""

    def __init__(self, violation: "Violation", positions=None):
        super().__init__(violation.message(), violation.frame, positions)
        self.violation = violation


@dataclass
class Violation:
    frame: int
    measure: str          # one of MEASURE_ORDER
    value: float
    limit: float
    what: str = "body"    # "solid (jelly)", "cloth (cloth)", ...

    def describe(self) -> str:
        v, lim = self.value, self.limit
        if self.measure == "finite":
            return "positions are NaN or infinite"
        if self.measure == "growth":
            return f"its size grew to {v:.2f}x rest with rotation removed (limit {lim:.2f}x)"
        if self.measure == "volume_low":
            if v < 0:
                return f"it turned inside out (volume {v:.0%} of rest)"
            return f"its volume fell to {v:.0%} of rest (limit {lim:.0%})"
        if self.measure == "volume_high":
            return f"its volume rose to {v:.0%} of rest (limit {lim:.0%})"
        if self.measure == "edge_strain_mean":
            return f"its edges are stretched or squashed by {v:.1%} on average (limit {lim:.1%})"
        if self.measure == "edge_strain_max":
            return f"1% of its edges are stretched or squashed by {v:.0%} or more (limit {lim:.0%})"
        if self.measure == "flipped_share":
            return f"{v:.0%} of its surface triangles are flipped (limit {lim:.0%})"
        return f"{self.measure} = {v:.3g} (limit {lim:.3g})"

    def message(self) -> str:
        last = f"frames 0-{self.frame - 1} are plausible" if self.frame > 1 else "only frame 0 is plausible"
        return (f"implausible result at frame {self.frame}: {self.describe()} for this {self.what}; "
                f"the run was stopped ({last})")

    def as_dict(self) -> dict:
        return {"frame": self.frame, "measure": self.measure, "value": self.value, "limit": self.limit}


# --------------------------------------------------------------------------- loads

def _max_accel(setup) -> float:
    """Largest external acceleration any vertex sees (m/s^2), gravity excluded."""
    if setup.accel_table is not None:
        table = np.asarray(setup.accel_table, np.float64)
        return float(np.linalg.norm(table, axis=-1).max()) if table.size else 0.0
    total = 0.0
    for weights, accel, profile in setup.force_terms:
        peak = 1.0
        if profile.get("type") == "keyframes":
            peak = max(abs(k[1]) for k in profile["keys"])
        total += float(np.max(np.abs(weights), initial=0.0)) * float(np.linalg.norm(accel)) * peak
    return total


def _max_speed(setup) -> float:
    """Largest initial vertex speed or pin-target speed (m/s)."""
    v = float(np.linalg.norm(np.asarray(setup.v0, np.float64), axis=1).max(initial=0.0))
    if setup.pin_targets is not None and len(setup.pin_targets) > 1 and np.any(setup.pin_weight > 0):
        pinned = np.asarray(setup.pin_weight) > 0
        steps = np.diff(np.asarray(setup.pin_targets, np.float64)[:, pinned], axis=0)
        v = max(v, float(np.linalg.norm(steps, axis=-1).max(initial=0.0)) / setup.dt)
    return v


def load_strain(setup, diagonal: float) -> float:
    """The strain the forces of a setup can plausibly cause, from the material alone: static
    strain of a column of the body's size under its largest acceleration, rho*a*L/E (cloth:
    rho_A*a*L/k), plus the dynamic strain of its fastest start or pin motion, v/c with the wave
    speed c = sqrt(E/rho) (cloth: sqrt(k/rho_A)). An overestimate for impulses: it only widens."""
    stiffness, density = setup.material.stiffness, setup.material.density
    accel = float(np.linalg.norm(setup.gravity)) + _max_accel(setup)
    static = density * accel * diagonal / stiffness
    dynamic = _max_speed(setup) / math.sqrt(stiffness / density)
    value = static + dynamic
    return value if math.isfinite(value) else 1e9


def _widen(bounds, per_load, load):
    base, cap = bounds
    return min(cap, base + per_load * load)


# --------------------------------------------------------------------------- the guard

@dataclass
class GuardLimits:
    growth: float
    edge_strain_mean: float
    edge_strain_max: float
    volume_low: float | None = None
    volume_high: float | None = None
    flipped_share: float | None = None
    load: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def limits_for(setup, diagonal: float) -> GuardLimits:
    mat = setup.material
    load = load_strain(setup, diagonal)
    if mat.kind == "cloth":
        mean = _widen(CLOTH_STRAIN_MEAN, STRAIN_MEAN_PER_LOAD, load)
        return GuardLimits(growth=_widen(CLOTH_GROWTH, GROWTH_PER_LOAD, load), edge_strain_mean=mean,
                           edge_strain_max=_widen(CLOTH_STRAIN_MAX, STRAIN_MAX_PER_LOAD, load), load=load)
    mean = _widen(SOLID_STRAIN_MEAN, STRAIN_MEAN_PER_LOAD, load)
    # Volume: under a stretch e the volume of an elastic solid changes by about (1 - 2 nu) e
    # (uniaxial stress); allow three times that at the largest accepted mean strain, plus 25%
    # for what a surface mesh's enclosed volume does under bending and contact.
    slack = 0.25 + 3.0 * (1.0 - 2.0 * mat.poisson) * mean
    low = max(SOLID_VOLUME_FLOOR, 1.0 - slack)
    return GuardLimits(growth=_widen(SOLID_GROWTH, GROWTH_PER_LOAD, load), edge_strain_mean=mean,
                       edge_strain_max=_widen(SOLID_STRAIN_MAX, STRAIN_MAX_PER_LOAD, load),
                       volume_low=low, volume_high=1.0 + slack, flipped_share=SOLID_FLIPPED, load=load)


def quantile(a, share: float) -> float:
    """np.quantile(a, share) (linear interpolation) by partial sorting: three times faster."""
    position = share * (len(a) - 1)
    low = int(position)
    high = min(low + 1, len(a) - 1)
    part = np.partition(a, (low, high))
    return float(part[low] + (position - low) * (part[high] - part[low]))


_MEASURES = MeshMemo()


def guard_measures(rest, faces) -> tuple[MeshMeasures, MeshMeasures]:
    """(full, quick) rest measures of a mesh, made once per mesh (at 100k vertices they take
    about a second); the quick sample shares the full one's edges."""
    def make(rest, faces):
        full = MeshMeasures(rest, faces, max_elements=GUARD_SAMPLE)
        return full, MeshMeasures(rest, faces, max_elements=QUICK_SAMPLE, with_volume=False, edges=full.all_edges)
    return _MEASURES.get(rest, faces, None, make)


class Guard:
    """Checks frames of one setup. `check(t, x)` returns a `Violation` or None."""

    def __init__(self, setup, limits: GuardLimits | None = None):
        # strain, flips and rotation on a fixed sample of 10,000 elements: at 100k vertices the full
        # check cost more than the step itself; a broken bake breaks many elements at once
        self.measures, self.quick_measures = guard_measures(setup.rest, setup.faces)
        self.limits = limits or limits_for(setup, self.measures.diagonal)
        mat = setup.material
        self.what = f"{mat.kind} ({mat.preset})" if mat.preset else str(mat.kind)
        self._allow_initial(setup.x0)

    def _allow_initial(self, x0):
        """A frame 0 that is already deformed (a replayed sequence) is the user's input, not the
        engine's doing: the limits are widened so that it and a margin beyond it pass."""
        m = self.measure(x0)
        if m is None:
            return
        lim = self.limits
        lim.growth = max(lim.growth, INITIAL_MARGIN * m["growth"])
        lim.edge_strain_mean = max(lim.edge_strain_mean, INITIAL_MARGIN * m["edge_strain_mean"])
        lim.edge_strain_max = max(lim.edge_strain_max, INITIAL_MARGIN * m["edge_strain_max"])
        if lim.flipped_share is not None:
            lim.flipped_share = max(lim.flipped_share, INITIAL_MARGIN * m["flipped_share"])
        vr = m["volume_ratio"]
        if vr is not None and lim.volume_low is not None:
            lim.volume_low = min(lim.volume_low, vr / INITIAL_MARGIN) if vr > 0 else -math.inf
            lim.volume_high = max(lim.volume_high, vr * INITIAL_MARGIN)

    def measure(self, x, quick=False) -> dict | None:
        """The guard's measures of one frame (None if it is not finite). `quick`: on the small
        sample, without the volume (see `core.run.Run.frames` for when each is used)."""
        x = np.asarray(x, np.float64)
        if not np.all(np.isfinite(x)):
            return None
        mm = self.quick_measures if quick else self.measures
        strain = mm.edge_strain(x)
        R = mm.rotation(x)
        return {"growth": mm.growth(x, R),
                "edge_strain_mean": float(strain.mean()) if len(strain) else 0.0,
                # the worst 1% of edges, not the single worst: a sliver edge a few micrometres long
                # next to a poke can triple its length in a correct simulation
                "edge_strain_max": quantile(strain, EDGE_QUANTILE) if len(strain) else 0.0,
                "volume_ratio": mm.volume_ratio(x) if self.limits.volume_low is not None and not quick else None,
                "flipped_share": mm.flipped_share(x, R) if self.limits.flipped_share is not None else 0.0}

    def check(self, frame: int, x, quick=False) -> Violation | None:
        m = self.measure(x, quick)
        if m is None:
            return Violation(frame, "finite", math.nan, math.nan, self.what)
        lim = self.limits
        found = []
        if m["growth"] > lim.growth:
            found.append(("growth", m["growth"], lim.growth))
        vr = m["volume_ratio"]
        if vr is not None:
            if vr < lim.volume_low:
                found.append(("volume_low", vr, lim.volume_low))
            elif vr > lim.volume_high:
                found.append(("volume_high", vr, lim.volume_high))
        if m["edge_strain_mean"] > lim.edge_strain_mean:
            found.append(("edge_strain_mean", m["edge_strain_mean"], lim.edge_strain_mean))
        if m["edge_strain_max"] > lim.edge_strain_max:
            found.append(("edge_strain_max", m["edge_strain_max"], lim.edge_strain_max))
        if lim.flipped_share is not None and m["flipped_share"] > lim.flipped_share:
            found.append(("flipped_share", m["flipped_share"], lim.flipped_share))
        if not found:
            return None
        measure, value, limit = found[0]
        return Violation(frame, measure, float(value), float(limit), self.what)
