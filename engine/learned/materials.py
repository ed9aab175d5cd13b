"""Strain energy densities: classical ones, and the learned density that starts from them.

Everything here is a function of rotation-invariant measures of the local deformation, so a
rotated body stores no energy (frame indifference by construction), and is zero at rest.
Densities are dimensionless: psi / stiffness (Young's modulus for solids, membrane stiffness for
cloth), so the stiffness slider multiplies the whole elastic energy exactly.

- Solids: compressible neo-Hookean, psi = mu/2 (I_C - 3) - mu log J + lam/2 (log J)^2, with Lame
  parameters from the Poisson ratio. It grows without bound as J -> 0 and is undefined for
  J <= 0, so a step that would invert a sample is rejected by the line search.
- Cloth: the reference's membrane, edge springs sharing each triangle's area:
  psi = 1/6 sum_e (l_e / L_e - 1)^2 per unit area (three edges per sample triangle).
- Learned correction (`StrainEnergy`): the Lame parameters scaled by exp(a(material)), exp(b(..)),
  plus mu * |m(invariants) - m(rest invariants)|^2 from a small network, whose last layer starts
  at zero, so an untrained model is exactly the classical material.
"""
from __future__ import annotations

import torch
from torch import nn

DTYPE = torch.float64
CORRECTION_WIDTH = 32


def lame(poisson):
    """Dimensionless Lame parameters (mu, lambda) / Young's modulus."""
    nu = min(float(poisson), 0.495)
    return 1.0 / (2.0 * (1.0 + nu)), nu / ((1.0 + nu) * (1.0 - 2.0 * nu))


def mlp_with_jacobian(net, x, inputs: int):
    """Output of a Linear/SiLU network [K,out] and its Jacobian with respect to the first
    `inputs` entries of x [K,out,inputs], propagated layer by layer (forward mode, batched)."""
    J = torch.eye(x.shape[-1], inputs, dtype=x.dtype, device=x.device).expand(x.shape[0], -1, -1)
    h = x
    for layer in net:
        if isinstance(layer, nn.Linear):
            h = layer(h)
            J = layer.weight @ J
        else:
            s = torch.sigmoid(h)
            J = (s * (1.0 + h * (1.0 - s))).unsqueeze(-1) * J
            h = h * s
    return h, J


def skew(v):
    """[...,3] -> cross-product matrices [...,3,3]."""
    z = torch.zeros_like(v[..., 0])
    return torch.stack([torch.stack([z, -v[..., 2], v[..., 1]], -1),
                        torch.stack([v[..., 2], z, -v[..., 0]], -1),
                        torch.stack([-v[..., 1], v[..., 0], z], -1)], -2)


def determinant_terms(F):
    """J = det F, its gradient (the cofactor matrix, flattened [K,9]) and Hessian [K,9,9]."""
    rows = F[:, 0], F[:, 1], F[:, 2]
    cof = torch.stack([torch.linalg.cross(rows[1], rows[2]), torch.linalg.cross(rows[2], rows[0]),
                       torch.linalg.cross(rows[0], rows[1])], dim=1)
    J = torch.einsum("ki,ki->k", rows[0], cof[:, 0])
    S = [skew(r) for r in rows]
    Z = torch.zeros_like(S[0])
    H = torch.cat([torch.cat([Z, -S[2], S[1]], -1), torch.cat([S[2], Z, -S[0]], -1),
                   torch.cat([-S[1], S[0], Z], -1)], -2)
    return J, cof.reshape(-1, 9), H


def determinant(F):
    return torch.einsum("ki,ki->k", F[:, 0], torch.linalg.cross(F[:, 1], F[:, 2]))


# three edges of a sample triangle from its local coordinates y = (x1 - x0, x2 - x0)
EDGE_SELECT = torch.tensor([[[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0]],
                            [[0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 1]],
                            [[-1, 0, 0, 1, 0, 0], [0, -1, 0, 0, 1, 0], [0, 0, -1, 0, 0, 1]]], dtype=DTYPE)


class StrainEnergy(nn.Module):
    """The learned density: classical psi with learned Lame scales plus a learned invariant term
    mu * |m(invariants) - m(rest)|^2. Energies, gradients and (projected) Hessians per sample are
    written out by the chain rule over the invariants: batched, no per-sample autodiff."""

    def __init__(self, width: int = CORRECTION_WIDTH):
        super().__init__()
        self.scales = nn.Sequential(nn.Linear(2, width), nn.SiLU(), nn.Linear(width, 3))   # mu, lambda, bending
        self.correction = nn.Sequential(nn.Linear(4, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU(),
                                        nn.Linear(width, 2))
        for layer in (self.scales[-1], self.correction[-1]):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        self.to(DTYPE)

    @staticmethod
    def features(material: dict) -> torch.Tensor:
        cloth = material["kind"] == "cloth"
        return torch.tensor([1.0 if cloth else 0.0, (float(material.get("poisson", 0.3)) - 0.3) * 5.0], dtype=DTYPE)

    def log_scales(self, feats):
        """Learned log-multipliers of (mu, lambda, bending), bounded to a factor of e^2."""
        return 2.0 * torch.tanh(self.scales(feats) / 2.0)

    def bending_scale(self, feats):
        return torch.exp(self.log_scales(feats)[2])

    def _correction(self, inv, feats, need_jacobian=True):
        """r = m(inv) - m(0) [K,2] and dr/dinv [K,2,2]."""
        x = torch.cat([inv, feats.expand(inv.shape[0], 2)], dim=-1)
        x0 = torch.cat([torch.zeros(1, 2, dtype=inv.dtype, device=inv.device), feats[None]], dim=-1)
        if need_jacobian:
            m, J = mlp_with_jacobian(self.correction, x, 2)
        else:
            m, J = self.correction(x), None
        return m - self.correction(x0), J

    # ----- solids: local coordinates are vec(F), row-major

    def solid_energy(self, y, feats, mu, lam):
        F = y.reshape(-1, 3, 3)
        s = self.log_scales(feats)
        a = torch.einsum("kij,kij->k", F, F) - 3.0
        logJ = torch.log(determinant(F))
        r, _ = self._correction(torch.stack([a, logJ], -1), feats, need_jacobian=False)
        mu_s, lam_s = mu * torch.exp(s[0]), lam * torch.exp(s[1])
        return 0.5 * mu_s * a - mu_s * logJ + 0.5 * lam_s * logJ ** 2 + mu * (r ** 2).sum(-1)

    def solid(self, y, feats, mu, lam, need_hess=True, project=True):
        """(psi [K], dpsi/dy [K,9], PSD d2psi/dy2 [K,9,9]) of dimensionless neo-Hookean + correction."""
        F = y.reshape(-1, 3, 3)
        s = self.log_scales(feats)
        mu_s, lam_s = mu * torch.exp(s[0]), lam * torch.exp(s[1])
        a = torch.einsum("kij,kij->k", F, F) - 3.0
        J, dJ, HJ = determinant_terms(F)
        logJ = torch.log(J)
        r, Jr = self._correction(torch.stack([a, logJ], -1), feats)
        psi = 0.5 * mu_s * a - mu_s * logJ + 0.5 * lam_s * logJ ** 2 + mu * (r ** 2).sum(-1)
        # first derivatives in the invariants (a, log J)
        phi = torch.stack([0.5 * mu_s + torch.zeros_like(a), -mu_s + lam_s * logJ], -1) \
            + 2.0 * mu * torch.einsum("kj,kji->ki", r, Jr)
        da = 2.0 * y                                                  # [K,9]
        dL = dJ / J[:, None]
        grad = phi[:, 0:1] * da + phi[:, 1:2] * dL
        if not need_hess:
            return psi, grad, None
        eye = torch.eye(9, dtype=y.dtype, device=y.device)
        d2L = HJ / J[:, None, None] - dL[:, :, None] * dL[:, None, :]
        D = torch.stack([da, dL], dim=1)                              # [K,2,9]
        second = 2.0 * mu * Jr.transpose(-1, -2) @ Jr                 # Gauss-Newton of the correction
        second = second + torch.diag(torch.stack([torch.zeros_like(lam_s), lam_s]))
        hess = phi[:, 0, None, None] * 2.0 * eye + phi[:, 1, None, None] * d2L + D.transpose(-1, -2) @ second @ D
        return psi, grad, project_psd(hess) if project else hess

    # ----- cloth: local coordinates are the two edges (x1 - x0, x2 - x0) of a sample triangle

    def cloth_energy(self, y, rest_lengths, feats):
        e = torch.einsum("eij,kj->kei", EDGE_SELECT.to(y), y)
        strain = torch.linalg.norm(e, dim=-1) / rest_lengths - 1.0
        s = self.log_scales(feats)
        r, _ = self._correction(torch.stack([strain.sum(-1), (strain ** 2).sum(-1)], -1), feats, need_jacobian=False)
        return torch.exp(s[0]) * (strain ** 2).sum(-1) / 6.0 + (r ** 2).sum(-1) / 3.0

    def cloth(self, y, rest_lengths, feats, need_hess=True, project=True):
        """(psi [K], dpsi/dy [K,6], PSD d2psi/dy2 [K,6,6]) of the edge membrane + correction."""
        S = EDGE_SELECT.to(y)
        e = torch.einsum("eij,kj->kei", S, y)                          # [K,3,3]
        length = torch.linalg.norm(e, dim=-1).clamp(min=1e-12)
        strain = length / rest_lengths - 1.0
        unit = e / length[..., None]
        de = torch.einsum("kei,eij->kej", unit, S) / rest_lengths[..., None]       # d strain_e / dy  [K,3,6]
        proj = (torch.eye(3, dtype=y.dtype, device=y.device) - unit[..., :, None] * unit[..., None, :])
        d2e = torch.einsum("eia,keij,ejb->keab", S, proj, S) / (rest_lengths * length)[..., None, None]
        scale = torch.exp(self.log_scales(feats)[0])
        inv = torch.stack([strain.sum(-1), (strain ** 2).sum(-1)], -1)
        r, Jr = self._correction(inv, feats)
        psi = scale * (strain ** 2).sum(-1) / 6.0 + (r ** 2).sum(-1) / 3.0
        dinv = torch.stack([de.sum(1), 2.0 * torch.einsum("ke,kej->kj", strain, de)], 1)   # [K,2,6]
        grad = scale / 3.0 * torch.einsum("ke,kej->kj", strain, de) + (2.0 / 3.0) * torch.einsum("kj,kji,kia->ka", r, Jr, dinv)
        if not need_hess:
            return psi, grad, None
        # membrane Hessian; projected: with the compressive part dropped (as the reference does)
        bend_in = strain.clamp(min=0.0) if project else strain
        hess = scale / 3.0 * (torch.einsum("kea,keb->kab", de, de) + torch.einsum("ke,keab->kab", bend_in, d2e))
        G = Jr @ dinv                                                  # [K,2,6]
        hess = hess + (2.0 / 3.0) * G.transpose(-1, -2) @ G
        return psi, grad, hess


def project_psd(H):
    """Nearest positive semi-definite matrices of a batch of symmetric ones (NaN stays NaN, so
    a state that is not valid fails the step instead of raising here)."""
    if not bool(torch.isfinite(H).all()):
        return torch.full_like(H, float("nan"))
    H = 0.5 * (H + H.transpose(-1, -2))
    _, info = torch.linalg.cholesky_ex(H)
    indefinite = info > 0                     # most samples near rest are positive definite already
    if bool(indefinite.any()):
        Hi = H[indefinite]
        scale = torch.linalg.norm(Hi, dim=(-2, -1), keepdim=True).clamp(min=1e-300)   # conditioning
        vals, vecs = torch.linalg.eigh(Hi / scale)
        H = H.clone()
        H[indefinite] = scale * ((vecs * vals.clamp(min=0.0).unsqueeze(-2)) @ vecs.transpose(-1, -2))
    return H
