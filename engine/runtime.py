"""The learned engine at run time: a `Setup` reduced to latent quantities once (`LatentScene`),
then stepped frame by frame and decoded (`NeurokRun`). Training builds the same `LatentScene`
with gradients on, so what is trained is exactly what runs.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from . import fastpath
from .api import Engine, Run, SimulationFault
from .checkpoint import load_checkpoint
from .dynamics import (DTYPE, SUBSTEP, contact_terms, decode, elastic_hessian, encode, generalized, mesh_tensors,
                       pin_omega2, reduce_mesh)
from .integrators import step as integrator_step
from .model import TRANSLATION_MODES
from .physics import material_omega2
from .scene import Setup, profile_value

BLOWUP_DIAGONALS = 10.0   # a state whose RMS deformation (rigid translation excluded) exceeds this many diagonals is a blow-up
MAX_RETRY_SPLITS = 3      # a rejected step is retried with 2, 4, 8 substeps


class LatentScene:
    """Everything one simulation needs in latent form: basis, forces, pins, floor, start state."""

    def __init__(self, model, setup: Setup, mt=None, device="cpu"):
        self.model, self.setup, self.device = model, setup, device
        kind = setup.material["kind"]
        self.mt = mt or mesh_tensors(setup.rest, setup.faces, kind, setup.vertex_mass, model.cfg.shape_samples, device)
        self.scale = self.mt.norm.scale
        self.red = reduce_mesh(model, self.mt, setup.material)
        self.w0sq = material_omega2(setup.material, self.scale)
        g = torch.as_tensor(np.asarray(setup.gravity) / self.scale, dtype=DTYPE, device=device)
        self.f_gravity = generalized(self.red, self.mt, g.expand_as(self.mt.x))
        self.force_terms = [(profile, generalized(self.red, self.mt, self._t(w[:, None] * np.asarray(a)[None] / self.scale)))
                            for w, a, profile in setup.force_terms]
        self._pins(setup)
        self.phi_c, self.z_c = contact_terms(self.red, self.mt)
        self.floor = 0.0 if setup.floor_z is None else float((setup.floor_z - self.mt.norm.centre[2]) / self.scale)
        self.q0 = encode(self.red, self.mt, self._t(self.mt.norm.forward(setup.x0)))
        self.qd0 = generalized(self.red, self.mt, self._t(setup.v0 / self.scale))

    def _t(self, a):
        return torch.as_tensor(np.asarray(a), dtype=DTYPE, device=self.device)

    def _pins(self, setup):
        d = self.red.phi.shape[1]
        pinned = np.nonzero(setup.pin_weight > 0)[0]
        self.pinned = torch.as_tensor(pinned, device=self.device)
        if len(pinned) == 0:
            self.P, self.pin_w, self._b_static = torch.zeros(d, d, dtype=DTYPE, device=self.device), None, torch.zeros(d, dtype=DTYPE, device=self.device)
            return
        w = self.mt.mu[self.pinned] * self._t(setup.pin_weight[pinned]) * pin_omega2(setup.material, self.scale)
        phi = self.red.phi[self.pinned]
        self.pin_w, self.pin_phi = w, phi
        self.P = torch.einsum("n,nia,nja->ij", w, phi, phi)
        self._b_static = None if setup.pin_targets is not None else self._pin_b(setup.x0[pinned])

    def _pin_b(self, targets):
        tn = self._t(self.mt.norm.forward(targets))
        return torch.einsum("n,nja,na->j", self.pin_w, self.pin_phi, tn - self.mt.x[self.pinned])

    def forcing(self, frame):
        """Generalised gravity + painted accelerations applied from `frame` to `frame + 1`."""
        f = self.f_gravity
        if self.setup.accel_table is not None:
            a = self.setup.accel_table[min(frame, len(self.setup.accel_table) - 1)]
            return f + generalized(self.red, self.mt, self._t(a / self.scale))
        for profile, term in self.force_terms:
            s = profile_value(profile, frame, self.setup.dt)
            if s != 0.0:
                f = f + s * term
        return f

    def pin_b(self, frame):
        if self._b_static is not None:
            return self._b_static
        return self._pin_b(self.setup.pin_target(frame)[self.pinned.cpu().numpy()])

    def context(self, frame, q_n, qd_n, h, integrator="backward_euler"):
        """The step context of `dynamics.step_energy` for the step frame -> frame + 1."""
        m = self.setup.material
        base = {"s": self.red.s, "mat": self.red.material, "B": self.red.B}
        Hd = elastic_hessian(self.model.potential, q_n, base) if m["damping"] > 0 else torch.zeros_like(self.P)
        ctx = dict(base, q_n=q_n, qd_n=qd_n, h=torch.tensor(h, dtype=DTYPE, device=self.device),
                   w0sq=torch.tensor(self.w0sq, dtype=DTYPE, device=self.device),
                   f=self.forcing(frame), P=self.P, b=self.pin_b(frame + 1),
                   alpha=torch.tensor(m["air_damping"], dtype=DTYPE, device=self.device),
                   beta=torch.tensor(m["damping"], dtype=DTYPE, device=self.device), Hd=Hd,
                   phi_c=self.phi_c, z_c=self.z_c, floor=torch.tensor(self.floor, dtype=DTYPE, device=self.device),
                   has_floor=torch.tensor(0.0 if self.setup.floor_z is None else 1.0, dtype=DTYPE, device=self.device))
        z = ctx["z_c"] + ctx["phi_c"][:, :, 2] @ q_n
        ctx["contact"] = (z < ctx["floor"]).to(DTYPE) * ctx["has_floor"]
        return ctx

    def decode_metres(self, q):
        return self.mt.norm.inverse(decode(self.red, self.mt, q).detach().cpu().numpy().astype(np.float64))


class NeurokRun(Run):
    """Steps a `LatentScene`. On a CPU the step runs on the numpy fast path (`fastpath.py`);
    on CUDA it runs the torch path that training uses."""

    def __init__(self, model, setup: Setup, device="cpu", integrator="backward_euler", meta=None):
        super().__init__(setup)
        t0 = time.perf_counter()
        with torch.no_grad():
            self.scene = LatentScene(model, setup, device=device)
            self.fast = fastpath.NumpyPotential(model.potential, self.scene.red.s, self.scene.red.material,
                                                self.scene.red.B) if device == "cpu" else None
            if self.fast is not None:
                self._static = fastpath.numpy_context({k: v for k, v in self.scene.context(0, self.scene.q0, self.scene.qd0, 1.0).items()
                                                       if k not in ("q_n", "qd_n", "h", "f", "b", "Hd", "contact")})
                phi = self.scene.red.phi
                self._phi_c = self._static.pop("phi_c")
                self._phi_flat = phi.permute(0, 2, 1).reshape(-1, phi.shape[1]).float().cpu().numpy()
                self._rest_flat = self.scene.mt.x.reshape(-1).float().cpu().numpy()
        self.model, self.integrator = model, integrator
        self._single_blas = fastpath.SingleThreadedBlas()
        self.substeps = max(1, int(math.ceil(setup.dt / SUBSTEP - 1e-9)))
        self.encode_seconds = time.perf_counter() - t0
        from .ood import ood_report
        self.ood = ood_report(self.scene, meta or {})

    def _fast_context(self, frame, q, qd, h):
        c = dict(self._static, q_n=q, qd_n=qd, h=h, phi_c=self._phi_c,
                 f=self.scene.forcing(frame).double().cpu().numpy(), b=self.scene.pin_b(frame + 1).double().cpu().numpy())
        c["Hd"] = self.fast.terms(q)[2] if c["beta"] > 0 else np.zeros((len(q), len(q)))
        c["contact"] = ((c["z_c"] + self._phi_c[:, :, 2] @ q) < c["floor"]).astype(np.float64) * c["has_floor"]
        return fastpath.prepare_contacts(c)

    def _try_step(self, frame, q, qd, h):
        if self.fast is not None:
            return fastpath.step(self.fast, self._fast_context(frame, q, qd, h), self.integrator)
        ctx = self.scene.context(frame, q, qd, h, self.integrator)
        return integrator_step(self.model.potential, ctx, self.integrator)

    def _advance(self, frame, q, qd, h, splits=0):
        """One substep with the guard: a step that fails (NaN, no convergence, blow-up) is
        rejected and retried as two half steps, up to MAX_RETRY_SPLITS times."""
        q1, qd1, ok = self._try_step(frame, q, qd, h)
        state = np.asarray(q1.cpu() if hasattr(q1, "cpu") else q1)
        # the translation block is rigid motion: a body may fall or be carried any distance
        norm = float(np.linalg.norm(state[TRANSLATION_MODES:])) if np.all(np.isfinite(state)) else math.inf
        if ok and math.isfinite(norm) and norm < BLOWUP_DIAGONALS:
            return q1, qd1
        if splits >= MAX_RETRY_SPLITS:
            raise SimulationFault(f"the latent step could not be stabilised at frame {frame + 1} "
                                  f"(state left the valid range even with {2 ** splits} substeps)", frame + 1, None)
        q, qd = self._advance(frame, q, qd, 0.5 * h, splits + 1)
        return self._advance(frame, q, qd, 0.5 * h, splits + 1)

    def latent_frames(self):
        """Latent state (q, qd) per frame, frame 0 first (numpy on CPU, torch on CUDA)."""
        q, qd = self.scene.q0, self.scene.qd0
        if self.fast is not None:
            q, qd = q.double().cpu().numpy(), qd.double().cpu().numpy()
        yield q, qd
        h = self.setup.dt / self.substeps
        for frame in range(self.setup.frames - 1):
            with torch.no_grad(), self._single_blas():
                for _ in range(self.substeps):
                    q, qd = self._advance(frame, q, qd, h)
            yield q, qd

    def decode(self, q) -> np.ndarray:
        if self.fast is None:
            return self.scene.decode_metres(q)
        xn = self._rest_flat + self._phi_flat @ q.astype(np.float32)
        return self.scene.mt.norm.inverse(xn.reshape(-1, 3))

    def _iter_frames(self):
        first = True
        for q, _ in self.latent_frames():
            if first:  # frame 0 is the given initial state, not its projection
                first = False
                yield np.asarray(self.setup.x0, dtype=np.float32)
                continue
            yield self.decode(q)


class NeurokEngine(Engine):
    """The learned engine with one loaded checkpoint."""
    name = "neurok"

    def __init__(self, model_path, device="cpu", integrator="backward_euler"):
        self.model, self.meta = load_checkpoint(model_path, device)
        self.model_path, self.device, self.integrator = str(model_path), device, integrator
        for p in self.model.parameters():
            p.requires_grad_(False)

    def prepare(self, setup: Setup) -> NeurokRun:
        return NeurokRun(self.model, setup, self.device, self.integrator, self.meta)

    def sample_pose(self, setup: Setup, seed=0, temperature=1.0) -> np.ndarray:
        """A plausible deformed pose of the setup's mesh drawn from the shape-conditioned prior."""
        with torch.no_grad():
            scene = LatentScene(self.model, setup, device=self.device)
            std = self.model.prior.prior_std(scene.red.s, scene.red.material)
            g = torch.Generator(device="cpu").manual_seed(int(seed))
            q = temperature * std * torch.randn(std.shape, generator=g).to(std.device)
            q[:3] = 0.0  # a pose, not a displacement of the whole body
            return scene.decode_metres(q).astype(np.float32)

    def solve_ik(self, setup: Setup, handles, targets, regularization=1e-3, iterations=50) -> np.ndarray:
        """Inverse kinematics: positions of the whole mesh when vertices `handles` are dragged to
        `targets` [H,3] (metres), the rest following with the least elastic energy."""
        from .ik import solve_ik
        return solve_ik(self, setup, handles, targets, regularization, iterations)
