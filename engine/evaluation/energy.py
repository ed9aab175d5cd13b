"""Energy drift (DESIGN.md section 5): |E(t) - E(0)| / E(0) over 1,000 undamped, force-free
latent steps of the learned engine's own stepping, per integrator.

It reads the learned engine's latent state, which no public API exposes, so it reaches into
`engine.learned` (LatentScene, NeurokRun.latent_frames, the potential). When the learned model
changes shape and that no longer works, the drift is reported as not available instead of
stopping the evaluation.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core.scene import setup_from_scene

ENERGY_STEPS = 1000
ENERGY_MESHES = ("jelly", "soft_toy", "flag")


def energy_setup(name, frames=2):
    """An undamped, force-free, gravity-free, unpinned setup on one of the sample meshes."""
    from ..training.shapes import make_sample
    mesh = make_sample(name)
    preset = "cloth" if name == "flag" else "rubber"
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, 0.0],
             "material": {"preset": preset, "damping": 0.0, "air_damping": 0.0}, "pins": [], "forces": [], "floor": None}
    return setup_from_scene(mesh, scene)


def energy_drift(model, steps=ENERGY_STEPS, integrators=None, meshes=ENERGY_MESHES, amplitude=0.01, seed=0,
                 device="cpu", keep_curves=False) -> dict:
    """{"max": {integrator: worst over meshes}, "final": {...}, "per_mesh": {...}, "steps": n}, or
    {"available": False, "note": ...} when the learned engine does not expose what it needs."""
    try:
        return _energy_drift(model, steps, integrators, meshes, amplitude, seed, device, keep_curves)
    except (ImportError, AttributeError, TypeError) as exc:
        return {"available": False, "steps": steps, "max": {}, "final": {}, "per_mesh": {},
                "note": f"not available for this model ({type(exc).__name__}: {str(exc)[:160]})"}


def _energy_drift(model, steps, integrators, meshes, amplitude, seed, device, keep_curves):
    from ..learned.integrators import INTEGRATORS
    from ..learned.latent_scene import LatentScene
    from ..learned.model import TRANSLATION_MODES
    from ..learned.runtime import NeurokRun
    integrators = integrators or INTEGRATORS
    result = {"steps": steps, "amplitude": amplitude, "max": {}, "final": {}, "per_mesh": {}}
    if keep_curves:
        result["curves"] = {}
    for name in meshes:
        base = energy_setup(name)
        with torch.no_grad():
            scene = LatentScene(model, base, device=device)
            d = scene.q0.shape[0]
            g = torch.Generator().manual_seed(seed)
            u1 = torch.randn(d, generator=g).to(scene.q0)
            u2 = torch.randn(d, generator=g).to(scene.q0)
            u1[:TRANSLATION_MODES] = 0.0
            u2[:TRANSLATION_MODES] = 0.0
            u1, u2 = u1 / u1.norm(), u2 / u2.norm()
            w0 = math.sqrt(scene.w0sq)
            q0, qd0 = amplitude * u1, amplitude * w0 * u2
            x0 = scene.decode_metres(q0)
            v0 = torch.einsum("nja,j->na", scene.red.phi, qd0).cpu().numpy() * scene.scale
        red, pot = scene.red, model.potential
        for integ in integrators:
            setup = energy_setup(name)
            setup.x0, setup.v0 = x0, v0
            run = NeurokRun(model, setup, device=device, integrator=integ)
            setup.frames = int(math.ceil(steps / run.substeps)) + 1

            def energy(q, qd):
                q = torch.as_tensor(np.asarray(q.cpu() if hasattr(q, "cpu") else q)).to(red.s)
                qd = torch.as_tensor(np.asarray(qd.cpu() if hasattr(qd, "cpu") else qd)).to(red.s)
                with torch.no_grad():
                    return float(0.5 * torch.dot(qd, qd) + scene.w0sq * pot(q, red.s, red.material, red.B))

            e0, worst, rel, curve = None, 0.0, 0.0, []
            try:
                for q, qd in run.latent_frames():
                    e = energy(q, qd)
                    if e0 is None:
                        e0 = e
                        continue
                    rel = abs(e - e0) / e0 if math.isfinite(e) else math.inf
                    worst = max(worst, rel)
                    if keep_curves:
                        curve.append(rel)
            except Exception as exc:  # noqa: BLE001 - a failed run is an infinite drift, recorded
                worst = rel = math.inf
                result.setdefault("errors", {})[f"{name}/{integ}"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            result["per_mesh"].setdefault(name, {})[integ] = {"max": worst, "final": rel, "e0": e0,
                                                             "steps": (setup.frames - 1) * run.substeps}
            result["max"][integ] = max(result["max"].get(integ, 0.0), worst)
            result["final"][integ] = max(result["final"].get(integ, 0.0), rel)
            if keep_curves:
                result["curves"].setdefault(name, {})[integ] = {"step": [run.substeps * (k + 1) for k in range(len(curve))],
                                                                "drift": curve}
    return result
