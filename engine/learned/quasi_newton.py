"""Quasi-Newton minimisation of a layer's incremental potential in full space (the sheet's and
the solid's layers): L-BFGS with a prefactored sparse solve as its first inverse Hessian (Liu et
al. 2017), an Armijo line search, and vectors kept column-major so that each coordinate's column
is contiguous for the BLAS calls and the prefactored solve."""
from __future__ import annotations

import numpy as np
import scipy.sparse.linalg as spla
from scipy.linalg.blas import daxpy, ddot

LAYER_MEMORY = 10              # curvature pairs kept
# the layers' systems are symmetric positive definite: factored without pivoting, on the fill-reducing
# order of A + A^T kept as it is (half the solve's time on the 10k sheet's proxy, the same entries:
# `experiments/sheet_solve_cost.py`)
FACTOR_OPTIONS = {"permc_spec": "MMD_AT_PLUS_A", "diag_pivot_thresh": 0.0, "options": {"SymmetricMode": True}}


class PrefactoredSolve:
    """A sparse symmetric system factored once, solved in single precision: a preconditioner needs
    no more digits, and the solve is bound by reading the factor (half the bytes: 1.15 -> 1.05 ms
    at 10k vertices, 24.9 -> 19.4 ms at 100k, three right-hand sides, one core:
    `experiments/sheet_solve_cost.py`)."""

    def __init__(self, matrix):
        self.lu = spla.splu(matrix.astype(np.float32).tocsc(), **FACTOR_OPTIONS)

    def solve(self, rhs):
        """[N,3] column-major in float64, like `rhs`."""
        return self.lu.solve(np.asfortranarray(rhs, dtype=np.float32)).astype(np.float64, order="F")

    def solve_column(self, rhs):
        """One coordinate's column [N] in float64."""
        return self.lu.solve(np.asarray(rhs, dtype=np.float32)).astype(np.float64)


def as_columns(x) -> np.ndarray:
    """x [N,3] column-major (Fortran order): the layout of every vector the iterations make."""
    return np.asfortranarray(x, dtype=np.float64)


def coordinate_solves(diagonals, factor):
    """A first inverse Hessian solved one coordinate at a time, for systems whose contacts add a
    diagonal of their own to each coordinate: `factor(d)` is the `PrefactoredSolve` of the system
    with the diagonal d [N] added (d may be all zero), for each column of `diagonals` [N,3];
    coordinates with the same diagonal share a factor (the floor's x and y). The solve takes and
    gives [N,3] column-major."""
    factors = {}
    for c in range(3):
        key = diagonals[:, c].tobytes()
        if key not in factors:
            factors[key] = factor(diagonals[:, c])
    solves = [factors[diagonals[:, c].tobytes()] for c in range(3)]

    def solve(r):
        return as_columns(np.stack([f.solve_column(r[:, c]) for c, f in enumerate(solves)], axis=1))
    return solve


def flat(x) -> np.ndarray:
    """A vector of the iterations as one column of 3N numbers (a view for column-major x)."""
    return x.ravel(order="F")


def dot(a, b) -> float:
    return ddot(flat(a), flat(b))


def line_search(potential, x, energy, grad, step):
    """Backtracking (Armijo) along `step`: (x, energy, gradient) accepted."""
    slope = dot(grad, step)
    if slope >= 0:
        return x, energy, grad, False
    t = 1.0
    while True:
        trial = x + t * step
        e_trial, g_trial = potential(trial)
        if e_trial <= energy + 1e-4 * t * slope:
            return trial, e_trial, g_trial, True
        if t < 1e-4:
            return x, energy, grad, False
        t *= 0.5


def quasi_newton(potential, x, precondition, iterations, memory, history, trace=None):
    """Minimise `potential` (x -> energy, gradient) from x by `iterations` L-BFGS steps whose first
    inverse Hessian is `precondition`. Every accepted step's curvature pair (s, y) joins `history`
    (a list, extended in place, its last `memory` kept). A step the line search cannot shorten into
    a decrease ends the iterations: from the same x and history the next would be the same.
    `trace` (a list, for measurements) gets (energy, gradient) at the start and after each step."""
    energy, grad = potential(x)
    if trace is not None:
        trace.append((energy, grad))
    for _ in range(iterations):
        step = -two_loop(grad, history, precondition)
        if dot(grad, step) >= 0:
            step = -precondition(grad)
        x1, e1, g1, moved = line_search(potential, x, energy, grad, step)
        if not moved:
            break
        s, y = flat(x1 - x), flat(g1 - grad)      # kept flat (views): the two-loop reads them as they are
        sy = ddot(s, y)
        if sy > 1e-300:
            history.append((s, y, 1.0 / sy))
            del history[:-memory]
        x, energy, grad = x1, e1, g1
        if trace is not None:
            trace.append((energy, grad))
    return x


def two_loop(grad, history, precondition):
    """L-BFGS's product of its inverse-Hessian estimate with the gradient (BLAS in place: at 10k
    vertices numpy's temporaries cost as much as the prefactored solve). The pairs (s, y, 1/s.y)
    are flat (`flat`); the result has grad's shape, column-major."""
    shape = grad.shape
    q = flat(grad).copy()
    alphas = []
    for s, y, rho in reversed(history):
        alpha = rho * ddot(s, q)
        q = daxpy(y, q, a=-alpha)
        alphas.append(alpha)
    r = flat(np.asarray(precondition(q.reshape(shape, order="F")))).copy()
    for (s, y, rho), alpha in zip(history, reversed(alphas)):
        r = daxpy(s, r, a=alpha - rho * ddot(y, r))
    return r.reshape(shape, order="F")
