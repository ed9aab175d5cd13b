"""The NeuROK model, v2: a skinning subspace per mesh and a learned strain energy density.

    latent q  --(skinning subspace of the mesh, `subspace.py`)-->  vertex positions
    V(q) = stiffness * sum_k c_k psi_theta(invariants of F_k(q); material)  (`strain_energy.py`)
         + exact gravity, painted forces, pins, floor                          (`terms.py`)

What is learned: the skinning weights (`WeightField`, a neural field over the mesh's Laplacian
eigenfunctions conditioned on its spectrum, fitted so 4D data projects onto the subspace) and the
density psi_theta (Lame scales per material and an invariant-based correction on top of
neo-Hookean / the cloth membrane, plus a bending scale), trained from trajectories by
differentiating through the implicit step. Everything else is exact mechanics, so a rigid motion
costs nothing, stiffness scales V exactly, and no sample can invert.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from .strain_energy import DTYPE, StrainEnergy


@dataclass
class ModelConfig:
    handles: int = 8              # affine handles (12 coordinates each; d <= 12 * handles)
    lattice_cells: int = 8        # cells along the longest side of the solids' embedding lattice
    samples: int = 160            # cubature samples of the elastic energy (cells or triangles)
    contact_samples: int = 256    # vertices where the floor is felt
    width: int = 32               # hidden width of the density network

    def to_dict(self):
        return asdict(self)


class WeightField(nn.Module):
    """The learned skinning weights: a neural field over each mesh's own smooth functions.

    Input at a node: the 2H lowest Laplacian eigenfunctions there, and the shape code — the
    normalised spectrum log(lambda_k / lambda_2), which describes the shape independently of how
    it is meshed or posed. Output: H handle weights, the first held at 1 (so rigid motion stays
    exact), the others the eigenfunctions plus a learned correction (last layer zero at start:
    an untrained field gives the eigenfunctions). Trained on 4D data so that observed frames
    project onto the subspace with small error (`training/train.py`, stage 1).
    """

    def __init__(self, handles: int, width: int):
        super().__init__()
        self.handles = handles
        self.net = nn.Sequential(nn.Linear(4 * handles, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU(),
                                 nn.Linear(width, handles - 1))
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)
        self.to(DTYPE)

    @staticmethod
    def shape_code(spectrum, count):
        s = torch.as_tensor(np.asarray(spectrum, dtype=np.float64), dtype=DTYPE)
        s = torch.nn.functional.pad(s, (0, max(0, count - len(s))))[:count]
        ref = s[1].clamp(min=1e-12)
        return torch.log(s.clamp(min=1e-12) / ref) * (s > 0)

    def forward(self, functions, spectrum):
        """functions [n, >= 2H] (torch; the first 2H are read), spectrum -> weights [n, H]."""
        H = self.handles
        phi = torch.nn.functional.pad(functions[:, :2 * H], (0, max(0, 2 * H - functions.shape[1])))
        code = self.shape_code(spectrum, 2 * H).expand(len(phi), -1)
        correction = self.net(torch.cat([phi, code], dim=-1))
        ones = torch.ones(len(phi), 1, dtype=phi.dtype, device=phi.device)
        return torch.cat([ones, phi[:, 1:H] + correction], dim=-1)

    def for_handles(self, functions, spectrum, handles: int):
        """[n, handles] (torch): this field's weights for as many handles as it has outputs, and
        the mesh's next eigenfunctions as they are beyond them (a sheet or a slender body may
        need more handles than the field has outputs)."""
        w = self(functions, spectrum)[:, :handles]
        if handles > self.handles:
            w = torch.cat([w, functions[:, self.handles:handles]], dim=1)
        return w

    def weights(self, functions, spectrum, handles: int) -> np.ndarray:
        """`for_handles`, numpy in and out."""
        with torch.no_grad():
            return self.for_handles(torch.as_tensor(functions, dtype=DTYPE), spectrum, handles).cpu().numpy()


class NeurokModel(nn.Module):
    def __init__(self, cfg: ModelConfig | None = None):
        super().__init__()
        self.cfg = cfg or ModelConfig()
        self.energy = StrainEnergy(self.cfg.width)
        self.weight_field = WeightField(self.cfg.handles, self.cfg.width)

    def classical_prior(self) -> "NeurokModel":
        """Set every learned output layer to zero, in place, as an untrained model has them: the
        density's (Lame scales, correction), the dissipation and compression closures' (the
        damping as the sliders set it, the reference's membrane) and the weight field's (the handle weights are then the mesh's own
        Laplacian eigenfunctions). The classical material in the eigenfunction subspace. Returns
        the model."""
        with torch.no_grad():
            for layer in (self.energy.scales[-1], self.energy.correction[-1], self.weight_field.net[-1]):
                layer.weight.zero_()
                layer.bias.zero_()
            self.energy.dissipation.weight.zero_()
            self.energy.compression.weight.zero_()
        return self
