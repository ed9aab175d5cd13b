"""The CPU fast path of one latent step: the same incremental potential as
`dynamics.step_terms`, in float64 numpy.

A step works on a few dozen numbers, so on a CPU the cost is per-operation overhead, not
arithmetic; numpy's overhead is several times smaller than torch's. The torch version stays
the one that trains (and runs on CUDA); `tests/test_model.py` checks the two agree.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .model import TRANSLATION_MODES
from ..core.physics import FLOOR_FRICTION, FLOOR_OMEGA2


class SingleThreadedBlas:
    """BLAS threads on matrices this small only wait for each other (a step measured 20x
    slower with OpenBLAS's default threads on a busy 2-core machine), so step with one.
    The libraries are looked up once; entering the limit is then cheap."""

    def __init__(self):
        try:
            from threadpoolctl import ThreadpoolController
            self.controller = ThreadpoolController()
        except ImportError:  # optional: without it the step is correct, only slower on busy machines
            self.controller = None

    def __call__(self):
        if self.controller is None:
            return contextlib.nullcontext()
        return self.controller.limit(limits=1, user_api="blas")


class NumpyPotential:
    """v(q) = 1/2 |B q_e|^2 + |g(q_e) - g(0)|^2 for one mesh, with the MLP g unrolled."""

    def __init__(self, potential, s, material, B):
        layers = [m for m in potential.g]
        self.linears = [(m.weight.detach().double().cpu().numpy(), m.bias.detach().double().cpu().numpy())
                        for m in layers if hasattr(m, "weight")]
        self.cond = np.concatenate([s.detach().double().cpu().numpy(), material.detach().double().cpu().numpy()])
        self.B = B.detach().double().cpu().numpy()
        self.BtB = self.B.T @ self.B
        self.m = self.B.shape[0]
        self.g0 = self._g(np.zeros(self.m))[0]

    def _g(self, qe, jacobian=False):
        h = np.concatenate([qe, self.cond])
        J = np.eye(len(h), self.m) if jacobian else None
        last = len(self.linears) - 1
        for i, (W, b) in enumerate(self.linears):
            h = W @ h + b
            if jacobian:
                J = W @ J
            if i < last:
                sig = 1.0 / (1.0 + np.exp(-h))
                if jacobian:
                    J = (sig * (1.0 + h * (1.0 - sig)))[:, None] * J
                h = h * sig
        return h, J

    def terms(self, q, derivatives=True):
        qe = q[TRANSLATION_MODES:]
        Bq = self.B @ qe
        g1, J = self._g(qe, derivatives)
        r = g1 - self.g0
        v = 0.5 * Bq @ Bq + r @ r
        if not derivatives:
            return v, None, None
        d = len(q)
        grad, hess = np.zeros(d), np.zeros((d, d))
        grad[TRANSLATION_MODES:] = self.B.T @ Bq + 2.0 * J.T @ r
        hess[TRANSLATION_MODES:, TRANSLATION_MODES:] = self.BtB + 2.0 * J.T @ J
        return v, grad, hess


def numpy_context(ctx) -> dict:
    """A torch step context as float64 numpy arrays."""
    out = {}
    for k, v in ctx.items():
        if k in ("s", "mat", "B"):
            continue
        out[k] = v.detach().double().cpu().numpy() if hasattr(v, "detach") else np.asarray(v, dtype=np.float64)
    for k in ("h", "w0sq", "alpha", "beta", "floor", "has_floor"):
        if k in out:
            out[k] = float(out[k])
    return out


def step_terms(pot: NumpyPotential, q, c, derivatives=True):
    h, w0sq = c["h"], c["w0sq"]
    dq = q - c["q_n"] - h * c["qd_n"]
    dv = q - c["q_n"]
    damping = c["alpha"] * np.eye(len(q)) + c["beta"] * w0sq * c["Hd"]
    v, gv, Hv = pot.terms(q, derivatives)
    Pq, Ddv = c["P"] @ q, damping @ dv
    energy = 0.5 * dq @ dq / h ** 2 + w0sq * v - c["f"] @ q + 0.5 * q @ Pq - c["b"] @ q + 0.5 / h * dv @ Ddv
    phi_z, phi_t = c["phi_z"], c["phi_t"]
    kc = len(phi_z)
    pen = np.minimum(c["z_c"] + phi_z @ q - c["floor"], 0.0)
    slide = phi_t @ dv                                    # [Kc*2]
    k_floor = c["has_floor"] * FLOOR_OMEGA2 / kc
    k_fric = c["has_floor"] * FLOOR_FRICTION / h ** 2 / kc * c["contact2"]
    energy += 0.5 * k_floor * pen @ pen + 0.5 * (k_fric * slide) @ slide
    if not derivatives:
        return energy, None, None
    grad = dq / h ** 2 + w0sq * gv - c["f"] + Pq - c["b"] + Ddv / h + k_floor * phi_z.T @ pen + phi_t.T @ (k_fric * slide)
    active = pen < 0
    hess = np.eye(len(q)) / h ** 2 + w0sq * Hv + c["P"] + damping / h \
        + k_floor * phi_z[active].T @ phi_z[active] + (phi_t.T * k_fric) @ phi_t
    return energy, grad, hess


def prepare_contacts(c):
    """Flatten the contact-sample basis once per context (z rows; tangential x/y rows)."""
    phi_c = c.pop("phi_c")
    c["phi_z"] = phi_c[:, :, 2]
    c["phi_t"] = np.transpose(phi_c[:, :, :2], (0, 2, 1)).reshape(-1, phi_c.shape[1])
    c["contact2"] = np.repeat(c.pop("contact"), 2)
    return c


def newton(pot, c, q0, iterations=12, tolerance=1e-7):
    q = q0
    for _ in range(iterations):
        e0, g, H = step_terms(pot, q, c)
        try:
            step = -np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            return q, False
        if not np.all(np.isfinite(step)):
            return q, False
        slope, alpha = g @ step, 1.0
        while alpha > 1e-3 and step_terms(pot, q + alpha * step, c, False)[0] > e0 + 1e-4 * alpha * slope:
            alpha *= 0.5
        q = q + alpha * step
        if np.max(np.abs(alpha * step)) < tolerance:
            break
    return q, True


def step(pot, c, integrator="backward_euler"):
    """One step from (q_n, qd_n) as in `integrators.step`. Returns (q, qd, converged)."""
    q_n, qd_n, h = c["q_n"], c["qd_n"], c["h"]
    if integrator == "backward_euler":
        q, ok = newton(pot, c, q_n + h * qd_n)
        return q, (q - q_n) / h, ok
    half = dict(c, h=0.5 * h)
    q_mid, ok = newton(pot, half, q_n + 0.5 * h * qd_n)
    q = 2.0 * q_mid - q_n
    return q, 2.0 * (q - q_n) / h - qd_n, ok
