"""Energy drift (DESIGN.md section 5): |E(t) - E(0)| / E(0) over 1,000 undamped, force-free
latent steps of the learned engine's own stepping, per integrator.

Model v2: a mesh is reduced once to a `LatentScene` whose basis is mass-orthonormal, so in its
normalised units the total energy is

    E(q, q') = 1/2 |q'|^2 + scene.elastic_energy(q)

(kinetic + the learned strain energy; no gravity, pins, floor, damping or painted forces in
these setups). The start state is a deformation along the mesh's soft elastic modes (the
eigenvectors of the elastic Hessian at rest that are not rigid motions, equal energy in each,
as a random draw would have), scaled so that the largest vertex displacement is `amplitude`
bounding-box diagonals, at rest velocity. Each integrator of `learned.integrators.INTEGRATORS`
then takes `steps` steps of the runtime's substep length with the runtime's own step function
(`integrators.step`, Newton tolerance and all), so the figure is the engine's as it runs.

`tolerance` (optional) re-solves every step to a tighter Newton tolerance than the runtime's,
which separates the integrator's own drift from the solver's stopping rule.
"""
from __future__ import annotations

import math

import torch

from ..core.physics import substeps_per_frame
from ..core.scene import setup_from_scene

ENERGY_STEPS = 1000
ENERGY_MESHES = ("jelly", "soft_toy", "flag")
AMPLITUDE = 0.01           # largest vertex displacement at the start, bounding-box diagonals
# A run whose energy has grown a hundredfold has blown up: it stops there and reads as inf (the
# implicit-midpoint flag went on to 2.7e10 % over 1,000 steps, two minutes of Newton's worst work)
BLOWN_UP = 100.0


def energy_setup(name, frames=2):
    """An undamped, force-free, gravity-free, unpinned setup on one of the sample meshes (or on
    a mesh given as (rest, faces, kind))."""
    if isinstance(name, str):
        from ..training.shapes import make_sample
        mesh = make_sample(name)
        kind = "cloth" if name == "flag" else "solid"
    else:
        from ..core.formats import Mesh
        rest, faces, kind = name
        mesh = Mesh(rest, faces, "mesh")
    preset = "cloth" if kind == "cloth" else "rubber"
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, 0.0],
             "material": {"preset": preset, "damping": 0.0, "air_damping": 0.0}, "pins": [], "forces": [], "floor": None}
    return setup_from_scene(mesh, scene)


def start_state(scene, amplitude=AMPLITUDE, seed=0):
    """(q0, q'0): a deformation along the soft, non-rigid elastic modes of the mesh (equal energy
    per mode, random signs), largest vertex displacement `amplitude`; zero velocity."""
    d = scene.dims
    H = scene.elastic(torch.zeros(d, dtype=scene.U.dtype, device=scene.U.device), True, True)[2]
    vals, vecs = torch.linalg.eigh(0.5 * (H + H.T))
    soft = vals > 1e-6 * vals.max()
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(int(soft.sum()), generator=g, dtype=vals.dtype).to(vals.device)
    q = vecs[:, soft] @ (z / torch.sqrt(vals[soft]))
    disp = (scene.V.reshape(-1, d) @ q).reshape(-1, 3).norm(dim=1).max()
    return q * (amplitude / disp.clamp(min=1e-30)), torch.zeros_like(q)


def total_energy(scene, q, qd) -> float:
    """1/2 |q'|^2 + elastic energy (normalised units; +inf where a sample inverted)."""
    with torch.no_grad():
        return float(0.5 * torch.dot(qd, qd) + scene.elastic_energy(q))


def _stepper(integrator, tolerance):
    from ..learned import integrators as I
    if tolerance is None:
        return lambda scene, q, qd, h: I.step(scene, 0, q, qd, h, integrator)
    from ..learned.integrators import StepContext

    def step(scene, q, qd, h):      # the same formulas as `integrators.step`, solved tighter
        if integrator == "implicit_midpoint":
            ctx = StepContext.build(scene, 0, q, qd, 0.5 * h)
            q_mid, ok, _ = I.minimize(ctx, q + 0.5 * h * qd, iterations=100, tolerance=tolerance)
            return 2.0 * q_mid - q, 4.0 * (q_mid - q) / h - qd, ok
        ctx = StepContext.build(scene, 0, q, qd, h)
        q1, ok, _ = I.minimize(ctx, q + h * qd, iterations=100, tolerance=tolerance)
        return q1, (q1 - q) / h, ok
    return step


def drift_curve(scene, integrator, steps, h, q0, qd0, tolerance=None, keep_curve=False) -> dict:
    """Run `steps` undamped steps from (q0, q'0): {"max", "final", "e0", "steps", "failed_steps", "curve"?}."""
    from ..learned.runtime import single_threaded
    step = _stepper(integrator, tolerance)
    e0 = total_energy(scene, q0, qd0)
    q, qd = q0, qd0
    worst, rel, curve, failed = 0.0, 0.0, [], 0
    with torch.no_grad(), single_threaded():
        for k in range(steps):
            q, qd, ok = step(scene, q, qd, h)
            failed += not ok
            e = total_energy(scene, q, qd)
            rel = abs(e - e0) / e0 if math.isfinite(e) else math.inf
            worst = max(worst, rel)
            if keep_curve:
                curve.append(rel)
            if rel > BLOWN_UP or not math.isfinite(rel) or not bool(torch.all(torch.isfinite(q))):
                worst = rel = math.inf
                break
    out = {"max": worst, "final": rel, "e0": e0, "steps": k + 1, "failed_steps": failed}
    if keep_curve:
        out["curve"] = curve
    return out


def mesh_drift(model, name, integrator, steps=ENERGY_STEPS, amplitude=AMPLITUDE, seed=0, device="cpu",
               keep_curve=False, tolerance=None, tight=None) -> dict:
    """One mesh, one integrator: `drift_curve`'s dict with "dims" (and "tight", the same run at
    Newton tolerance `tight`, when given)."""
    from ..learned.latent_scene import LatentScene
    with torch.no_grad():
        scene = LatentScene(model, energy_setup(name), device=device)
        q0, qd0 = start_state(scene, amplitude, seed)
    # a step that fails comes back as not ok, a blow-up as an infinite drift: no exception to catch
    h = substep_length()
    r = drift_curve(scene, integrator, steps, h, q0, qd0, tolerance, keep_curve)
    r["dims"] = scene.dims
    if tight:
        r["tight"] = drift_curve(scene, integrator, steps, h, q0, qd0, tight)
    return r


def substep_length() -> float:
    """The runtime's latent step at 24 fps (s)."""
    from ..learned.runtime import SUBSTEP
    return 1.0 / 24.0 / substeps_per_frame(1.0 / 24.0, SUBSTEP)


def energy_drift(model, steps=ENERGY_STEPS, integrators=None, meshes=ENERGY_MESHES, amplitude=AMPLITUDE, seed=0,
                 device="cpu", keep_curves=False, tolerance=None, tight=None, runs=None) -> dict:
    """{"max": {integrator: worst over meshes}, "final": {...}, "per_mesh": {mesh: {integrator: ...}},
    "steps", "amplitude", "h"}; `tight` = a Newton tolerance at which every integrator is run once
    more ("tight": {integrator: worst over meshes}) to separate integrator from solver drift.
    `runs`: {(mesh, integrator): `mesh_drift` answer} computed elsewhere (the evaluation suite's
    worker processes); the missing ones are run here."""
    from ..learned.integrators import INTEGRATORS
    integrators = tuple(integrators or INTEGRATORS)
    result = {"available": True, "steps": steps, "amplitude": amplitude, "h": substep_length(), "tolerance": tolerance,
              "max": {}, "final": {}, "per_mesh": {}, "start": "soft elastic modes, equal energy, zero velocity"}
    if tight:
        result["tight"], result["tight_tolerance"] = {}, tight
    if keep_curves:
        result["curves"] = {}
    for name in meshes:
        label = name if isinstance(name, str) else "mesh"
        for integ in integrators:
            r = dict((runs or {}).get((label, integ)) or mesh_drift(model, name, integ, steps, amplitude, seed, device,
                                                                    keep_curves, tolerance, tight))
            curve = r.pop("curve", None)
            result["per_mesh"].setdefault(label, {})[integ] = r
            result["max"][integ] = max(result["max"].get(integ, 0.0), r["max"])
            result["final"][integ] = max(result["final"].get(integ, 0.0), r["final"])
            if keep_curves and curve is not None:
                result["curves"].setdefault(label, {})[integ] = {"step": list(range(1, len(curve) + 1)), "drift": curve}
            if tight:
                result["tight"][integ] = max(result["tight"].get(integ, 0.0), r["tight"]["max"])
    return result
