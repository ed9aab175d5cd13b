"""A `Setup` reduced to latent quantities once: basis, generalised forces, pins, floor, start
state. The runtime steps it and training builds the same object with gradients on, so what is
trained is exactly what runs."""
from __future__ import annotations

import numpy as np
import torch

from ..core.physics import material_omega2
from ..core.scene import Setup, profile_value
from .dynamics import DTYPE, contact_terms, decode, elastic_hessian, encode, generalized, mesh_tensors, pin_omega2, reduce_mesh


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
