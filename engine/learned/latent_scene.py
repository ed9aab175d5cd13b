"""A `Setup` reduced to the latent space once: the mesh's subspace, the elastic cubature, and
every exact term (mass, gravity, painted forces, pins, floor) as small matrices and vectors.

Units: lengths are normalised by the bounding-box diagonal L, and energies are per unit of the
body's mass and per L^2, so the kinetic energy is 1/2 |q'|^2 in the mass-orthonormal basis and
the elastic energy is w0^2 * sum_k c_k psi_k, w0^2 = stiffness / (density L^2). Training builds
the same object with gradients on, so what is trained is exactly what runs.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import torch

from ..core.assembly import padded_rows
from ..core.physics import FLOOR_OMEGA2, pin_stiffness
from ..core.setup import Setup, profile_value
from . import latent_world_forces
from .strain_energy import DTYPE, determinant
from .subspace import Resolution, Subspace, cached_subspace, cloth_local_map, held_pins, resolution, solid_local_map


def _t(a, device="cpu"):
    return torch.as_tensor(np.asarray(a), dtype=DTYPE, device=device)


def scalar_map(G, kind: str):
    """The samples' scalar local map g [K,r,d/3] if G [K,m,d] applies it to each displacement
    component alone (the component-major basis of `subspace.mass_orthonormal_transform`): a
    solid's rows are vec F, (i,j) with i the component; a sheet's are its edges, (e,i). Else None."""
    K, m, d = G.shape
    if d % 3 or m % 3:
        return None
    k = d // 3
    rows = np.arange(m).reshape(3, -1) if kind == "solid" else np.arange(m).reshape(-1, 3).T
    g = G[:, rows[0], :k]
    whole = np.zeros_like(G)
    for i in range(3):
        whole[:, rows[i], i * k:(i + 1) * k] = g
    return np.ascontiguousarray(g) if np.allclose(whole, G, rtol=0.0, atol=1e-12 * max(float(np.abs(G).max()), 1e-300)) else None


class LatentScene:
    """Everything one simulation needs in latent form."""

    def __init__(self, model, setup: Setup, subspace: Subspace | None = None, device="cpu",
                 fixed: Resolution | None = None, closures: bool = True):
        """`fixed`: this resolution instead of the one the mesh's shape asks for (`subspace.resolution`).
        `closures`: whether the learned closures act (a run decides it once, `runtime.RunConfig`:
        off under a sheet's full-space layer, since they were learned to make up for the latent
        step's locking on its own)."""
        self.model, self.setup, self.device = model, setup, device
        self.closures = closures
        cfg = model.cfg
        mat = setup.material
        if subspace is None:
            self.resolution = fixed or resolution(setup.rest, setup.faces, mat.kind, cfg.handles, cfg.lattice_cells,
                                                  setup.detail)
            subspace = cached_subspace(setup.rest, setup.faces, mat.kind, self.resolution.handles,
                                       self.resolution.lattice_cells, cfg.samples, cfg.contact_samples,
                                       model.weight_field, held_pins(setup))
        else:
            self.resolution = Resolution(subspace.weights.shape[1], cfg.lattice_cells)
        self.sub = subspace
        sub = self.sub
        self.kind = sub.kind
        self.scale = sub.norm.scale
        self.dims = sub.dims
        self.w0sq = mat.omega2(self.scale)
        self.mu, self.lam = mat.lame
        self.U = _t(sub.node_basis, device)                     # [n,3,d]
        self.V = _t(sub.vertex_basis, device)                   # [N,3,d]
        self.vertex_mass = sub.vertex_mass
        self._elastic_samples()
        self.f_gravity = self.uniform_force(np.asarray(setup.gravity, dtype=np.float64) / self.scale)
        self.force_terms = [(profile, self.vertex_force(w[:, None] * np.asarray(a)[None] / self.scale))
                            for w, a, profile in setup.force_terms]
        self._pins()
        self._floor()
        self.latent_colliders = latent_world_forces.normalised_colliders(setup.colliders, sub.norm)
        self.collider_k = FLOOR_OMEGA2                          # a collider pushes out as the floor does
        self.fields = latent_world_forces.field_samples(self)   # where force fields are felt (None: no effectors)
        self._encoder()
        self.q0 = self.encode(sub.norm.forward(setup.x0))
        self.qd0 = self.encode_velocity(setup.v0 / self.scale)

    @property
    def features(self):
        """The material's features and its learned numbers, if it is a learned material (made
        on each use, so they carry gradients while that material is learned)."""
        return self.model.energy.features_for(self.setup.material).to(self.device)

    # ----- elastic cubature

    def _elastic_samples(self):
        sub = self.sub
        if self.kind == "solid":
            self._set_samples(*solid_local_map(sub.node_basis, sub.cell_nodes, sub.cell_size,
                                               sub.cell_points), sub.cell_volume)
            self.bending = None
            return
        G, offset, lengths = cloth_local_map(sub.node_basis, sub.nodes, sub.triangles)
        self._set_samples(G, offset, sub.triangle_area)
        self.rest_lengths = _t(lengths, self.device)
        x = sub.nodes
        Q = sub.bending
        Ub = sub.node_basis
        Kb = sum(Ub[:, c, :].T @ (Q @ Ub[:, c, :]) for c in range(3))
        area = float(np.sum(np.linalg.norm(np.cross(x[sub.faces[:, 1]] - x[sub.faces[:, 0]],
                                                    x[sub.faces[:, 2]] - x[sub.faces[:, 0]]), axis=1))) / 2.0
        mat = self.setup.material
        ratio = mat.bending / (mat.stiffness * self.scale ** 2 * area)
        self.bending = _t(ratio * 0.5 * (Kb + Kb.T), self.device)

    def _set_samples(self, G, offset, weights):
        """Local coordinates of the samples: offset + G q ([K,m] + [K,m,d] q); cubature weights."""
        self.G = _t(G, self.device)
        self.G_flat = self.G.view(-1, self.G.shape[-1])
        self._G32 = None
        scalar = scalar_map(G, self.kind)
        self._g = None if scalar is None else _t(scalar, self.device)     # [K,r,d/3]
        self._g32 = None
        self.offset = _t(offset, self.device)
        self.weights = _t(weights, self.device)

    def density(self, local):
        """Dimensionless strain energy per sample from local coordinates [K, 9 | 6] (nan where inverted)."""
        if self.kind == "solid":
            return self.model.energy.solid_energy(local, self.features, self.mu, self.lam)
        return self.model.energy.cloth_energy(local, self.rest_lengths, self.features, self.compression_share())

    def density_terms(self, local, need_hess=True, project=True, closures=None):
        """(psi [K], dpsi [K,m], d2psi [K,m,m] (PSD if `project`) or None) per sample; `closures`:
        whether the learned closures act (None: as the scene's `closures` say)."""
        if self.kind == "solid":
            return self.model.energy.solid(local, self.features, self.mu, self.lam, need_hess, project)
        return self.model.energy.cloth(local, self.rest_lengths, self.features, need_hess, project,
                                       self.compression_share(closures))

    def bending_scale(self):
        return self.model.energy.bending_scale(self.features)

    @property
    def learned_material(self) -> bool:
        """Is the scene's material one learned from data? It then keeps its own numbers where the
        closures would give a built-in material the kind's."""
        return self.model.energy.preset_for(self.setup.material) is not None

    def _own_numbers(self, closures: bool) -> bool:
        """Whether the material's own numbers stand in for the closures: a learned material's, or,
        with the closures off, a built-in material's (the sliders' damping, the reference's membrane)."""
        return self.learned_material or not closures

    def compression_share(self, closures=None):
        """A compressed cloth edge's share of the membrane stiffness (None: all of it); `closures`:
        whether the learned closures act (None: as the scene's `closures` say)."""
        acting = self.closures if closures is None else closures
        return self.model.energy.compression_share(self.features, learned_material=self._own_numbers(acting))

    def damping_scales(self):
        """(beta, alpha) multipliers: the dissipation closure's, or the material's own numbers."""
        return self.model.energy.damping_scales(self.features, learned_material=self._own_numbers(self.closures))

    def local(self, q):
        """Local coordinates of every cubature sample (vec F, or a triangle's two edges) at q."""
        return self.offset + self.to_samples(q)

    def to_samples(self, v):
        """G v [K,m] for v [d]: through the scalar map g where there is one (it is a ninth of G's
        size, and G v is bound by reading G: a 10k sheet's G is 2 MB)."""
        if self._g is None:
            return (self.G_flat @ v).view(self.offset.shape)
        K, r, k = self._g.shape
        y = (self._g.view(K * r, k) @ v.view(3, k).T).view(K, r, 3)               # [k, j, i]
        return (y.transpose(1, 2) if self.kind == "solid" else y).reshape(K, 3 * r)

    def from_samples(self, f):
        """G^T f [d] for per-sample vectors f [K,m] (the transpose of `to_samples`)."""
        if self._g is None:
            return f.reshape(-1) @ self.G_flat
        K, r, k = self._g.shape
        f = f.view(K, 3, r).transpose(1, 2) if self.kind == "solid" else f.view(K, r, 3)   # [k, j, i]
        return (self._g.view(K * r, k).T @ f.reshape(K * r, 3)).T.reshape(-1)

    def elastic(self, q, need_hess=True, project=True, fast=False, extra=None, closures=None):
        """(energy, gradient, Hessian) of w0^2 sum_k c_k psi(F_k(q)) (+ reduced bending for cloth).
        `project`: each sample's Hessian made positive semi-definite (else the exact one).
        `fast`: the Hessian assembled in float32 (for Newton's matrix, which only steers the
        iterations; 2x faster on a CPU, more on a GPU). `extra` [K,m,m]: more per-sample
        Hessians assembled with these (the damping's, `terms.Damping`): one assembly for both.
        `closures`: whether the learned closures act (None: as the scene's `closures` say)."""
        psi, dpsi, h_local = self.density_terms(self.local(q), need_hess, project, closures)
        c = self.w0sq * self.weights
        energy = torch.dot(c, psi)
        g = self.from_samples(c[:, None] * dpsi)
        H = None
        if need_hess:
            h_local = h_local * c[:, None, None]
            H = self._assemble(h_local if extra is None else h_local + extra, fast)
        if self.bending is not None:                 # w0^2 s Q (`bending_stiffness`), scaled after the product
            s = self.w0sq * self.bending_scale()
            Qq = self.bending @ q
            energy = energy + 0.5 * s * torch.dot(q, Qq)
            g = g + s * Qq
            H = None if H is None else H + s * self.bending
        return energy, g, H

    def sample_hessians(self, q):
        """Each sample's elastic Hessian at q, positive semi-definite and weighted
        (w0^2 c_k d2psi_k [K,m,m]), and the constant bending matrix (cloth; else None): the
        elastic Hessian, projected, is `_assemble` of the first plus the second."""
        h_local = self.density_terms(self.local(q), True, True)[2]
        return h_local * (self.w0sq * self.weights)[:, None, None], self.bending_stiffness()

    def bending_stiffness(self):
        """The reduced bending matrix w0^2 s Q [d,d] (cloth; s the learned bending scale), or None."""
        return None if self.bending is None else self.w0sq * self.bending_scale() * self.bending

    def sample_apply(self, blocks, v):
        """sum_k G_k^T b_k G_k v without assembling it: per-sample matrices [K,m,m] times v [d]."""
        return self.from_samples(torch.einsum("kij,kj->ki", blocks, self.to_samples(v)))

    def _assemble(self, h_local, fast):
        """sum_k G_k^T h_k G_k: the reduced Hessian of per-sample Hessians h_k [K,m,m]."""
        if self._g is not None:
            return self._assemble_by_component(h_local, fast)
        if fast:
            if self._G32 is None:
                self._G32 = self.G.to(torch.float32)
            G = self._G32
            HG = torch.bmm(h_local.to(torch.float32), G)
            return (G.view(-1, self.dims).T @ HG.view(-1, self.dims)).to(DTYPE)
        HG = torch.bmm(h_local, self.G)
        return self.G_flat.T @ HG.view(-1, self.dims)

    def _assemble_by_component(self, h_local, fast):
        """`_assemble` where G_k = g_k for each displacement component (`scalar_map`):
        H[(i,a),(I,b)] = sum_k sum_jJ g_k[j,a] h_k[(i,j),(I,J)] g_k[J,b], in 3 x 3 blocks of the
        d/3 scalar functions: a third of the multiplications of the whole G."""
        g = self._g
        if fast:
            if self._g32 is None:
                self._g32 = g.to(torch.float32)
            g, h_local = self._g32, h_local.to(torch.float32)
        K, r, k = g.shape
        h = h_local.view(K, 3, r, 3, r) if self.kind == "solid" else \
            h_local.view(K, r, 3, r, 3).permute(0, 2, 1, 4, 3)               # (i, j, I, J): component first
        t = torch.bmm(h.transpose(1, 2).reshape(K, 9 * r, r), g)             # [K, (j,i,I), b]
        t = t.view(K * r, 9 * k)                                             # [(k,j), (i,I,b)]
        H = (g.reshape(K * r, k).T @ t).view(k, 3, 3, k).transpose(0, 1).reshape(3 * k, 3 * k)
        return H.to(DTYPE)

    def elastic_energy(self, q):
        """Energy only (line search): +inf where a sample would invert."""
        e = torch.dot(self.w0sq * self.weights, self.density(self.local(q)))
        if self.bending is not None:
            e = e + 0.5 * self.w0sq * self.bending_scale() * (q @ self.bending @ q)
        return torch.nan_to_num(e, nan=float("inf"))

    def admissible(self, q) -> bool:
        """Whether q has a finite elastic energy, i.e. inverts no sample: for a solid, every
        sample's det F > 0, checked without the energy (a fifth of its cost); a sheet's energy
        is evaluated."""
        if self.kind == "solid":
            J = determinant(self.local(q).view(-1, 3, 3))
            return bool(torch.all(J > 0.0))
        return bool(torch.isfinite(self.elastic_energy(q)))

    # ----- exact terms

    def uniform_force(self, accel):
        """Generalised force of one acceleration on every node (gravity)."""
        a = _t(self.sub.node_mass, self.device)[:, None] * _t(accel, self.device)[None]
        return a.reshape(-1) @ self.U.reshape(-1, self.dims)

    def vertex_force(self, accel):
        """Generalised force of per-vertex accelerations [N,3] (normalised units): V^T (m a), one
        matrix-vector product (an einsum over [N,3,d] took 50x longer at 10k vertices)."""
        a = _t(self.vertex_mass, self.device)[:, None] * _t(accel, self.device)
        return a.reshape(-1) @ self.V.reshape(-1, self.dims)

    # ----- the deformation encoder

    def _encoder(self):
        """The mass-weighted projection of vertex displacements onto the subspace. Lattice nodes
        inside a solid touch no vertex, so vertices alone leave some coordinates free: those are
        set by the least elastic energy (a tiny multiple of the rest stiffness), which keeps a
        rigidly moved body rigid inside too. That stiffness is the model's with its closures acting,
        whether or not this scene's run keeps them (`closures`): a run's choice does not move its
        initial state."""
        B = self.sub.vertex_basis.reshape(-1, self.dims)
        self._B = B
        sub = self.sub
        self._handle_points = (None if sub.kind != "cloth" or sub.handle_transform is None else
                               np.concatenate([sub.nodes - sub.centre, np.ones((len(sub.nodes), 1))], axis=1))
        with torch.no_grad():
            K = self.elastic(torch.zeros(self.dims, dtype=DTYPE, device=self.device), closures=True)[2].cpu().numpy()
        gram = self.sub.vertex_gram
        self.vertex_gram = gram                      # B^T M B over the vertices (the OOD score uses it too)
        K = K * (np.trace(gram) / max(np.trace(K), 1e-300))
        # factored once: every substep of a creasing sheet encodes its velocity (a fresh solve
        # was 0.6 ms of it at 264 coordinates); LU, as np.linalg.solve takes, so the same digits
        self._encode_factor = scipy.linalg.lu_factor(gram + 1e-8 * K + 1e-12 * np.eye(self.dims))

    def pull_back(self, f) -> np.ndarray:
        """B^T f [d] of vertex vectors f [N,3]. A sheet's basis is its handles' affine maps blended
        by their weights, so this sums f (x) (Xc, 1) over each handle's weights (O(N H)) instead of
        reading the dense basis (O(N d): at 10k vertices 6 ms a substep)."""
        y = self._handle_points                        # (Xc, 1) per vertex [N,4], or None (solids)
        if y is None:
            return self._B.T @ np.asarray(f, dtype=np.float64).ravel()
        per_handle = (self.sub.weights.T @ (f[:, :, None] * y[:, None, :]).reshape(len(f), 12)).reshape(-1, 3, 4)
        z = np.concatenate([per_handle[:, :, :3].reshape(-1, 9), per_handle[:, :, 3]], axis=1)   # A row-major, b
        return self.sub.handle_transform.T @ z.ravel()

    def _encoded(self, pulled_back):
        """The latent vector(s) whose mass-weighted projection is `pulled_back` ([d] or [d,k])."""
        return scipy.linalg.lu_solve(self._encode_factor, pulled_back)

    def encode(self, x_norm) -> torch.Tensor:
        """Latent of vertex positions [N,3] (normalised)."""
        u = np.asarray(x_norm, dtype=np.float64) - self.sub.rest
        return _t(self._encoded(self.pull_back(self.vertex_mass[:, None] * u)), self.device)

    def encode_velocity(self, v_norm) -> torch.Tensor:
        v = np.asarray(v_norm, dtype=np.float64).reshape(-1, 3)
        return _t(self._encoded(self.pull_back(self.vertex_mass[:, None] * v)), self.device)

    def velocity_encoder(self, J):
        """`encode_velocity` of the vertex velocities J v, for velocities v [P,3] (normalised) of P
        points that the sparse J [N,P] interpolates (a sheet's coarse proxy, `sheet_proxy.py`), as
        one function: its matrix [d, 3P] is made once, so a call costs O(P d), not O(N H)."""
        n, p = J.shape
        weighted = (J.T @ sp.diags(self.vertex_mass)).tocsr()          # no mass-weighted copy of the basis
        E = self._encoded(np.asarray(weighted @ self._B.reshape(n, -1)).reshape(3 * p, self.dims).T)
        return lambda v_norm: _t(E @ np.asarray(v_norm, dtype=np.float64).ravel(), self.device)

    def _pins(self):
        setup = self.setup
        pinned = np.nonzero(setup.pin_weight > 0)[0]
        self.pinned = pinned
        d = self.dims
        if len(pinned) == 0:
            self.P = torch.zeros(d, d, dtype=DTYPE, device=self.device)
            self._b_static = torch.zeros(d, dtype=DTYPE, device=self.device)
            return
        mass = self.vertex_mass[pinned]
        if self.kind == "solid":
            # a solid's pins hold its whole weight: their springs share the body's mass (1 here),
            # not their vertices' own. A finely meshed rod's 25 pinned vertices carry 1.9 % of its
            # mass: with their own, the pins gave way 0.5 mm of its 7.0 mm sag (the reference's 6.3).
            mass = mass / min(1.0, float(mass.sum()))
        self.pin_k = _t(pin_stiffness(setup.pin_weight[pinned], mass, setup.material, self.scale), self.device)
        self.pin_V = self.V[torch.as_tensor(pinned)]
        Vp = self.pin_V.reshape(-1, d)
        self.P = Vp.T @ (self.pin_k.repeat_interleave(3)[:, None] * Vp)
        self._b_static = None if setup.pin_targets is not None else self._pin_b(setup.x0[pinned])

    def _pin_b(self, targets):
        t = _t(self.sub.norm.forward(targets) - self.sub.rest[self.pinned], self.device)
        return torch.einsum("n,nid,ni->d", self.pin_k, self.pin_V, t)

    def pin_b(self, frame):
        if self._b_static is not None:
            return self._b_static
        return self._pin_b(self.setup.pin_target(frame)[self.pinned])

    def _floor(self):
        sub = self.sub
        self.has_floor = self.setup.floor_z is not None
        idx = sub.contact
        self.contact_V = self.V[torch.as_tensor(idx)]                   # [Kc,3,d]
        self.contact_Vz = self.contact_V[:, 2, :].contiguous()
        self.contact_rest = _t(sub.rest[idx], self.device)              # [Kc,3]
        self.contact_mass = 1.0 / len(idx)                              # the samples carry the body
        self.floor_k = FLOOR_OMEGA2
        self.floor = 0.0 if not self.has_floor else float((self.setup.floor_z - sub.norm.centre[2]) / self.scale)
        # the floor is felt at every vertex near it, each as stiff as the mass it carries, as the
        # reference feels it at its vertices. (A fixed set of 256 samples pressed a round body
        # unevenly: a jelly ball at rest slid 10 cm in 3 s. The reference feels it at its lattice
        # nodes too, but this lattice's corners stick out below the surface: touching with them
        # too, the ball rested on a few corners and slid 13 mm.)
        self._node_z = _t(sub.nodes[:, 2], self.device)
        self._node_Vz = self.U[:, 2, :].contiguous()
        self._node_reach = torch.linalg.norm(self._node_Vz, dim=1)   # |dz_node| <= reach * |dq|
        if self.has_floor:      # for `FloorVertices`: each node's vertices, each vertex's nodes [N,w]
            by_node = sub.W.tocsc()
            self._node_vertices_at, self._node_vertices = by_node.indptr, by_node.indices
            self._vertex_nodes, self._vertex_node_weights, _ = padded_rows(sub.W.tocsr())
        self._vertex_rest = _t(sub.rest, self.device)
        self._vertex_mass_t = _t(self.vertex_mass, self.device)
        self._floor_vertices = None     # the last nodes below the floor and their `FloorVertices`

    def node_heights(self, q):
        return self._node_z + self._node_Vz @ q

    def floor_vertices(self, q, q_n, z_n):
        """The `FloorVertices` that may touch the floor at q, or None: the vertices of the nodes
        below it (a vertex lies between its nodes: a lattice cell's for solids, itself for cloth,
        so none is missed). `z_n`: the node heights at q_n, which with `_node_reach` rule out most
        nodes without computing their height at q. The last set is kept: a step's Newton
        iterations mostly find the same nodes below the floor, and gathering their vertices'
        rows of the basis was half a 10k-vertex solid's frame in contact."""
        dq = float(torch.linalg.norm(q.detach() - q_n.detach()))
        near = torch.nonzero(z_n - self._node_reach * dq < self.floor).flatten()
        if not len(near):
            return None
        z = self._node_z[near] + self._node_Vz[near] @ q.detach()
        low = near[z < self.floor].cpu().numpy()
        if not len(low):
            return None
        key = low.tobytes()
        if self._floor_vertices is None or self._floor_vertices[0] != key:
            self._floor_vertices = (key, FloorVertices.of(self, low))
        return self._floor_vertices[1]

    def forcing(self, frame):
        """Generalised gravity + painted accelerations applied from `frame` to `frame + 1`."""
        f = self.f_gravity
        if self.setup.accel_table is not None:
            a = self.setup.accel_table[min(frame, len(self.setup.accel_table) - 1)]
            return f + self.vertex_force(a / self.scale)
        for profile, term in self.force_terms:
            s = profile_value(profile, frame, self.setup.dt)
            if s != 0.0:
                f = f + s * term
        return f

    # ----- decoding

    def decode_norm(self, q):
        return _t(self.sub.rest, self.device) + torch.einsum("nid,...d->...ni", self.V, q)

    def decode_metres(self, q):
        q = q.detach().cpu().numpy() if isinstance(q, torch.Tensor) else np.asarray(q)
        return self.sub.norm.inverse(self.sub.decode(q))


class FloorVertices:
    """The vertices a step's floor may touch (`LatentScene.floor_vertices`), each a weighted sum
    of its nodes: their heights, the pull-back of forces on them and their rows of the basis go
    through the few nodes they lie between (a sheet's vertex is its own node), not through the
    vertices' rows of the whole basis."""

    def __init__(self, rows, slots, weights, node_basis, rest, mass, vertex_basis):
        self.rows = rows                  # [C] vertex indices
        self.slots = slots                # [C,w] each vertex's nodes, indices into node_basis
        self.weights = weights            # [C,w] their interpolation weights (zero past a vertex's own)
        self.node_basis = node_basis      # [c,3,d] those nodes' basis
        self.node_heights = node_basis[:, 2, :].contiguous()
        self.rest = rest                  # [C,3] rest positions (normalised)
        self.mass = mass                  # [C]
        self._vertex_basis = vertex_basis

    @classmethod
    def of(cls, scene: LatentScene, low_nodes):
        """The vertices of the nodes `low_nodes` of `scene` (flags over the vertices and the
        nodes instead of sorting: this runs whenever a Newton iteration finds another node below
        the floor)."""
        device = scene.device
        starts, ends = scene._node_vertices_at[low_nodes], scene._node_vertices_at[low_nodes + 1]
        flagged = np.zeros(len(scene._vertex_nodes), dtype=bool)
        flagged[np.concatenate([scene._node_vertices[a:b] for a, b in zip(starts, ends)])] = True
        rows = np.flatnonzero(flagged)
        their_nodes = scene._vertex_nodes[rows]                       # [C,w], the scene's node indices
        used = np.zeros(len(scene._node_z), dtype=bool)
        used[their_nodes] = True
        slots = (np.cumsum(used) - 1)[their_nodes]
        rows_t = torch.as_tensor(rows, device=device)
        return cls(rows_t, torch.as_tensor(slots, device=device), _t(scene._vertex_node_weights[rows], device),
                   scene.U[torch.as_tensor(np.flatnonzero(used), device=device)],
                   scene._vertex_rest[rows_t], scene._vertex_mass_t[rows_t], scene.V)

    def heights(self, q):
        """[C] the vertices' heights at q."""
        return self.rest[:, 2] + torch.sum(self.weights * (self.node_heights @ q)[self.slots], dim=1)

    def positions(self, q):
        """[C,3] the vertices at q."""
        y = (self.node_basis.reshape(-1, q.shape[0]) @ q).view(-1, 3)
        return self.rest + torch.sum(self.weights[:, :, None] * y[self.slots], dim=1)

    def pull_back_heights(self, f):
        """[d] the generalised force of vertical forces f [C] on the vertices."""
        on_nodes = torch.zeros(len(self.node_heights), dtype=f.dtype, device=f.device)
        on_nodes.index_add_(0, self.slots.flatten(), (self.weights * f[:, None]).flatten())
        return self.node_heights.T @ on_nodes

    def height_rows(self, which):
        """[S,d] d(height)/dq of the vertices `which` (indices into these)."""
        return torch.sum(self.weights[which, :, None] * self.node_heights[self.slots[which]], dim=1)

    def basis(self, which):
        """[S,3,d] the vertex basis of the vertices `which` (indices into these)."""
        return self._vertex_basis[self.rows[which]]
