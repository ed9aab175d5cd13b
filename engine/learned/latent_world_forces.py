"""The learned engine's interactions with the world around its body: collision objects and force
fields (Blender's Collision physics and effectors; `engine.core.colliders`, `engine.core.fields`).

`LatentScene.__init__` prepares, once per mesh, what the two interactions need, in the scene's
normalised units (lengths / bounding-box diagonal L, per unit body mass):

* ``scene.latent_colliders``  each `Collider` of `setup.colliders` moved into normalised space
                              (`normalised_colliders`), pushed out with ``scene.collider_k``;
* ``scene.fields``            the field samples (`FieldSamples`, see `field_force`; None without effectors).

Colliders -- `collider_contact(q, ctx)`, one more energy term of `terms.TERMS`. Like the floor,
it acts at the contact samples ``scene.contact_V`` / ``scene.contact_rest``: each sample closer
to a collider's surface than its Thickness Outer (or inside a closed collider, or less than
Thickness Inner behind an open one) is pushed out by the penalty

    E_n = 1/2 k m sum_i (thickness - d_i)^2,   k = FLOOR_OMEGA2 (the floor's 160 Hz spring),

d_i the signed distance to the collider at the step's END frame (frame + 1; substeps of one
frame all see the collider there), m the mass a sample carries (1/Kc: the samples carry the
body, as for the floor). Friction is Coulomb's law with the collider's own coefficient
(`terms.friction`, `engine.core.friction`). Per sample gradient and Gauss-Newton Hessian are
pulled back to the latent space (g -> V^T g, H -> V^T H V), exactly as `terms.floor_contact`. The geometry (closest point, normal,
inside test) is computed in numpy at the trial state and held fixed; the energy is still
differentiable in q (and q_n, for training) through a first-order expansion about that point.
The collider's Damping is not used (backward Euler already removes the approach speed). Only the
contact samples feel a collider: an edge thinner than the spacing of the samples can slip
between them.

Force fields -- `field_force(scene, frame, q_n, qd_n)`, added to the step's generalised force
in `StepContext.build`. See its docstring for the approximation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.colliders import Collider, point_motion, shell_contacts
from ..core.fields import total_accel
from .strain_energy import DTYPE


# --------------------------------------------------------------------------- colliders

class NormalisedCollider:
    """A collider seen in the model's normalised space. It reads its source at every call, so the
    frames of a collider still being written (another simulated object, core/coupling.py) are
    seen as they arrive."""

    def __init__(self, source: Collider, norm):
        self.source, self.norm = source, norm
        self.name, self.faces, self.closed = source.name, source.faces, source.closed
        self.friction, self.damping, self.meta = source.friction, source.damping, source.meta
        self.thickness_outer = source.thickness_outer / norm.scale
        self.thickness_inner = source.thickness_inner / norm.scale

    @property
    def frames(self) -> int:
        return self.source.frames

    def at(self, frame: float) -> np.ndarray:
        return self.norm.forward(self.source.at(frame))

    def velocity(self, frame: float, dt: float) -> np.ndarray:
        return self.source.velocity(frame, dt) / self.norm.scale


def normalised_colliders(colliders, norm) -> list[NormalisedCollider]:
    """Each of `setup.colliders` seen in the normalised space of `norm` (once per mesh, `LatentScene`)."""
    return [NormalisedCollider(c, norm) for c in colliders]


def collider_geometry(c: Collider, x: np.ndarray, frame: float, h: float, dt: float):
    """Contacts of points x [P,3] (normalised) with collider c at `frame`:
    (indices [A], signed distance [A], outward normal [A,3], collider displacement over a step of
    h seconds at the closest point [A,3]) for the active points, or None when none is active."""
    found = shell_contacts(x, c, frame)
    if found is None:
        return None
    idx, sd, n, closest, tri = found
    if c.frames > 1:
        vel = c.velocity(frame - 1.0, dt)                     # over the frame that ends at `frame`
        disp = h * point_motion(closest, tri, c.at(frame), vel)
    else:
        disp = np.zeros((len(idx), 3))
    return idx, sd, n, disp


def collider_contact(q, ctx, need_hess=True):
    """(energy, gradient, Hessian) of the collider penalty at the contact samples,
    summed over `setup.colliders` (see the module docstring). Zero when there is none."""
    s = ctx.scene
    d = len(q)
    energy = torch.zeros((), dtype=q.dtype, device=q.device)
    g = torch.zeros_like(q)
    H = torch.zeros(d, d, dtype=q.dtype, device=q.device)
    cols = s.latent_colliders
    if not cols:
        return energy, g, (H if need_hess else None)
    x = s.contact_rest + torch.einsum("kid,d->ki", s.contact_V, q)
    xn = x.detach().cpu().numpy()
    frame = float(ctx.frame) + 1.0
    m = s.contact_mass
    k = m * s.collider_k
    for c in cols:
        geo = collider_geometry(c, xn, frame, ctx.h, s.setup.dt)
        if geo is None:
            continue
        idx = torch.as_tensor(geo[0], device=q.device)
        sd, n = (torch.as_tensor(a, dtype=q.dtype, device=q.device) for a in geo[1:3])
        xi, Vi = x[idx], s.contact_V[idx]                                      # [A,3], [A,3,d]
        depth = c.thickness_outer - (sd + torch.einsum("pi,pi->p", xi - xi.detach(), n))
        Vn = torch.einsum("pi,pid->pd", n, Vi)                                 # n^T V per sample
        energy = energy + 0.5 * k * torch.dot(depth, depth)
        g = g - k * Vn.T @ depth
        if need_hess:
            H = H + k * Vn.T @ Vn
    return energy, g, (H if need_hess else None)


# --------------------------------------------------------------------------- force fields

@dataclass
class FieldSamples:
    """Where the force fields are felt (`field_force`): the contact samples, each standing for its
    rest-space cell, and the faces around them (their normals on the deformed surface)."""
    effectors: list              # `setup.effectors`
    V: torch.Tensor              # [K,3,d] each sample's cell's mass-weighted basis
    local_vertices: np.ndarray   # [U] the samples and the vertices of the faces around them
    local_V: np.ndarray          # [3U,d] their basis
    sample_local: np.ndarray     # [K] each sample's index among `local_vertices`
    local_faces: np.ndarray      # [F,3] the faces around the samples, in those indices
    corner: tuple                # (face, corner) pairs where a sample is a face's corner
    corner_sample: np.ndarray    # the sample at each of those corners


def field_samples(scene) -> FieldSamples | None:
    """The field samples of the scene's mesh (once per mesh, `LatentScene`); None without effectors."""
    setup = scene.setup
    if not setup.effectors:
        return None
    sub, dev = scene.sub, scene.device
    samples = np.asarray(sub.contact)
    # each vertex belongs to its nearest sample at rest (a Voronoi cell); a sample stands for the
    # mass-weighted basis of its whole cell, so a field uniform over each cell reduces exactly
    owner = np.empty(len(sub.rest), dtype=np.int64)
    ps = sub.rest[samples]
    for s0 in range(0, len(sub.rest), 2048):
        chunk = sub.rest[s0:s0 + 2048]
        owner[s0:s0 + 2048] = np.argmin(((chunk[:, None, :] - ps[None]) ** 2).sum(-1), axis=1)
    cell_V = np.zeros((len(samples), 3, scene.dims))
    np.add.at(cell_V, owner, scene.vertex_mass[:, None, None] * sub.vertex_basis)
    # vertex normals at the samples on the deformed surface: from the faces around each sample
    faces = np.asarray(sub.faces, dtype=np.int64).reshape(-1, 3)
    pos = np.full(len(sub.rest), -1)
    pos[samples] = np.arange(len(samples))
    around = np.nonzero((pos[faces] >= 0).any(axis=1))[0] if len(faces) else np.zeros(0, dtype=np.int64)
    local_faces = faces[around]
    verts, inverse = np.unique(np.concatenate([samples, local_faces.ravel()]), return_inverse=True)
    corner = pos[local_faces]                                                   # [Fi,3] sample index or -1
    at_corner = np.nonzero(corner >= 0)
    return FieldSamples(effectors=list(setup.effectors), V=torch.as_tensor(cell_V, dtype=DTYPE, device=dev),
                        local_vertices=verts, local_V=sub.vertex_basis[verts].reshape(-1, scene.dims),
                        sample_local=inverse[:len(samples)], local_faces=inverse[len(samples):].reshape(-1, 3),
                        corner=at_corner, corner_sample=corner[at_corner])


def field_samples_state(scene, q, qd):
    """Positions (m), velocities (m/s) and unit normals of the field samples at the latent state."""
    sub, fields = scene.sub, scene.fields
    qn = q.detach().cpu().numpy().astype(np.float64)
    qdn = qd.detach().cpu().numpy().astype(np.float64)
    xl = sub.rest[fields.local_vertices] + (fields.local_V @ qn).reshape(-1, 3)
    vl = (fields.local_V @ qdn).reshape(-1, 3)
    s = fields.sample_local
    normals = np.zeros((len(s), 3))
    faces = fields.local_faces
    if len(faces):
        fn = np.cross(xl[faces[:, 1]] - xl[faces[:, 0]], xl[faces[:, 2]] - xl[faces[:, 0]])
        np.add.at(normals, fields.corner_sample, fn[fields.corner[0]])
        normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-300)
    return sub.norm.inverse(xl[s]), vl[s] * sub.norm.scale, normals


def field_force(scene, frame: int, q_n, qd_n):
    """Generalised force of `setup.effectors` for the step from `frame`, evaluated on the deformed
    surface at the start of the step (this is where the learned engine evaluates a force field):
    added to `scene.forcing(frame)`, the painted forces. 0.0 when there are no effectors.

    Approximation (stated for users in docs/ADDON.md): the fields are evaluated, once per step
    and explicitly (at q_n, q'_n), at the contact samples only -- their decoded positions,
    velocities and area-weighted vertex normals (on the surface, as Blender's cloth, for cloth;
    as points for solids) -- and each sample's acceleration is taken
    as uniform over its rest-space Voronoi cell, whose mass-weighted basis it carries:
    f = sum_k (sum_{n in cell k} m_n V_n)^T a_k. Fields that vary faster than the spacing of the
    samples are smoothed, and a very strong Drag (strength x step > 2) can overshoot, as with any
    explicit force."""
    fields = scene.fields
    if fields is None:
        return 0.0
    x, v, normals = field_samples_state(scene, q_n, qd_n)
    a = total_accel(fields.effectors, frame, x, v, normals, surface=scene.kind == "cloth") / scene.scale
    f = torch.einsum("kid,ki->d", fields.V, torch.as_tensor(a, dtype=fields.V.dtype, device=fields.V.device))
    return f.to(q_n.dtype)
