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
  plus mu * sum_j m_j(invariants) phi_j(invariants): fixed terms phi_j that vanish at rest to third
  or fourth order (so the small-strain stiffness, and with it the sliders, stay the classical
  ones) weighted by a small network m (bounded to +-CORRECTION_BOUND), whose last layer starts at
  zero: an untrained model is exactly the classical material, and the loss is first order in the
  network's output from the start (an earlier mu |m(inv) - m(0)|^2 had no gradient there and did
  not move in 25 minutes of training).
- Learned dissipation closure (`StrainEnergy.dissipation`): a log-multiplier of the Rayleigh
  damping's stiffness-proportional part beta per kind of material (read from the base
  features), bounded to +-DISSIPATION_BOUND and zero untrained. Damping does not move a body at rest, so statics (and
  the stiffness slider's meaning) stay the classical ones. It exists because beta K of a
  reduced model is not the reference's: a linear skinning subspace folds a sheet only by
  stretching it, so its K also damps the membrane stretch its folds carry, which the reference's
  folds do not have (a flag in wind came 0.306x -> 0.249x hold-still with beta halved in the
  model; docs/MODEL_CARD.md, "What limits the model now").
- Learned compression closure (`StrainEnergy.compression`): a log-multiplier, per kind of
  material, of a compressed cloth edge's share of the membrane stiffness, bounded to
  +-COMPRESSION_BOUND and zero untrained (the reference's membrane). Below 1 it is a tension-field
  membrane: the reference's fine sheet wrinkles where it is compressed, which a sheet in a few
  dozen smooth handles cannot, so it pays for compression the reference does not
  (docs/MODEL_CARD.md). A stretched edge, and so a hanging sheet's statics, is untouched.
- Learned materials (presets): a few numbers per material, learned from data only (Blender's own
  cloth bakes, a Mooney-Rivlin rubber, a user's bake): log-multipliers of the material's stiffness,
  Lame lambda, bending and both dampings, and the weight c of the second-invariant term
  c mu/2 (I2~ - I1~) (isochoric invariants; third order at rest, so small-strain stiffness stays
  the slider's): neo-Hookean + s mu/2 (I2~ - I1~) is the Mooney-Rivlin law with share s on I2.

Energies, gradients and Hessians per sample are written out by the chain rule over the two
invariants (a = |F|^2 - 3, log J for solids; the sum and the sum of squares of the edge strains
for cloth) in a few batched operations: a step evaluates them thousands of times a second, and
the cost at these sizes is the number of operations, not their size. The correction network is
skipped while its last layer is exactly zero (an untrained or classical model).
"""
from __future__ import annotations

import torch
from torch import nn

from ..core.material_params import MOONEY_RIVLIN, Material, lame  # noqa: F401  (lame: re-exported, the energy's Lame parameters)

DTYPE = torch.float64
CORRECTION_WIDTH = 32
CORRECTION_BOUND = 0.5           # |m_j|: each correction term at most half its classical counterpart's scale
DISSIPATION_BOUND = 1.0          # |log multiplier| of the damping's beta the learned closure sets (e^-1 .. e^1)
COMPRESSION_BOUND = 3.0          # |log| of a compressed cloth edge's share of the membrane stiffness (e^-3 .. e^3)
BASE_FEATURES = 2                # (cloth?, poisson): what the scale and correction networks read
# a learned material's numbers, appended to the base features (all zero: the material as it is)
PRESET_PARAMETERS = ("log_stiffness", "log_lambda", "log_bending", "log_damping", "log_air_damping", "i2_term")


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


# --------------------------------------------------------------------------- the determinant

def cofactor(F):
    """Cofactor matrices of F [K,3,3] (row r = row r+1 x row r+2): d det F / dF."""
    return torch.linalg.cross(F.roll(-1, dims=1), F.roll(-2, dims=1), dim=-1)


def determinant(F):
    return torch.einsum("ki,ki->k", F[:, 0], torch.linalg.cross(F[:, 1], F[:, 2]))


def _determinant_hessian_basis():
    """d2 det F / dF2 is linear in F: sum_m F_m B[m] for vec(F) row-major. B [9,81]."""
    B = torch.zeros(9, 9, 9, dtype=DTYPE)
    for r in range(3):                         # det = sum over rows r of F_r . (F_r+1 x F_r+2)
        s, t = (r + 1) % 3, (r + 2) % 3
        for i in range(3):
            j, k = (i + 1) % 3, (i + 2) % 3    # even permutation (i, j, k) of the columns
            # the term F_ri F_sj F_tk - F_ri F_sk F_tj: its second derivative in (F_sj, F_tk) is F_ri, ...
            for (a, b, c), sign in (((r * 3 + i, s * 3 + j, t * 3 + k), 1.0), ((r * 3 + i, s * 3 + k, t * 3 + j), -1.0)):
                for m, u, v in ((a, b, c), (b, a, c), (c, a, b)):
                    B[m, u, v] += sign
                    B[m, v, u] += sign
    return (B / 3.0).reshape(9, 81)            # each product was counted once per row it starts from


DET_HESSIAN = _determinant_hessian_basis()


# three edges of a sample triangle from its local coordinates y = (x1 - x0, x2 - x0)
EDGE_SELECT = torch.tensor([[[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0]],
                            [[0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 1]],
                            [[-1, 0, 0, 1, 0, 0], [0, -1, 0, 0, 1, 0], [0, 0, -1, 0, 0, 1]]], dtype=DTYPE)


def _edges(y):
    """The three edge vectors [K,3,3] of sample triangles from their local coordinates [K,6]."""
    e0, e1 = y[:, :3], y[:, 3:]
    return torch.stack([e0, e1, e1 - e0], dim=1)


def _outer(a, b):
    return a.unsqueeze(-1) * b.unsqueeze(-2)


def _pair(a, b):
    return torch.stack([a, b], -1)


def _matrix(aa, ab, bb):
    return torch.stack([torch.stack([aa, ab], -1), torch.stack([ab, bb], -1)], -2)


def _saturated_square(u):
    """u^2 / (2 (1 + u)) for u >= 0, with its first and second derivatives: u^2/2 near zero,
    growing like u/2 far out (so a negative weight of at most 1/2 never outgrows u/2)."""
    r = 1.0 / (1.0 + u)
    return 0.5 * u * u * r, 0.5 * u * (u + 2.0) * r * r, r ** 3


def _saturated_quartic(L):
    """L^4 / (4 (1 + L^2)) with its derivatives: L^4/4 near zero, L^2/4 far out."""
    L2 = L * L
    r = 1.0 / (1.0 + L2)
    return 0.25 * L2 * L2 * r, 0.5 * L * L2 * (2.0 + L2) * r * r, 0.5 * L2 * (6.0 + 3.0 * L2 + L2 * L2) * r ** 3


def solid_correction_terms(a, L):
    """The solid correction's terms of (a = |F|^2 - 3, L = log J), with their gradients and
    Hessians in (a, L): a saturated abar^2/2 (abar = J^(-2/3)|F|^2 - 3 >= 0, the isochoric shear
    measure: large shear) and a saturated L^4/4 (large volume change); phi [K,2], dphi [K,2,2]
    (term, invariant), d2phi [K,2,2,2]. Both vanish at rest to third or fourth order and grow no
    faster than the classical terms they sit beside (abar/2, L^2/4), so with weights of at most 1/2
    the density stays coercive: a correction learned towards softness keeps a minimum for every
    step to find (with abar^2/2 a weight of -1/2 made the shear energy fall again beyond abar = 1,
    and the poked jelly's steps had none)."""
    e = torch.exp(-2.0 * L / 3.0)
    abar = e * (a + 3.0) - 3.0
    d_abar = _pair(e, -2.0 / 3.0 * (abar + 3.0))
    d2_abar = _matrix(torch.zeros_like(a), -2.0 / 3.0 * e, 4.0 / 9.0 * (abar + 3.0))
    zero = torch.zeros_like(a)
    shear, shear_1, shear_2 = _saturated_square(abar.clamp(min=0.0))
    vol, vol_1, vol_2 = _saturated_quartic(L)
    phi = _pair(shear, vol)
    dphi = torch.stack([shear_1[:, None] * d_abar, _pair(zero, vol_1)], 1)
    d2phi = torch.stack([shear_2[:, None, None] * _outer(d_abar, d_abar) + shear_1[:, None, None] * d2_abar,
                         _matrix(zero, zero, vol_2)], 1)
    return phi, dphi, d2phi


def cloth_correction_terms(s1, s2):
    """The cloth correction's terms of (s1 = sum of a triangle's edge strains, s2 = sum of their
    squares >= 0), saturated as in `solid_correction_terms`: s2^2 / (2 (1 + s2)) (large stretch)
    and s1 s2 / (1 + s2)^2 (stretch against compression; |s1| <= sqrt(3 s2), so it grows slower
    than the membrane's s2)."""
    zero = torch.zeros_like(s1)
    stretch, stretch_1, stretch_2 = _saturated_square(s2)
    r = 1.0 / (1.0 + s2)
    mixed = s1 * s2 * r * r
    mixed_2 = s1 * (1.0 - s2) * r ** 3                        # d/ds2 of s2 / (1 + s2)^2, times s1
    mixed_22 = s1 * (2.0 * s2 - 4.0) * r ** 4                 # its second derivative in s2
    phi = _pair(stretch, mixed)
    dphi = torch.stack([_pair(zero, stretch_1), _pair(s2 * r * r, mixed_2)], 1)
    d2phi = torch.stack([_matrix(zero, zero, stretch_2), _matrix(zero, (1.0 - s2) * r ** 3, mixed_22)], 1)
    return phi, dphi, d2phi


class StrainEnergy(nn.Module):
    """The learned density: classical psi with learned Lame scales plus learned invariant terms
    mu * sum_j m_j(invariants) phi_j(invariants). Energies, gradients and (projected) Hessians per
    sample are written out by the chain rule over the invariants: batched, no per-sample autodiff."""

    def __init__(self, width: int = CORRECTION_WIDTH):
        super().__init__()
        self.scales = nn.Sequential(nn.Linear(2, width), nn.SiLU(), nn.Linear(width, 3))   # mu, lambda, bending
        self.correction = nn.Sequential(nn.Linear(4, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU(),
                                        nn.Linear(width, 2))
        # log-multiplier of beta from [cloth?, solid?, poisson feature]: no bias, so what one kind's
        # data teaches leaves the other kind's damping as it was
        self.dissipation = nn.Linear(BASE_FEATURES + 1, 1, bias=False)
        # log of a compressed cloth edge's share of the membrane stiffness, from the same features
        self.compression = nn.Linear(BASE_FEATURES + 1, 1, bias=False)
        for layer in (self.scales[-1], self.correction[-1]):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        nn.init.zeros_(self.dissipation.weight)
        nn.init.zeros_(self.compression.weight)
        self.cloth_compression = 1.0          # a compressed edge's share of the membrane stiffness (a what-if knob)
        self.presets = nn.ParameterDict()     # learned materials: name -> [len(PRESET_PARAMETERS)]
        self.preset_materials = {}            # name -> the material (SI numbers) its parameters refine
        self.to(DTYPE)
        self._classical_version = None
        self._scale_cache = {}
        self._scale_parameters = tuple(self.scales.parameters())   # the same objects after load_state_dict / .to()
        self._dissipation_parameters = tuple(self.dissipation.parameters())
        self._compression_parameters = tuple(self.compression.parameters())

    @staticmethod
    def features(material: Material) -> torch.Tensor:
        """The base features every material has: [cloth?, (poisson - 0.3) * 5]."""
        cloth = material.kind == "cloth"
        return torch.tensor([1.0 if cloth else 0.0, (material.poisson - 0.3) * 5.0], dtype=DTYPE)

    # ----- learned materials

    def add_preset(self, name: str, material: Material | dict) -> nn.Parameter:
        """A new learned material starting as `material` exactly (its parameters at zero); its table
        entry is a dict, as checkpoints store it (`Material.to_dict`, without the preset's name)."""
        self.presets[name] = nn.Parameter(torch.zeros(len(PRESET_PARAMETERS), dtype=DTYPE))
        table = material.to_dict() if isinstance(material, Material) else material
        self.preset_materials[name] = {k: v for k, v in table.items() if k != "preset"}
        return self.presets[name]

    def preset_for(self, material: Material) -> str | None:
        """The learned material a scene's material uses: the one it names, else for a solid with
        the Mooney-Rivlin law the learned rubber of that law with the nearest share (the one
        learned last, on a tie)."""
        if material.preset in self.presets:
            return material.preset
        if material.law == MOONEY_RIVLIN:     # the newest of the nearest share
            rubbers = [(abs(m.get("i2_share", 0.0) - material.i2_share), n)
                       for n, m in reversed(self.preset_materials.items()) if m.get("law") == MOONEY_RIVLIN]
            return min(rubbers, key=lambda r: r[0])[1] if rubbers else None
        return None

    def features_for(self, material: Material) -> torch.Tensor:
        """Base features + the parameters of the learned material it uses (zeros if none; they
        carry gradients when that material is being learned)."""
        name = self.preset_for(material)
        params = self.presets[name] if name else torch.zeros(len(PRESET_PARAMETERS), dtype=DTYPE)
        return torch.cat([self.features(material), params])

    def damping_scales(self, feats, learned_material=False):
        """Multipliers of the (stiffness-proportional, mass-proportional) damping: the learned
        closure's for this kind of material, or a learned material's own (`learned_material`:
        its numbers were learned from its data as they are, so they replace the closure). The
        closure leaves alpha alone: alpha M is exact in the subspace (M is the exact pull-back),
        beta K is not."""
        if learned_material:
            return torch.exp(feats[BASE_FEATURES + 3]), torch.exp(feats[BASE_FEATURES + 4])
        log = self._material_network("dissipation", self._dissipation_parameters, feats, DISSIPATION_BOUND)
        return torch.exp(log[0]), torch.ones((), dtype=log.dtype)

    @staticmethod
    def i2_weight(feats):
        """c of c mu/2 (I2~ - I1~), in (-1, 1); None while it is exactly zero and not learned."""
        if len(feats) <= BASE_FEATURES + 5:
            return None
        raw = feats[BASE_FEATURES + 5]
        if not raw.requires_grad and float(raw) == 0.0:
            return None
        return torch.tanh(raw)

    def _per_material(self, name, base):
        if name == "scales":
            return self.scales(base)
        return getattr(self, name)(torch.cat([base[:1], 1.0 - base[:1], base[1:]]))   # [cloth?, solid?, poisson]

    def _material_network(self, name, params, feats, bound):
        """A per-material network's (`name`: scales, dissipation or compression) output on the base features,
        bounded to +-bound. The same for every call of a material outside training: cached on the
        parameters' version counters and the material's base features (a step asks a few times
        per frame)."""
        base = feats[:BASE_FEATURES]
        if torch.is_grad_enabled() and any(p.requires_grad for p in params):
            return bound * torch.tanh(self._per_material(name, base) / bound)
        key = (name, tuple((p._version, p.data_ptr()) for p in params), tuple(base.tolist()), feats.device, feats.dtype)
        if key not in self._scale_cache:
            if len(self._scale_cache) > 64:
                self._scale_cache.clear()
            self._scale_cache[key] = bound * torch.tanh(self._per_material(name, base) / bound)
        return self._scale_cache[key]

    def log_scales(self, feats):
        """Learned log-multipliers of (mu, lambda, bending): the scale network's, bounded to a
        factor of e^2, plus the learned material's own."""
        net = self._material_network("scales", self._scale_parameters, feats, 2.0)
        if len(feats) > BASE_FEATURES:
            return net + feats[BASE_FEATURES:BASE_FEATURES + 3]
        return net

    def bending_scale(self, feats):
        return torch.exp(self.log_scales(feats)[2])

    def corrected(self) -> bool:
        """Whether the correction network contributes (its last layer is not exactly zero, or is
        being trained). Cached on the parameters' version counters: checked once per update."""
        last = self.correction[-1]
        if last.weight.requires_grad and torch.is_grad_enabled():
            return True
        version = (last.weight._version, last.bias._version, last.weight.data_ptr())
        if version != self._classical_version:
            self._active = bool(last.weight.abs().max() > 0 or last.bias.abs().max() > 0)
            self._classical_version = version
        return self._active

    def _weights(self, inv, feats, need_jacobian=True):
        """The terms' weights m(inv) [K,2] (bounded by CORRECTION_BOUND) and dm/dinv [K,2,2]."""
        base = feats[:BASE_FEATURES].to(inv)
        x = torch.cat([inv, base.expand(inv.shape[0], BASE_FEATURES)], dim=-1)
        if not need_jacobian:
            return CORRECTION_BOUND * torch.tanh(self.correction(x)), None
        raw, J = mlp_with_jacobian(self.correction, x, 2)
        t = torch.tanh(raw)
        return CORRECTION_BOUND * t, (CORRECTION_BOUND * (1.0 - t * t)).unsqueeze(-1) * J

    def _correction(self, inv, terms, feats, need_derivatives=True):
        """(psi_c [K], dpsi_c/dinv [K,2], d2psi_c/dinv2 [K,2,2]) of sum_j m_j phi_j, per unit of
        mu. The network's own second derivatives are left out of the Hessian (Newton's matrix
        only; the terms are small next to the classical ones)."""
        phi, dphi, d2phi = terms
        m, dm = self._weights(inv, feats, need_derivatives)
        psi = (m * phi).sum(-1)
        if not need_derivatives:
            return psi, None, None
        grad = torch.einsum("kji,kj->ki", dm, phi) + torch.einsum("kj,kji->ki", m, dphi)
        cross = torch.einsum("kji,kjl->kil", dm, dphi)
        hess = cross + cross.transpose(-1, -2) + torch.einsum("kj,kjil->kil", m, d2phi)
        return psi, grad, hess

    # ----- solids: local coordinates are vec(F), row-major

    def solid_energy(self, y, feats, mu, lam):
        F = y.reshape(-1, 3, 3)
        s = self.log_scales(feats)
        a = (y * y).sum(-1) - 3.0
        logJ = torch.log(determinant(F))
        mu_s, lam_s = mu * torch.exp(s[0]), lam * torch.exp(s[1])
        psi = 0.5 * mu_s * a - mu_s * logJ + 0.5 * lam_s * logJ ** 2
        if self.corrected():
            inv = torch.stack([a, logJ], -1)
            psi = psi + mu * self._correction(inv, solid_correction_terms(a, logJ), feats, False)[0]
        c = self.i2_weight(feats)
        if c is not None:
            psi = psi + c * mu_s * isochoric_difference(y)
        return psi

    def solid(self, y, feats, mu, lam, need_hess=True, project=True):
        """(psi [K], dpsi/dy [K,9], d2psi/dy2 [K,9,9], PSD if `project`) of neo-Hookean + correction.

        With phi = dpsi/d(a, log J) and S its second derivatives, a = |F|^2 - 3, L = log J:
        dpsi = 2 phi_a F + phi_L cof/J;  d2psi = 2 phi_a I + phi_L/J d2J + (S_LL - phi_L) dL dL^T
        (+ the correction's S_aa, S_aL terms), d2J linear in F (`DET_HESSIAN`). Without the
        correction phi_a = mu/2 and S_LL = lambda for every sample: kept as scalars (the step
        evaluates this a few times per frame, and at a few hundred samples each tensor operation
        costs more in overhead than in arithmetic)."""
        s = self.log_scales(feats)
        mu_s, lam_s = mu * torch.exp(s[0]), lam * torch.exp(s[1])
        F = y.reshape(-1, 3, 3)
        cof = cofactor(F).reshape(-1, 9)
        J = (y[:, :3] * cof[:, :3]).sum(-1)
        logJ = torch.log(J)
        a = (y * y).sum(-1) - 3.0
        psi = 0.5 * mu_s * a - mu_s * logJ + 0.5 * lam_s * logJ ** 2
        phi_a, phi_L, S_LL = 0.5 * mu_s, lam_s * logJ - mu_s, lam_s
        correction = self.corrected()
        if correction:
            psi_c, g_c, S = self._correction(torch.stack([a, logJ], -1), solid_correction_terms(a, logJ), feats)
            psi = psi + mu * psi_c
            phi_a, phi_L = phi_a + mu * g_c[:, 0], phi_L + mu * g_c[:, 1]
            S = mu * S
            S_LL = S_LL + S[:, 1, 1]
        phi_L_J = phi_L / J
        grad = (2.0 * phi_a)[..., None] * y + phi_L_J[:, None] * cof          # phi_a: a scalar or [K]
        if not need_hess:
            c = self.i2_weight(feats)
            if c is not None:
                b, db = isochoric_difference_terms(y.detach(), need_hess=False)
                psi, grad = psi + c * mu_s * b, grad + (c * mu_s) * db
            return psi, grad, None
        dL = cof / J[:, None]
        d2J = (y @ DET_HESSIAN.to(y)).reshape(-1, 9, 9)
        hess = phi_L_J[:, None, None] * d2J + (S_LL - phi_L)[:, None, None] * _outer(dL, dL)
        hess = hess + (2.0 * phi_a)[..., None, None] * torch.eye(9, dtype=y.dtype, device=y.device)
        if correction:
            da = 2.0 * y
            hess = hess + S[:, 0, 0, None, None] * _outer(da, da) + S[:, 0, 1, None, None] * (_outer(da, dL) + _outer(dL, da))
        c = self.i2_weight(feats)
        if c is not None:
            b, db, d2b = isochoric_difference_terms(y.detach())
            psi, grad, hess = psi + c * mu_s * b, grad + (c * mu_s) * db, hess + (c * mu_s) * d2b
        return psi, grad, project_psd(hess) if project else hess

    # ----- cloth: local coordinates are the two edges (x1 - x0, x2 - x0) of a sample triangle

    def compression_share(self, feats, learned_material=False):
        """A compressed cloth edge's share of the membrane stiffness: the learned compression
        closure's for this material times `cloth_compression` (a what-if knob, 1), or None while
        both are exactly 1 (the reference's membrane). Below 1 it is a tension-field membrane, the
        usual stand-in for the wrinkles a coarse sheet cannot form. A learned material keeps the
        membrane it was learned with (the closure at 1), as it keeps its own dampings."""
        weight = self.compression.weight
        training = weight.requires_grad and torch.is_grad_enabled()
        if learned_material or (not training and not bool(weight.any())):
            return None if self.cloth_compression == 1.0 else self.cloth_compression
        log = self._material_network("compression", self._compression_parameters, feats, COMPRESSION_BOUND)
        return self.cloth_compression * torch.exp(log[0])

    @staticmethod
    def _compression_weights(strain, share):
        """Per edge: 1 stretched, `share` compressed (None for the reference's membrane)."""
        if share is None:
            return None
        return torch.where(strain < 0, share * torch.ones_like(strain), torch.ones_like(strain))

    def cloth_energy(self, y, rest_lengths, feats, compression=None):
        strain = torch.linalg.norm(_edges(y), dim=-1) / rest_lengths - 1.0
        s = self.log_scales(feats)
        w = self._compression_weights(strain, compression)
        weighted = strain if w is None else w * strain
        psi = torch.exp(s[0]) * (strain * weighted).sum(-1) / 6.0
        if self.corrected():
            s1, s2 = strain.sum(-1), (strain ** 2).sum(-1)
            psi = psi + self._correction(torch.stack([s1, s2], -1), cloth_correction_terms(s1, s2), feats, False)[0] / 3.0
        return psi

    def cloth(self, y, rest_lengths, feats, need_hess=True, project=True, compression=None):
        """(psi [K], dpsi/dy [K,6], PSD d2psi/dy2 [K,6,6]) of the edge membrane + correction;
        `compression`: a compressed edge's share of the stiffness (`compression_share`)."""
        e = _edges(y)                                                   # [K,3,3]
        length = torch.linalg.norm(e, dim=-1).clamp(min=1e-12)
        strain = length / rest_lengths - 1.0
        unit = e / length[..., None]
        scale = torch.exp(self.log_scales(feats)[0])
        w = self._compression_weights(strain, compression)
        weighted = strain if w is None else w * strain
        psi = scale * (strain * weighted).sum(-1) / 6.0
        # d strain_e / dy is +-unit_e / rest_e in the slots of the edge's ends (edge 2 = y[3:] - y[:3])
        pull = ((scale / 3.0) * weighted / rest_lengths)[..., None] * unit
        grad = torch.cat([pull[:, 0] - pull[:, 2], pull[:, 1] + pull[:, 2]], -1)
        correction = self.corrected()
        if correction:
            de = torch.einsum("kei,eij->kej", unit, EDGE_SELECT.to(y)) / rest_lengths[..., None]   # d strain_e / dy  [K,3,6]
            s1, s2 = strain.sum(-1), (strain ** 2).sum(-1)
            psi_c, g_c, S_c = self._correction(torch.stack([s1, s2], -1), cloth_correction_terms(s1, s2), feats)
            dinv = torch.stack([de.sum(1), 2.0 * torch.einsum("ke,kej->kj", strain, de)], 1)   # [K,2,6]
            psi = psi + psi_c / 3.0
            grad = grad + torch.einsum("ki,kia->ka", g_c, dinv) / 3.0
        if not need_hess:
            return psi, grad, None
        # membrane Hessian, edge by edge a 3 x 3 block a I + b u u^T (stretch along the edge, its
        # tension across it) placed by the edge's ends; projected: with the compressive part
        # dropped (as the reference does)
        bend_in = weighted.clamp(min=0.0) if project else weighted
        across = bend_in / (rest_lengths * length)
        along = (1.0 if w is None else w) / rest_lengths ** 2 - across
        block = (across[..., None, None] * torch.eye(3, dtype=y.dtype, device=y.device)
                 + along[..., None, None] * unit[..., :, None] * unit[..., None, :])          # [K,3,3,3]
        first, second, between = block[:, 0] + block[:, 2], block[:, 1] + block[:, 2], -block[:, 2]
        hess = scale / 3.0 * torch.cat([torch.cat([first, between], -1), torch.cat([between, second], -1)], -2)
        if correction:   # Gauss-Newton in the invariants (their own curvature left out), made PSD
            hess = hess + dinv.transpose(-1, -2) @ project_psd(S_c / 3.0) @ dinv
        return psi, grad, hess


def isochoric_difference(y):
    """(I2~ - I1~) / 2 per sample from vec F [K,9]: I1~ = J^(-2/3) |F|^2, I2~ = J^(-4/3) |cof F|^2.
    Zero at rest with its gradient, and its Hessian there too (both isochoric invariants are
    3 + 2|dev eps|^2 to second order), so it changes no small-strain stiffness; nan where J <= 0."""
    F = y.reshape(-1, 3, 3)
    J = determinant(F)
    C = F.transpose(-1, -2) @ F
    I1 = (y * y).sum(-1)
    I2 = 0.5 * (I1 ** 2 - (C * C).sum((-1, -2)))
    Jc = torch.where(J > 0, J, torch.full_like(J, float("nan")))
    return 0.5 * (Jc ** (-4.0 / 3.0) * I2 - Jc ** (-2.0 / 3.0) * I1)


def _isochoric_difference_one(y):
    return isochoric_difference(y[None])[0]


def isochoric_difference_terms(y, need_hess=True):
    """(value [K], gradient [K,9], Hessian [K,9,9]) of `isochoric_difference`, by forward-over-
    reverse differentiation batched over the samples (only a learned material uses it)."""
    from torch.func import grad, hessian, vmap
    value = isochoric_difference(y)
    g = vmap(grad(_isochoric_difference_one))(y)
    if not need_hess:
        return value, g
    return value, g, vmap(hessian(_isochoric_difference_one))(y)


def with_gradient_of(original, projected):
    """`projected` (made from `original` detached) carrying `original`'s gradient: eigh's
    gradient is NaN where eigenvalues repeat (a cloth sample's, a free body's rigid modes), and a
    NaN gradient skipped its batch's training step (9 of 20 cloth rollouts:
    experiments/training_rollouts.py). Exact where `original` is positive semi-definite already."""
    return original + (projected - original).detach() if original.requires_grad else projected


def project_psd(H):
    """Nearest positive semi-definite matrices of a batch of symmetric ones (NaN stays NaN, so
    a state that is not valid fails the step instead of raising here). Under autograd the
    gradient is the unprojected matrix's (`with_gradient_of`)."""
    H = 0.5 * (H + H.transpose(-1, -2))
    _, info = torch.linalg.cholesky_ex(H)
    indefinite = info > 0                     # most samples near rest are positive definite already
    if bool(indefinite.any()):
        Hi = H[indefinite]
        if not bool(torch.isfinite(Hi).all()):
            return torch.full_like(H, float("nan"))
        scale = torch.linalg.norm(Hi, dim=(-2, -1), keepdim=True).clamp(min=1e-300)   # conditioning
        vals, vecs = torch.linalg.eigh((Hi / scale).detach())
        projected = scale.detach() * ((vecs * vals.clamp(min=0.0).unsqueeze(-2)) @ vecs.transpose(-1, -2))
        H = H.clone()
        H[indefinite] = with_gradient_of(Hi, projected)
    return H
