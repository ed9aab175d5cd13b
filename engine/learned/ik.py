"""Inverse kinematics / posing: drag chosen vertices to targets, the rest follows plausibly.

Solve min_q  1/H sum_h |x_h(q) - target_h|^2 + lambda V_elastic(q)  in the latent space
(normalised units). The elastic energy is the regulariser, so the pose stays a low-energy
deformation of the body; rigid motions cost nothing, so a dragged body may also move or turn.
"""
from __future__ import annotations

import numpy as np
import torch

from .integrators import solve
from .latent_scene import LatentScene
from .strain_energy import DTYPE
from .terms import elastic, elastic_energy


def solve_ik(engine, setup, handles, targets, regularization=1e-3, iterations=50):
    handles = np.asarray(handles, dtype=np.int64)
    with torch.no_grad():
        scene = LatentScene(engine.model, setup, device=engine.device)
        A = scene.V[torch.as_tensor(handles)].reshape(-1, scene.dims)          # [3H, d]
        x_h = torch.as_tensor(scene.sub.rest[handles], dtype=DTYPE).reshape(-1)
        t_h = torch.as_tensor(scene.sub.norm.forward(np.asarray(targets, dtype=np.float64)), dtype=DTYPE).reshape(-1)
        w = 1.0 / len(handles)
        lam = regularization / max(scene.w0sq, 1e-30)

        def energy(q):
            r = x_h + A @ q - t_h
            return w * torch.dot(r, r) + lam * elastic_energy(q, scene)

        q = torch.zeros(scene.dims, dtype=DTYPE)
        e = energy(q)
        for _ in range(iterations):
            el = elastic(q, None, scene)
            r = x_h + A @ q - t_h
            g = 2.0 * w * (A.T @ r) + lam * el.grad
            H = 2.0 * w * (A.T @ A) + lam * el.hess
            step = -solve(H + 1e-9 * torch.eye(scene.dims, dtype=DTYPE), g)
            alpha = 1.0
            while alpha > 1e-6 and not float(energy(q + alpha * step)) < float(e):
                alpha *= 0.5
            if alpha <= 1e-6:
                break
            q = q + alpha * step
            e = energy(q)
        return scene.decode_metres(q).astype(np.float32)
