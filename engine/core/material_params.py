"""`Material`: the one typed material both engines read, made once by `scene.resolve_material`
from a preset and the scene's (or the sliders') explicit numbers.

Solids: stiffness = Young's modulus (Pa), density kg/m^3, poisson = Poisson ratio. Cloth:
stiffness = membrane stretch stiffness (N/m), density = areal density (kg/m^2), bending = bending
stiffness (N*m). damping = Rayleigh stiffness-proportional beta (s); air_damping = Rayleigh
mass-proportional alpha (1/s). `law` (solids): "neo_hookean" or "mooney_rivlin", whose share of
the small-strain shear modulus on the second invariant is `i2_share`.

What is written to disk (sequence files, scene files, checkpoints) is `to_dict()`, the same keys
as before there was a type: `law` and `i2_share` only for Mooney-Rivlin.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

NEO_HOOKEAN = "neo_hookean"
MOONEY_RIVLIN = "mooney_rivlin"
MAX_LEARNED_POISSON = 0.495      # the learned energy's Lame parameters stop here (lambda grows without bound at 0.5)


def lame(poisson):
    """Dimensionless Lame parameters (mu, lambda) / Young's modulus."""
    nu = min(float(poisson), MAX_LEARNED_POISSON)
    return 1.0 / (2.0 * (1.0 + nu)), nu / ((1.0 + nu) * (1.0 - 2.0 * nu))


@dataclass(frozen=True)
class Material:
    """A resolved, checked material (build one with `scene.resolve_material`)."""
    kind: str                 # "solid" | "cloth"
    stiffness: float
    density: float
    poisson: float
    damping: float
    air_damping: float
    bending: float
    preset: str | None = None           # the preset it was filled from (built-in or learned)
    law: str = NEO_HOOKEAN
    i2_share: float = 0.0               # Mooney-Rivlin only: 0 for neo-Hookean

    @property
    def lame(self) -> tuple[float, float]:
        """(mu, lambda) per unit Young's modulus, as the learned energy uses them (`lame`)."""
        return lame(self.poisson)

    def omega2(self, diagonal: float) -> float:
        """Squared characteristic frequency of a body of this size: stiffness / (density * size^2),
        in s^-2 (Young's modulus / volume density for solids, stretch / areal density for cloth)."""
        return self.stiffness / (self.density * max(diagonal, 1e-9) ** 2)

    def to_dict(self) -> dict:
        """The material as the file formats hold it (`from_dict` reads it back)."""
        out = asdict(self)
        if self.preset is None:
            del out["preset"]
        if self.law == NEO_HOOKEAN:
            del out["law"], out["i2_share"]
        return out

    @classmethod
    def from_dict(cls, values: dict) -> "Material":
        """A material from a complete, checked dict (`to_dict`'s keys); `scene.resolve_material`
        fills and checks what a user or a file gives."""
        return cls(kind=values["kind"], stiffness=values["stiffness"], density=values["density"],
                   poisson=values["poisson"], damping=values["damping"], air_damping=values["air_damping"],
                   bending=values["bending"], preset=values.get("preset"), law=values.get("law", NEO_HOOKEAN),
                   i2_share=values.get("i2_share", 0.0))
