"""Out-of-distribution indicator: how far a mesh and scene are from what the model learned.

Three parts, each scaled so that 1.0 means "clearly outside":
- force: the share of the painted forces the latent subspace cannot express (1 - captured/total
  of the mass-weighted field); a force the basis cannot represent is silently lost otherwise;
- shape: how unusual the shape code is against the training shapes (mean |z-score| / 3);
- material: how far the material's characteristic frequency lies outside the training range
  (in decades).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .dynamics import DTYPE, generalized


def force_unexpressed_share(scene) -> float:
    shares = []
    for weights, accel, _ in scene.setup.force_terms:
        field = torch.as_tensor(weights[:, None] * np.asarray(accel)[None], dtype=DTYPE, device=scene.device)
        total = float(torch.sum(scene.mt.mu[:, None] * field ** 2))
        if total > 0:
            captured = float(torch.sum(generalized(scene.red, scene.mt, field) ** 2))
            shares.append(max(0.0, 1.0 - captured / total))
    return max(shares) if shares else 0.0


def ood_report(scene, meta: dict) -> dict:
    parts = {"force": force_unexpressed_share(scene) / 0.5}
    stats = meta.get("shape_code_stats")
    if stats:
        mean, std = np.asarray(stats["mean"]), np.maximum(np.asarray(stats["std"]), 1e-6)
        z = np.abs((scene.red.s.detach().cpu().numpy() - mean) / std)
        parts["shape"] = float(z.mean()) / 3.0
    w_range = meta.get("omega2_range", {}).get(scene.setup.material["kind"])
    if w_range:
        lo, hi = w_range
        w = scene.w0sq
        parts["material"] = max(0.0, math.log10(lo / w), math.log10(w / hi))
    score = max(parts.values())
    level = "ok" if score < 0.5 else "caution" if score < 1.0 else "out_of_range"
    worst = max(parts, key=parts.get)
    words = {"force": "the painted forces are partly outside what the model can express",
             "shape": "this shape is unlike the shapes the model was trained on",
             "material": "the material is outside the stiffness/density range the model was trained on"}
    message = "within the model's experience" if level == "ok" else \
        f"{'results may be inaccurate' if level == 'caution' else 'do not trust this result'}: {words[worst]} (score {score:.2f})"
    return {"score": round(score, 3), "level": level, "parts": {k: round(v, 3) for k, v in parts.items()}, "message": message}
