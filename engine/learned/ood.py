"""Out-of-distribution indicator: how far a mesh and scene are from what the model can do well.

Each part is scaled so that 1.0 means "clearly outside":
- force: the share of the painted forces the latent subspace cannot express (1 - captured/total
  of the mass-weighted field); a force the subspace cannot represent is silently lost otherwise;

- material: how far the material's characteristic frequency lies outside the training range
  (in decades), when the checkpoint records that range.
"""
from __future__ import annotations

import math

import numpy as np


def force_unexpressed_share(scene) -> float:
    shares = []
    B = scene.sub.vertex_basis.reshape(-1, scene.dims)
    mw = np.repeat(scene.vertex_mass, 3)
    gram = scene.vertex_gram + 1e-12 * np.eye(scene.dims)
    for weights, accel, _ in scene.setup.force_terms:
        field = (weights[:, None] * np.asarray(accel)[None]).ravel()
        total = float(np.dot(mw * field, field))
        if total > 0:
            f = B.T @ (mw * field)                     # the mass-weighted projection onto the subspace
            captured = float(f @ np.linalg.solve(gram, f))
            shares.append(max(0.0, 1.0 - captured / total))
    return max(shares) if shares else 0.0


def ood_report(scene, meta: dict) -> dict:
    parts = {"force": force_unexpressed_share(scene) / 0.5}
    w_range = meta.get("omega2_range", {}).get(scene.setup.material.kind)
    if w_range:
        lo, hi = w_range
        parts["material"] = max(0.0, math.log10(lo / scene.w0sq), math.log10(scene.w0sq / hi))
    score = max(parts.values())
    level = "ok" if score < 0.5 else "caution" if score < 1.0 else "out_of_range"
    worst = max(parts, key=parts.get)
    words = {"force": "the painted forces are partly outside what the model can express",
             "material": "the material is outside the stiffness/density range the model was trained on"}
    message = "within the model's experience" if level == "ok" else \
        f"{'results may be inaccurate' if level == 'caution' else 'do not trust this result'}: {words[worst]} (score {score:.2f})"
    return {"score": round(score, 3), "level": level, "parts": {k: round(v, 3) for k, v in parts.items()}, "message": message}
