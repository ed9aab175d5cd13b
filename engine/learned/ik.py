"""Inverse kinematics / posing: drag chosen vertices to targets, the rest follows plausibly.

Solve min_q  sum_h |x_h(q) - target_h|^2 + lambda v(q)  in the latent space (normalised units):
the learned elastic potential v is the regulariser, so the pose stays in the space of valid
deformations. Newton on d numbers; the decoded pose is returned in metres.
"""
from __future__ import annotations

import numpy as np
import torch

from .dynamics import DTYPE, potential_terms
from .integrators import newton_minimize
from .latent_scene import LatentScene


def solve_ik(engine, setup, handles, targets, regularization=1e-3, iterations=50):
    handles = np.asarray(handles, dtype=np.int64)
    with torch.no_grad():
        scene = LatentScene(engine.model, setup, device=engine.device)
        phi_h = scene.red.phi[torch.as_tensor(handles)]
        x_h = scene.mt.x[torch.as_tensor(handles)]
        t_h = torch.as_tensor(scene.mt.norm.forward(np.asarray(targets, dtype=np.float64)), dtype=DTYPE)
        ctx = {"s": scene.red.s, "mat": scene.red.material, "B": scene.red.B}

        A = phi_h.permute(0, 2, 1).reshape(-1, phi_h.shape[1])     # [3H, d]: handle positions are linear in q
        r0 = (x_h - t_h).reshape(-1)
        w = 1.0 / len(handles)

        def terms(q):  # (energy, gradient, Gauss-Newton Hessian), as newton_minimize expects
            r = r0 + A @ q
            v, gv, Hv = potential_terms(engine.model.potential, q, ctx)
            return (w * torch.dot(r, r) + regularization * v, 2.0 * w * (A.T @ r) + regularization * gv,
                    2.0 * w * (A.T @ A) + regularization * Hv)

        q, _ = newton_minimize(terms, torch.zeros_like(scene.q0), iterations, tolerance=1e-9)
        return scene.decode_metres(q).astype(np.float32)
