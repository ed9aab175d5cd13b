"""Inverse kinematics / posing: drag chosen vertices to targets, the rest follows plausibly.

Solve min_q  sum_h |x_h(q) - target_h|^2 + lambda v(q)  in the latent space (normalised units):
the learned elastic potential v is the regulariser, so the pose stays in the space of valid
deformations. Newton on d numbers; the decoded pose is returned in metres.
"""
from __future__ import annotations

import numpy as np
import torch

from .dynamics import DTYPE
from .integrators import newton_minimize


def solve_ik(engine, setup, handles, targets, regularization=1e-3, iterations=50):
    from .runtime import LatentScene
    handles = np.asarray(handles, dtype=np.int64)
    with torch.no_grad():
        scene = LatentScene(engine.model, setup, device=engine.device)
        phi_h = scene.red.phi[torch.as_tensor(handles)]
        x_h = scene.mt.x[torch.as_tensor(handles)]
        t_h = torch.as_tensor(scene.mt.norm.forward(np.asarray(targets, dtype=np.float64)), dtype=DTYPE)
        ctx = {"s": scene.red.s, "mat": scene.red.material, "B": scene.red.B}

        def energy(q):
            x = x_h + torch.einsum("hja,j->ha", phi_h, q)
            return torch.sum((x - t_h) ** 2) / len(handles) + regularization * engine.model.potential(q, ctx["s"], ctx["mat"], ctx["B"])

        q, _ = newton_minimize(energy, torch.zeros_like(scene.q0), iterations, tolerance=1e-9)
        return scene.decode_metres(q).astype(np.float32)
