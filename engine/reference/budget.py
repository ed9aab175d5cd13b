"""The work budget of one substep of the reference simulator's solve.

A load far beyond anything the material can carry (issue 26: Suzanne pushed at 30,000 m/s²)
does not make the Newton solve fail; it makes it crawl: every iteration is cut short by the
self-contact step limit, the line search halves many times, and the contact's candidate search
grows with the distance a step would travel, so one frame took minutes. Each substep therefore
gets a budget of work, counted (not timed, so a run is the same on any machine). The budget
sits far above what ordinary scenes use (docs/RELIABILITY.md, "The reference simulator's work
budget", has the measurements); a frame whose substep runs out of it is computed again with more substeps, and
if it runs out again the run stops with `WorkBudgetExceeded`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..core.errors import SimulationFault
from ..core.guard import load_strain

BUDGET_RETRY_FACTOR = 4         # a frame that runs out is computed again with 4x the substeps,
RETRY_NEWTON_ITERATIONS = 100   # where each substep must converge within this many Newton iterations

# Under friction, the retry's substeps converge, but slowly: a blob landing on the floor (data/train_l8
# #42) needed more than 20 iterations in a retry substep, and converged within 100 (its frame took
# 47 s; tests/test_work_budget.py). The rest of the budget still stops what grinds.
# A run that gave up made no frames, so a change to these rules that only lets such runs finish leaves
# every file made before current (its stamp holds no copy of them); a kept failure or a skipped scene
# is current only under the same rules (`GIVING_UP`), so the run is tried again under new ones.
GIVING_UP = {"retry_factor": BUDGET_RETRY_FACTOR, "retry_newton_iterations": RETRY_NEWTON_ITERATIONS}


@dataclass
class Work:
    """Work of one substep (or the most of any substep, as a peak)."""
    newton_iterations: int = 0
    line_search_halvings: int = 0     # summed over the substep's Newton iterations
    contact_limited_steps: int = 0    # Newton steps the self-contact step limit cut short
    contact_cut_halvings: int = 0     # how far it cut them: the sum of log2(1 / share allowed)
    contact_pairs: int = 0            # contact pairs whose distance was computed

    def raise_to(self, other: "Work") -> None:
        for f in fields(self):
            setattr(self, f.name, max(getattr(self, f.name), getattr(other, f.name)))

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# Measured with experiments/work_budget_scan.py (docs/RELIABILITY.md, work budget), the most any substep
# used: line-search halvings 26, contact cuts 80 and pair checks 1.7 million on the demo scenes, the
# evaluation scenes and generated training sequences; contact cuts 200 and pair checks 12.4 million
# on the jelly sweep's 100x pokes and squeezes (docs/PHYSICS.md (o)), which run as before. The
# issue's case spends 60 million pair checks a substep. Newton iterations have their own cap (the
# simulator's `newton_iterations`), which ends a substep unconverged, and in a retry must be met within
# RETRY_NEWTON_ITERATIONS (None: not limited here).
# Line-search halvings are bounded by that cap: a line search that fails its sufficient decrease
# stops at 1e-4 (14 halvings) unless the energy is infinite there, so 20 iterations that all fail
# spend 280; each halving is one energy evaluation without a Hessian. Contact makes such failures
# ordinary (the colliders' closest points and normals are found again at every trial state, so a
# Newton step computed with one contact set is judged on another): a stiff body (E = 200 kPa)
# tumbling down a tilted Collision box spent 106 in one substep (issue 44), and 43
# experiments/tumble_scan.py's union. So the cap is 300: every iteration of a substep may fail its line
# search once before the substep is computed again with more substeps; what grinds is stopped by
# the contact pairs and cuts, as before.
DEFAULT_BUDGET = Work(newton_iterations=None, line_search_halvings=300, contact_limited_steps=None,
                      contact_cut_halvings=400, contact_pairs=20_000_000)

DESCRIPTIONS = {
    "newton_iterations": "Newton iterations",
    "line_search_halvings": "line-search halvings",
    "contact_limited_steps": "self-contact step limits",
    "contact_cut_halvings": "self-contact step limits (in halvings of the Newton step)",
    "contact_pairs": "self-contact pair checks",
}


class OutOfWork(Exception):
    """A substep spent more than its budget of `what` (internal: the simulator retries the frame)."""

    def __init__(self, what: str, spent: int, limit: int):
        super().__init__(self.describe(what, spent, limit))
        self.what, self.spent, self.limit = what, spent, limit

    @staticmethod
    def describe(what, spent, limit) -> str:
        if what == "newton_iterations":
            return f"did not converge in {limit} Newton iterations"
        return f"ran out of {DESCRIPTIONS[what]} ({spent:,} > {limit:,})"


class SubstepWork(Work):
    """The running count of one substep against a budget."""

    def __init__(self, budget: Work | None):
        super().__init__()
        self.budget = budget

    def spend(self, what: str, amount: int = 1) -> None:
        spent = getattr(self, what) + int(amount)
        setattr(self, what, spent)
        limit = None if self.budget is None else getattr(self.budget, what)   # None: not limited
        if limit is not None and spent > limit:
            raise OutOfWork(what, spent, limit)


def halvings(start: float, alpha: float) -> int:
    """How many times a line search halved its step from `start` to reach `alpha`; one that gave
    up (alpha 0) halved down to 1e-12."""
    if alpha <= 0.0:
        return int(round(math.log2(start / 1e-12))) if start > 0 else 0
    return max(0, int(round(math.log2(start / alpha))))


class WorkBudgetExceeded(SimulationFault):
    """A run the reference simulator stopped because a substep ran out of its work budget, also
    with more substeps; `positions` (filled by `Run.bake`) holds the frames before it."""

    def __init__(self, frame: int, first: OutOfWork, again: OutOfWork, load: float, kind: str, positions=None):
        super().__init__(_message(frame, first, again, load, kind), frame, positions)
        self.what, self.load = again.what, load


def setup_load(setup, diagonal: float) -> float:
    """The load that can cause such work: the guard's strain estimate rho*a*L/E + v/c."""
    return load_strain(setup, diagonal)


def _message(frame: int, first: OutOfWork, again: OutOfWork, load: float, kind: str) -> str:
    done = f"frames 0-{frame - 1} were computed" if frame > 1 else "only frame 0 was computed"
    symbol = "ρ_A·a·L/k" if kind == "cloth" else "ρaL/E"
    return (f"the reference simulator gave up at frame {frame}: a substep {first}, and with {BUDGET_RETRY_FACTOR}x "
            f"the substeps one {again}, under a load of {symbol} = {_figure(load)}; the run was stopped ({done})")


def _figure(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
