"""Lagrangian mechanics in the latent space.

Everything is written per unit mass in normalised lengths (x / L, L = bounding-box diagonal),
so with the mass-orthonormal basis the kinetic energy is T = 1/2 |q'|^2 (the exact pull-back
mass Phi^T diag(m) Phi, which is the identity after orthonormalisation) and the potential is

    V(q) = w0^2 v(q; s, material)            elastic, w0^2 = stiffness / (density L^2)
         - f_t . q                           gravity + painted accelerations: Phi^T mu a / L
         + 1/2 q^T P q - b_t . q             pins: springs of stiffness mu kappa to their targets
         + floor(q)                          penalty + friction at contact samples

with Rayleigh damping D = alpha I + beta w0^2 hess v(q_n). Every term but v is exact, and all
of them reduce to d x d matrices and d-vectors once per mesh, except the floor (at Kc samples).
One backward-Euler step minimises the incremental potential (see `integrators.py`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..core.geometry import Normalisation, farthest_point_sample, vertex_mass_fractions, vertex_normals
from .model import TRANSLATION_MODES, NeurokModel
from ..core.physics import FLOOR_FRICTION, FLOOR_OMEGA2, PIN_OMEGA2, PIN_OVER_MATERIAL, material_omega2

SUBSTEP = 1.0 / 48.0       # longest latent step (s); the generator's reference substep too
CONTACT_SAMPLES = 256     # floor contact is felt at this many spread samples (64 let bodies sink between them)
DTYPE = torch.float64


def material_features(material: dict, scale: float) -> np.ndarray:
    """[is_cloth, poisson (scaled), log10 of the bending ratio bending / (stiffness L^2) (scaled)]."""
    cloth = material["kind"] == "cloth"
    bend = math.log10(max(material.get("bending", 1e-4), 1e-12) / (material["stiffness"] * scale ** 2)) if cloth else -6.0
    return np.array([1.0 if cloth else 0.0, (material.get("poisson", 0.3) - 0.3) * 5.0, (bend + 6.0) / 3.0])


@dataclass
class MeshTensors:
    """Per-mesh inputs of the networks, computed once (numpy -> torch)."""
    x: torch.Tensor               # [N,3] normalised rest positions
    mu: torch.Tensor              # [N] mass fractions
    points: torch.Tensor          # [K,3] shape-encoder samples
    normals: torch.Tensor         # [K,3]
    contact_idx: torch.Tensor     # [Kc] vertex indices used for floor contact
    is_cloth: torch.Tensor        # scalar
    norm: Normalisation


def mesh_tensors(rest, faces, kind, vertex_mass=None, samples=256, device="cpu") -> MeshTensors:
    norm = Normalisation.of(rest)
    x = norm.forward(rest)
    normals = vertex_normals(x, np.asarray(faces)) if len(faces) else np.zeros_like(x)
    idx = farthest_point_sample(x, samples)
    cidx = idx[:CONTACT_SAMPLES] if len(idx) >= CONTACT_SAMPLES else farthest_point_sample(x, CONTACT_SAMPLES)
    t = lambda a: torch.as_tensor(np.asarray(a), dtype=DTYPE, device=device)  # noqa: E731
    return MeshTensors(x=t(x), mu=t(vertex_mass_fractions(rest, faces, vertex_mass)), points=t(x[idx]),
                       normals=t(normals[idx]), contact_idx=torch.as_tensor(cidx, device=device),
                       is_cloth=torch.tensor(1.0 if kind == "cloth" else 0.0, device=device), norm=norm)


@dataclass
class ReducedMesh:
    phi: torch.Tensor    # [N,d,3] mass-orthonormal basis
    s: torch.Tensor      # [code] shape code
    material: torch.Tensor  # [3] material features
    B: torch.Tensor      # [d-3, d-3] quadratic factor of the potential


def reduce_mesh(model: NeurokModel, mt: MeshTensors, material: dict) -> ReducedMesh:
    s = model.shape_encoder(mt.points[None], mt.normals[None], mt.is_cloth[None])[0]
    phi = model.basis(mt.x, s)
    # Gram-Schmidt in mode order (Phi L^-T), twice: the learned modes are weak next to the
    # translations (mass eigenvalues down to ~1e-7), so one regularised pass leaves them up to
    # 20% short of unit mass; the second pass makes Phi^T diag(mu) Phi = I (exactly-zero modes,
    # e.g. X_z e_k on a flat sheet, stay zero)
    for _ in range(2):
        mass = torch.einsum("n,nia,nja->ij", mt.mu, phi, phi)
        eye = torch.eye(mass.shape[0], dtype=mass.dtype, device=mass.device)
        chol = torch.linalg.cholesky(mass + 1e-6 * torch.diagonal(mass).mean() * eye)
        inv = torch.linalg.solve_triangular(chol, eye, upper=False)
        phi = torch.einsum("nia,ji->nja", phi, inv)
    feats = torch.as_tensor(material_features(material, mt.norm.scale), dtype=DTYPE, device=mt.x.device)
    return ReducedMesh(phi=phi, s=s, material=feats, B=model.potential.factor(s, feats))


def encode(red: ReducedMesh, mt: MeshTensors, x_norm):
    """Deformation encoder mean: the mass-weighted projection of (x - X) onto the basis.
    x_norm [...,N,3] normalised positions -> q [...,d]."""
    return torch.einsum("n,nja,...na->...j", mt.mu, red.phi, x_norm - mt.x)


def decode(red: ReducedMesh, mt: MeshTensors, q):
    """q [...,d] -> normalised positions [...,N,3]."""
    return mt.x + torch.einsum("nja,...j->...na", red.phi, q)


def generalized(red: ReducedMesh, mt: MeshTensors, vec_norm):
    """Generalised force of a per-unit-mass field [...,N,3] (normalised units): Phi^T mu a."""
    return torch.einsum("n,nja,...na->...j", mt.mu, red.phi, vec_norm)


def pin_omega2(material, scale):
    return max(PIN_OMEGA2, PIN_OVER_MATERIAL * material_omega2(material, scale))


def contact_terms(red: ReducedMesh, mt: MeshTensors):
    """Basis rows and rest heights of the contact samples."""
    return red.phi[mt.contact_idx], mt.x[mt.contact_idx, 2]


def mlp_jacobian(net, x, inputs):
    """Output of an MLP (Linear/SiLU layers) and its Jacobian with respect to the first
    `inputs` entries of x, propagated layer by layer (cheaper than autograd's jacrev here)."""
    J = torch.eye(x.shape[-1], inputs, dtype=x.dtype, device=x.device)
    h = x
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            h = layer(h)
            J = layer.weight @ J
        else:  # SiLU: d/dz z sigmoid(z) = sigmoid(z) (1 + z (1 - sigmoid(z)))
            sig = torch.sigmoid(h)
            J = (sig * (1.0 + h * (1.0 - sig)))[:, None] * J
            h = h * sig
    return h, J


def potential_terms(potential, q, ctx, derivatives=True):
    """Elastic potential v, its gradient and its Gauss-Newton Hessian (B^T B + 2 J^T J, always
    positive semi-definite) for one latent q [d]; the translation block gets zeros."""
    qe = q[TRANSLATION_MODES:]
    cond = torch.cat([ctx["s"], ctx["mat"]], dim=-1)
    B = ctx["B"]
    Bq = B @ qe
    g0 = potential.g(torch.cat([torch.zeros_like(qe), cond], dim=-1))
    if not derivatives:
        r = potential.g(torch.cat([qe, cond], dim=-1)) - g0
        return 0.5 * torch.dot(Bq, Bq) + torch.dot(r, r), None, None
    g1, J = mlp_jacobian(potential.g, torch.cat([qe, cond], dim=-1), qe.shape[0])
    r = g1 - g0
    v = 0.5 * torch.dot(Bq, Bq) + torch.dot(r, r)
    grad_e = B.T @ Bq + 2.0 * J.T @ r
    hess_e = B.T @ B + 2.0 * J.T @ J
    pad = TRANSLATION_MODES
    grad_v = torch.cat([torch.zeros(pad, dtype=q.dtype, device=q.device), grad_e])
    hess_v = torch.nn.functional.pad(hess_e, (pad, 0, pad, 0))
    return v, grad_v, hess_v


def step_terms(potential, q, ctx, derivatives=True):
    """Incremental potential of one backward-Euler step for one latent q [d], with its
    gradient and (Gauss-Newton) Hessian. `ctx` holds the start of the step and the step's
    reduced forces (see module docstring)."""
    h = ctx["h"]
    d = q.shape[0]
    eye = torch.eye(d, dtype=q.dtype, device=q.device)
    dq = q - ctx["q_n"] - h * ctx["qd_n"]
    dv = q - ctx["q_n"]
    v, gv, Hv = potential_terms(potential, q, ctx, derivatives)
    w0sq = ctx["w0sq"]
    damping = ctx["alpha"] * eye + ctx["beta"] * w0sq * ctx["Hd"]
    energy = 0.5 * torch.dot(dq, dq) / h ** 2 + w0sq * v - torch.dot(ctx["f"], q) \
        + 0.5 * torch.dot(q, ctx["P"] @ q) - torch.dot(ctx["b"], q) + 0.5 / h * torch.dot(dv, damping @ dv)
    phi_z, phi_t = ctx["phi_c"][:, :, 2], ctx["phi_c"][:, :, :2]
    kc = phi_z.shape[0]
    z = ctx["z_c"] + phi_z @ q
    pen = torch.clamp(z - ctx["floor"], max=0.0)
    slide = torch.einsum("kia,i->ka", phi_t, dv)
    k_floor = ctx["has_floor"] * FLOOR_OMEGA2 / kc
    k_fric = ctx["has_floor"] * FLOOR_FRICTION / h ** 2 / kc * ctx["contact"]
    energy = energy + 0.5 * k_floor * torch.sum(pen ** 2) + 0.5 * torch.sum(k_fric[:, None] * slide ** 2)
    if not derivatives:
        return energy, None, None
    grad = dq / h ** 2 + w0sq * gv - ctx["f"] + ctx["P"] @ q - ctx["b"] + damping @ dv / h
    hess = eye / h ** 2 + w0sq * Hv + ctx["P"] + damping / h
    # floor: penalty on the height of the contact samples, friction on their sliding
    active = (pen < 0).to(q.dtype)
    grad = grad + k_floor * phi_z.T @ pen + torch.einsum("kia,ka->i", phi_t, k_fric[:, None] * slide)
    hess = hess + k_floor * (phi_z.T * active) @ phi_z + torch.einsum("kia,k,kja->ij", phi_t, k_fric, phi_t)
    return energy, grad, hess


def step_energy(potential, q, ctx):
    return step_terms(potential, q, ctx, derivatives=False)[0]


def elastic_hessian(potential, q, ctx):
    """Gauss-Newton Hessian of v at q (used for stiffness-proportional damping)."""
    return potential_terms(potential, q, ctx)[2]


