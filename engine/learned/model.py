"""The NeuROK networks, read top to bottom: shape (prior) encoder -> deformation basis ->
latent prior and posterior -> elastic potential.

Decoding is separable (DESIGN.md section 2): u(X; q, s) = Phi(X; s) q. Phi holds 3 translation
modes, 9 affine modes (X_j e_k) and `learned_modes` modes from a neural field, all made
mass-orthonormal per mesh (Gram-Schmidt in that order, see `dynamics.reduce_mesh`). So q = 0 is
the rest shape, the translation block is exactly rigid motion, and a step costs the same at 1k
or 1M vertices. The elastic potential v(q; s, material) >= 0 with v(0) = 0 ignores the
translation block (no energy for moving as a whole) and is multiplied by the material stiffness
outside the network, so the stiffness slider is physically consistent by construction.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

TRANSLATION_MODES = 3
AFFINE_MODES = 9


@dataclass
class ModelConfig:
    latent: int = 32                # total modes d (translation + affine + learned)
    width: int = 128                # hidden width of the field and potential networks
    shape_code: int = 64            # size of the shape code s
    shape_samples: int = 256        # points the shape encoder sees
    frequencies: int = 3            # positional-encoding octaves of the basis field
    potential_features: int = 32    # output size of the non-quadratic potential network

    @property
    def learned_modes(self) -> int:
        return self.latent - TRANSLATION_MODES - AFFINE_MODES

    @property
    def elastic_dims(self) -> int:
        return self.latent - TRANSLATION_MODES

    def to_dict(self):
        return asdict(self)


MATERIAL_FEATURES = 3  # [is_cloth, poisson, log10 bending ratio]


def mlp(sizes, last_activation=False):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.SiLU())
    return nn.Sequential(*layers)


def positional_encoding(x, octaves):
    feats = [x]
    for k in range(octaves):
        feats += [torch.sin((2.0 ** k) * torch.pi * x), torch.cos((2.0 ** k) * torch.pi * x)]
    return torch.cat(feats, dim=-1)


class ShapeEncoder(nn.Module):
    """Prior encoder: points + normals of the static mesh -> shape code s (attention pooling
    of per-point features by a few learned queries, Perceiver style)."""

    def __init__(self, cfg: ModelConfig, queries: int = 4):
        super().__init__()
        self.point = mlp([6 + 1, cfg.width, cfg.width], last_activation=True)
        self.queries = nn.Parameter(torch.randn(queries, cfg.width) * 0.1)
        self.attn = nn.MultiheadAttention(cfg.width, num_heads=4, batch_first=True)
        self.out = mlp([queries * cfg.width, cfg.width, cfg.shape_code])

    def forward(self, points, normals, is_cloth):
        """points, normals [B,K,3]; is_cloth [B] -> s [B, shape_code]."""
        flag = is_cloth[:, None, None].expand(-1, points.shape[1], 1)
        h = self.point(torch.cat([points, normals, flag], dim=-1))
        q = self.queries[None].expand(points.shape[0], -1, -1)
        pooled, _ = self.attn(q, h, h, need_weights=False)
        return self.out(pooled.flatten(1))


class BasisField(nn.Module):
    """Neural field Phi(X; s): rest position (normalised) and shape code -> learned modes [.., m, 3]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        n_in = 3 * (1 + 2 * cfg.frequencies) + cfg.shape_code
        self.net = mlp([n_in, cfg.width, cfg.width, cfg.width, 3 * cfg.learned_modes])

    def forward(self, x, s):
        """x [N,3], s [shape_code] -> all modes [N, latent, 3] (translation, affine, learned)."""
        n = x.shape[0]
        feats = torch.cat([positional_encoding(x, self.cfg.frequencies), s[None].expand(n, -1)], dim=-1)
        learned = self.net(feats).view(n, self.cfg.learned_modes, 3)
        eye = torch.eye(3, dtype=x.dtype, device=x.device)
        translation = eye[None].expand(n, 3, 3)                              # mode k moves along e_k
        affine = (x[:, :, None, None] * eye[None, None]).reshape(n, 9, 3)   # mode (j,k): X_j e_k
        return torch.cat([translation, affine, learned], dim=1)


class LatentPrior(nn.Module):
    """Gaussian prior over the elastic latent given the shape (for sampling plausible poses),
    and the posterior spread of the deformation encoder (its mean is the exact projection)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.prior_log_std = mlp([cfg.shape_code + MATERIAL_FEATURES, cfg.width, cfg.latent])
        self.posterior_log_std = nn.Parameter(torch.full((cfg.latent,), -5.0))

    def prior_std(self, s, material):
        return torch.exp(self.prior_log_std(torch.cat([s, material], dim=-1)).clamp(-8.0, 2.0))


class Potential(nn.Module):
    """Elastic potential v(q; s, material) = 1/2 |B q_e|^2 + |g(q_e) - g(0)|^2 over the elastic
    block q_e = q[3:]. B is lower triangular with a positive diagonal (a learned quadratic floor:
    the potential grows outside the data); g is a small MLP."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        m = cfg.elastic_dims
        self.quadratic = mlp([cfg.shape_code + MATERIAL_FEATURES, cfg.width, m * m])
        self.g = mlp([m + cfg.shape_code + MATERIAL_FEATURES, cfg.width, cfg.width, cfg.potential_features])
        with torch.no_grad():  # start near a unit quadratic, with a quiet non-quadratic part
            self.quadratic[-1].weight.mul_(0.01)
            self.quadratic[-1].bias.zero_()
            self.g[-1].weight.mul_(0.1)

    def factor(self, s, material):
        """B [m_e, m_e] for one mesh (s [code], material [3])."""
        m = self.cfg.elastic_dims
        raw = self.quadratic(torch.cat([s, material], dim=-1)).view(m, m)
        return torch.tril(raw, -1) + torch.diag(torch.exp(torch.diagonal(raw).clamp(-6.0, 6.0)))

    def forward(self, q, s, material, B):
        """v for one latent q [d] (call under vmap for batches)."""
        qe = q[TRANSLATION_MODES:]
        quad = 0.5 * torch.sum((B @ qe) ** 2)
        cond = torch.cat([s, material], dim=-1)
        g1 = self.g(torch.cat([qe, cond], dim=-1))
        g0 = self.g(torch.cat([torch.zeros_like(qe), cond], dim=-1))
        return quad + torch.sum((g1 - g0) ** 2)


class NeurokModel(nn.Module):
    def __init__(self, cfg: ModelConfig | None = None):
        super().__init__()
        self.cfg = cfg or ModelConfig()
        self.shape_encoder = ShapeEncoder(self.cfg)
        self.basis = BasisField(self.cfg)
        self.prior = LatentPrior(self.cfg)
        self.potential = Potential(self.cfg)
        # float64 throughout: pins and stiff cloth make the latent Hessians badly conditioned
        # (1e4-1e7), and the networks are small enough that it costs little
        self.double()
