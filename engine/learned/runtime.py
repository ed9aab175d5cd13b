"""The learned engine at run time: a `LatentScene` stepped frame by frame and decoded (`NeurokRun`)."""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..core.errors import SimulationFault
from ..core.run import Engine, Run
from ..core.scene import Setup
from . import fastpath
from .checkpoint import load_checkpoint
from .dynamics import SUBSTEP
from .ik import solve_ik
from .integrators import step as integrator_step
from .latent_scene import LatentScene
from .model import TRANSLATION_MODES
from .ood import ood_report

BLOWUP_DIAGONALS = 10.0   # a state whose RMS deformation (rigid translation excluded) exceeds this many diagonals is a blow-up
MAX_RETRY_SPLITS = 3      # a rejected step is retried with 2, 4, 8 substeps


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
            self._guard_state = (frame, q, qd)   # plausibility guard: the state this frame starts from
            with torch.no_grad(), self._single_blas():
                for _ in range(self.substeps):
                    q, qd = self._advance(frame, q, qd, h)
            yield q, qd
            q, qd = getattr(self, "_guard_resume", None) or (q, qd)   # plausibility guard: a retried frame's state
            self._guard_resume = None

    def _retry_frame(self, t, factor):
        """Plausibility guard (core/run.py): frame t again from the state before it, with `factor`
        times the substeps; the frames after it continue from the new state."""
        state = getattr(self, "_guard_state", None)
        if state is None or state[0] != t - 1:
            return None
        frame, q, qd = state
        n = self.substeps * factor
        with torch.no_grad(), self._single_blas():
            for _ in range(n):
                q, qd = self._advance(frame, q, qd, self.setup.dt / n)
        self._guard_resume = (q, qd)
        return self.decode(q)

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
        return solve_ik(self, setup, handles, targets, regularization, iterations)
