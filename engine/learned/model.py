"""The NeuROK model, v2: a skinning subspace per mesh and a learned strain energy density.

    latent q  --(skinning subspace of the mesh, `subspace.py`)-->  vertex positions
    V(q) = stiffness * sum_k c_k psi_theta(invariants of F_k(q); material)  (`materials.py`)
         + exact gravity, painted forces, pins, floor                          (`terms.py`)

What is learned: the density psi_theta (Lame scales per material and an invariant-based
correction on top of neo-Hookean / the cloth membrane, plus a bending scale), trained from
trajectories by differentiating through the implicit step. Everything else is exact mechanics,
so a rigid motion costs nothing, stiffness scales V exactly, and no sample can invert.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn

from .materials import StrainEnergy


@dataclass
class ModelConfig:
    handles: int = 8              # affine handles (12 coordinates each; d <= 12 * handles)
    lattice_cells: int = 8        # cells along the longest side of the solids' embedding lattice
    samples: int = 160            # cubature samples of the elastic energy (cells or triangles)
    contact_samples: int = 256    # vertices where the floor is felt
    width: int = 32               # hidden width of the density network

    def to_dict(self):
        return asdict(self)


class NeurokModel(nn.Module):
    def __init__(self, cfg: ModelConfig | None = None):
        super().__init__()
        self.cfg = cfg or ModelConfig()
        self.energy = StrainEnergy(self.cfg.width)
        self.weight_field = None   # learned refinement of the handle weights (not trained yet: eigenfunctions only)
