"""Reference simulator: full-space physics used for training data, ground truth and speed baseline.

Solids are continuum FEM: the mesh is embedded in a lattice of hexahedral cells, each split
into six tetrahedra (Kuhn split, conforming), with corotated linear elasticity (Young's modulus,
Poisson ratio, density). Mesh vertices follow the lattice by trilinear interpolation, so any
closed or open mesh works. Thin sheets are cloth on the mesh itself: edge springs for stretch
and shear, the quadratic isometric bending model (Bergou et al. 2006) for bending.

Time stepping is backward Euler written as minimisation of the incremental potential
    E(y) = 1/(2h^2) |y - y_n - h v_n|_M^2 + V(y) + 1/(2h) |y - y_n|_D^2,
solved by Newton with a backtracking line search; D = alpha M + beta K is Rayleigh damping.
V holds elasticity, gravity, painted accelerations, pins (stiff springs to their targets) and
a floor (penalty with tangential friction), all acting on mesh vertices and pulled back to the
degrees of freedom through the interpolation matrix W (identity for cloth).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..core.physics import FLOOR_FRICTION, FLOOR_OMEGA2, pin_stiffness
from ..core.errors import SimulationFault
from ..core.geometry import is_closed, lumped_vertex_areas, triangle_areas, winding_numbers
from ..core.scene import Setup

DEFAULT_LATTICE_CELLS = 12      # cells along the longest side of a solid
MAX_LATTICE_CELLS = 2500        # cap on occupied cells (cost grows ~linearly)
DEFAULT_SUBSTEP = 1.0 / 96.0    # longest substep, seconds


# --------------------------------------------------------------------------- geometry helpers

def sample_triangles(x, faces, spacing):
    """Points on every triangle, no further apart than about `spacing`."""
    pts = [x]
    lengths = np.linalg.norm(x[faces[:, [1, 2, 0]]] - x[faces], axis=2).max(axis=1)
    for k in np.unique(np.ceil(lengths / spacing).astype(int)):
        if k < 1:
            continue
        sel = faces[np.ceil(lengths / spacing).astype(int) == k]
        i, j = np.meshgrid(np.arange(k + 1), np.arange(k + 1), indexing="ij")
        keep = (i + j) <= k
        u, v = i[keep] / k, j[keep] / k
        w = 1.0 - u - v
        p = (w[None, :, None] * x[sel[:, 0]][:, None] + u[None, :, None] * x[sel[:, 1]][:, None]
             + v[None, :, None] * x[sel[:, 2]][:, None])
        pts.append(p.reshape(-1, 3))
    return np.concatenate(pts)


# --------------------------------------------------------------------------- discretisations

class Lattice:
    """Hexahedral cells embedding a mesh, split into tetrahedra, with trilinear vertex weights."""

    def __init__(self, rest, faces, cells=DEFAULT_LATTICE_CELLS):
        lo, hi = rest.min(axis=0), rest.max(axis=0)
        extent = np.maximum(hi - lo, 1e-9)
        longest = extent.max()
        while True:
            counts = np.maximum(1, np.round(extent / longest * cells)).astype(int)
            h = extent / counts
            occupied = self._occupied_cells(rest, faces, lo, h, counts)
            if occupied.sum() <= MAX_LATTICE_CELLS or cells <= 4:
                break
            cells = int(cells * 0.85)
        self.lo, self.h, self.counts = lo, h, counts
        cell_ids = np.argwhere(occupied)                                   # [C,3]
        corners = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)])  # bit order x,y,z
        grid_nodes = (cell_ids[:, None, :] + corners[None]).reshape(-1, 3)
        key = (grid_nodes[:, 0] * (counts[1] + 2) + grid_nodes[:, 1]) * (counts[2] + 2) + grid_nodes[:, 2]
        uniq, inverse = np.unique(key, return_inverse=True)
        self.cell_nodes = inverse.reshape(-1, 8)                           # [C,8] node indices
        node_grid = np.zeros((len(uniq), 3), dtype=int)
        node_grid[inverse] = grid_nodes
        self.nodes = lo + node_grid * h                                     # rest node positions
        self.tets = self._kuhn_tets(self.cell_nodes)
        self.W = self._interpolation(rest, cell_ids, occupied)

    @staticmethod
    def _occupied_cells(rest, faces, lo, h, counts):
        occ = np.zeros(counts, dtype=bool)
        pts = sample_triangles(rest, faces, 0.5 * h.min()) if len(faces) else rest
        idx = np.clip(np.floor((pts - lo) / h).astype(int), 0, counts - 1)
        occ[idx[:, 0], idx[:, 1], idx[:, 2]] = True
        if is_closed(faces):
            centers = lo + (np.argwhere(~occ) + 0.5) * h
            if len(centers):
                inside = winding_numbers(centers, rest, faces) > 0.5
                empty = np.argwhere(~occ)[inside]
                occ[empty[:, 0], empty[:, 1], empty[:, 2]] = True
        return occ

    def _kuhn_tets(self, cell_nodes):
        # corner index = 4*i + 2*j + k for offsets (i,j,k); six tets along the 0 -> 7 diagonal
        bit = {0: 4, 1: 2, 2: 1}
        tets = []
        for a, b, c in ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)):
            path = [0, bit[a], bit[a] + bit[b], 7]
            tets.append(cell_nodes[:, path])
        tets = np.concatenate(tets)
        d = self.nodes[tets[:, 1:]] - self.nodes[tets[:, :1]]
        flip = np.linalg.det(d) < 0
        tets[flip, 1], tets[flip, 2] = tets[flip, 2].copy(), tets[flip, 1].copy()
        return tets

    def _interpolation(self, rest, cell_ids, occupied):
        lookup = -np.ones(self.counts, dtype=int)
        lookup[cell_ids[:, 0], cell_ids[:, 1], cell_ids[:, 2]] = np.arange(len(cell_ids))
        f = (rest - self.lo) / self.h
        idx = np.clip(np.floor(f).astype(int), 0, self.counts - 1)
        t = f - idx
        cell = lookup[idx[:, 0], idx[:, 1], idx[:, 2]]
        assert np.all(cell >= 0), "every vertex lies in an occupied cell"
        rows, cols, vals = [], [], []
        for c, (i, j, k) in enumerate([(i, j, k) for i in (0, 1) for j in (0, 1) for k in (0, 1)]):
            w = (t[:, 0] if i else 1 - t[:, 0]) * (t[:, 1] if j else 1 - t[:, 1]) * (t[:, 2] if k else 1 - t[:, 2])
            rows.append(np.arange(len(rest))); cols.append(self.cell_nodes[cell, c]); vals.append(w)
        return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                             shape=(len(rest), len(self.nodes)))


class SparseAssembler:
    """Adds per-element dense blocks into one CSR matrix with a fixed sparsity pattern."""

    def __init__(self, elem_dofs, n):
        k = elem_dofs.shape[1]
        rows = np.repeat(elem_dofs, k, axis=1).ravel()
        cols = np.tile(elem_dofs, (1, k)).ravel()
        pattern = sp.csr_matrix((np.arange(1, len(rows) + 1, dtype=float), (rows, cols)), shape=(n, n))
        pattern.sum_duplicates()
        # position of each element entry inside pattern.data
        coo = sp.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
        self.pattern = sp.csr_matrix((np.zeros(pattern.nnz), pattern.indices, pattern.indptr), shape=(n, n))
        order = np.lexsort((cols, rows))
        sorted_rows, sorted_cols = rows[order], cols[order]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = (sorted_rows[1:] != sorted_rows[:-1]) | (sorted_cols[1:] != sorted_cols[:-1])
        slot_sorted = np.cumsum(first) - 1
        self.slot = np.empty(len(rows), dtype=np.int64)
        self.slot[order] = slot_sorted
        self.nnz = int(slot_sorted[-1]) + 1
        del coo

    def assemble(self, blocks):
        data = np.bincount(self.slot, weights=blocks.ravel(), minlength=self.nnz)
        m = self.pattern.copy()
        m.data = data
        return m


def dofs3(idx):
    """Vertex indices [E,k] -> coordinate indices [E,3k] (x,y,z interleaved)."""
    return (3 * idx[:, :, None] + np.arange(3)).reshape(len(idx), -1)


class CorotatedFEM:
    """Corotated linear elasticity on tetrahedra. The Hessian includes the derivative of the
    rotation (McAdams et al. 2011) and is projected to positive semi-definite per element, so
    Newton converges fast even when the motion is mostly rotation (bending), and Rayleigh
    damping built from it does not resist rigid rotation."""

    def __init__(self, nodes, tets, young, poisson):
        self.tets = tets
        self.mu = young / (2.0 * (1.0 + poisson))
        self.lam = young * poisson / ((1.0 + poisson) * (1.0 - 2.0 * poisson))
        Dm = np.transpose(nodes[tets[:, 1:]] - nodes[tets[:, :1]], (0, 2, 1))     # columns = edges
        self.vol = np.abs(np.linalg.det(Dm)) / 6.0
        self.Bm = np.linalg.inv(Dm)                                               # [T,3,3]
        # G maps the 12 node coordinates to vec(F) (row-major F[i,j] = sum_a x_a[i] * dN_a[j])
        dN = np.concatenate([-self.Bm.sum(axis=1, keepdims=True), self.Bm], axis=1)  # [T,4,3]: grad of shape fn
        G = np.zeros((len(tets), 9, 12))
        for a in range(4):
            for i in range(3):
                G[:, 3 * i:3 * i + 3, 3 * a + i] = dN[:, a, :]
        self.G = G
        self.K0 = 2.0 * self.mu * self.vol[:, None, None] * np.einsum("tki,tkj->tij", G, G)
        self.assembler = SparseAssembler(dofs3(tets), 3 * len(nodes))

    def deformation(self, y):
        Ds = np.transpose(y[self.tets[:, 1:]] - y[self.tets[:, :1]], (0, 2, 1))
        return Ds @ self.Bm

    @staticmethod
    def rotations(F):
        """Rotation part of each F (polar decomposition) by scaled Newton iteration, which is
        fully vectorised; the few inverted or degenerate elements fall back to an SVD."""
        R = F.copy()
        det = np.linalg.det(R)
        ok = det > 1e-6 * np.abs(F).max(axis=(1, 2)) ** 3
        for _ in range(8):
            cof = np.stack([np.cross(R[:, 1], R[:, 2]), np.cross(R[:, 2], R[:, 0]), np.cross(R[:, 0], R[:, 1])], axis=1)
            d = np.einsum("ti,ti->t", R[:, 0], cof[:, 0])
            ok &= d > 0
            inv_t = cof / np.where(ok, d, 1.0)[:, None, None]            # R^{-T}
            gamma = np.sqrt(np.linalg.norm(inv_t, axis=(1, 2)) / np.maximum(np.linalg.norm(R, axis=(1, 2)), 1e-30))
            R = np.where(ok[:, None, None], 0.5 * (gamma[:, None, None] * R + inv_t / gamma[:, None, None]), R)
        bad = ~ok
        if bad.any():
            U, _, Vt = np.linalg.svd(F[bad])
            Rb = U @ Vt
            neg = np.linalg.det(Rb) < 0
            U[neg, :, 2] *= -1
            Rb[neg] = U[neg] @ Vt[neg]
            R[bad] = Rb
        return R

    def energy_grad_hess(self, y, need_hess=True):
        F = self.deformation(y)
        R = self.rotations(F)
        S = F - R
        tr = np.einsum("tij,tij->t", R, F) - 3.0
        psi = self.mu * np.einsum("tij,tij->t", S, S) + 0.5 * self.lam * tr ** 2
        P = 2.0 * self.mu * S + self.lam * tr[:, None, None] * R
        g_e = self.vol[:, None] * np.einsum("tki,tk->ti", self.G, P.reshape(-1, 9))
        grad = np.zeros(y.size)
        np.add.at(grad, dofs3(self.tets).ravel(), g_e.ravel())
        energy = float(np.dot(self.vol, psi))
        if not need_hess:
            return energy, grad, None
        r = np.einsum("tki,tk->ti", self.G, R.reshape(-1, 9))
        g_twist, tau = self.twist_modes(F, R, tr)
        blocks = self.K0 + self.vol[:, None, None] * (
            self.lam * r[:, :, None] * r[:, None, :]
            + np.transpose(g_twist, (0, 2, 1)) @ ((tau - 2.0 * self.mu)[:, :, None] * g_twist))
        return energy, grad, self.assembler.assemble(blocks)

    def twist_modes(self, F, R, tr):
        """The rotation-derivative part of the Hessian, in closed form and clamped.

        dP/dF = 2 mu I + lam r r^T + (lam (tr S - 3) - 2 mu) dR/dF, r = vec(R). dR/dF acts only on
        the three twist directions dF = R [u]x / sqrt(2), where it is 2 (tr(S) I - S)^-1
        (S = R^T F; the eigenvalues of tr(S) I - S are the pairwise sums of singular values).
        So dP/dF has eigenvalues 2 mu + 2 coef / (s_j + s_k) on the twists, 2 mu + 3 lam on r and
        2 mu elsewhere; the twist ones are clamped at zero (compression can make them negative).
        Returns the twist directions mapped to node coordinates [T,3,12] and their clamped
        eigenvalues [T,3]."""
        S = np.transpose(R, (0, 2, 1)) @ F
        S = 0.5 * (S + np.transpose(S, (0, 2, 1)))
        A = np.einsum("tii->t", S)[:, None, None] * np.eye(3) - S
        a_val, a_vec = np.linalg.eigh(A)
        scale = np.linalg.norm(F, axis=(1, 2)) / np.sqrt(3.0)
        a_val = np.maximum(a_val, 1e-2 * np.maximum(scale, 1e-12)[:, None])   # inverted elements
        coef = self.lam * tr - 2.0 * self.mu
        tau = np.maximum(2.0 * self.mu + 2.0 * coef[:, None] / a_val, 0.0)
        q = np.transpose(a_vec, (0, 2, 1))                                     # [T,k,3]
        zero = np.zeros_like(q[..., 0])
        qx = np.stack([np.stack([zero, -q[..., 2], q[..., 1]], -1),
                       np.stack([q[..., 2], zero, -q[..., 0]], -1),
                       np.stack([-q[..., 1], q[..., 0], zero], -1)], axis=-2)  # [T,k,3,3]
        t = (R[:, None] @ qx).reshape(len(F), 3, 9) / np.sqrt(2.0)
        return t @ self.G, tau


class ClothModel:
    """Edge springs (stretch + shear through the triangulation) and quadratic bending."""

    def __init__(self, rest, faces, stretch, bending):
        edges = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
        self.edges, inv = np.unique(edges, axis=0, return_inverse=True)
        inv = inv.ravel()
        self.rest_len = np.linalg.norm(rest[self.edges[:, 1]] - rest[self.edges[:, 0]], axis=1)
        area = triangle_areas(rest, faces)
        edge_area = np.bincount(inv, weights=np.tile(area / 3.0, 3), minlength=len(self.edges))
        # a membrane of modulus `stretch` (N/m) stores ~ stretch * area * strain^2 / 2 per edge
        self.k = stretch * edge_area / np.maximum(self.rest_len, 1e-12) ** 2
        self.assembler = SparseAssembler(dofs3(self.edges), rest.size)
        self.bending = self._bending_matrix(rest, faces, self.edges, inv) * bending
        self.rest = rest

    @staticmethod
    def _bending_matrix(x, faces, edges, inv):
        n = len(x)
        f_of_edge = [[] for _ in range(len(edges))]
        for fi, e in enumerate(inv.reshape(3, -1).T):
            for ei in e:
                f_of_edge[ei].append(fi)
        rows, cols, vals = [], [], []

        def cot(a, b):
            return np.dot(a, b) / max(np.linalg.norm(np.cross(a, b)), 1e-12)

        for ei, fs in enumerate(f_of_edge):
            if len(fs) != 2:
                continue
            i0, i1 = edges[ei]
            o = [int(np.setdiff1d(faces[f], [i0, i1])[0]) for f in fs]
            x0, x1, x2, x3 = x[i0], x[i1], x[o[0]], x[o[1]]
            e0, e1, e2, e3, e4 = x1 - x0, x2 - x0, x3 - x0, x2 - x1, x3 - x1
            c01, c02 = cot(e0, e1), cot(e0, e2)
            c03, c04 = cot(-e0, e3), cot(-e0, e4)
            K = np.array([c03 + c04, c01 + c02, -c01 - c03, -c02 - c04])
            a = 0.5 * (np.linalg.norm(np.cross(e0, e1)) + np.linalg.norm(np.cross(e0, e2)))
            Q = 3.0 / max(a, 1e-12) * np.outer(K, K)
            idx = [i0, i1, o[0], o[1]]
            for p in range(4):
                for q in range(4):
                    rows.append(idx[p]); cols.append(idx[q]); vals.append(Q[p, q])
        Q = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
        return sp.kron(Q, sp.identity(3), format="csr")

    def energy_grad_hess(self, y, need_hess=True):
        d = y[self.edges[:, 1]] - y[self.edges[:, 0]]
        length = np.maximum(np.linalg.norm(d, axis=1), 1e-12)
        stretch = length - self.rest_len
        energy = 0.5 * float(np.dot(self.k, stretch ** 2))
        f = (self.k * stretch / length)[:, None] * d                      # dE/d(x1)
        grad = np.zeros(y.size)
        g_e = np.concatenate([-f, f], axis=1)
        np.add.at(grad, dofs3(self.edges).ravel(), g_e.ravel())
        u = (y - self.rest).ravel()
        bu = self.bending @ u
        energy += 0.5 * float(u @ bu)
        grad += bu
        if not need_hess:
            return energy, grad, None
        nn = d[:, :, None] * d[:, None, :] / (length ** 2)[:, None, None]
        ratio = np.clip(1.0 - self.rest_len / length, 0.0, None)       # clamp: compression -> PSD
        H = self.k[:, None, None] * (nn + ratio[:, None, None] * (np.eye(3) - nn))
        blocks = np.block([[H, -H], [-H, H]])
        return energy, grad, self.assembler.assemble(blocks) + self.bending


# --------------------------------------------------------------------------- the simulator

class ReferenceSimulator:
    """Steps a `Setup` frame by frame. `iter_frames()` yields vertex positions [N,3]."""

    def __init__(self, setup: Setup, lattice_cells: int = DEFAULT_LATTICE_CELLS, substep: float = DEFAULT_SUBSTEP,
                 newton_iterations: int = 20, tolerance: float = 1e-5):
        self.setup = setup
        mat = setup.material
        rest = np.asarray(setup.rest, dtype=np.float64)
        n = len(rest)
        self.diagonal = float(np.linalg.norm(rest.max(axis=0) - rest.min(axis=0))) or 1.0
        self.direct_solve = mat["kind"] == "cloth"  # stiff springs: CG converges slowly
        if mat["kind"] == "cloth":
            self.W = sp.identity(n, format="csr")
            self.rest_dofs = rest
            area = lumped_vertex_areas(rest, setup.faces)
            area = np.where(area > 0, area, max(area.mean(), 1e-12) if area.any() else 1e-6)
            self.dof_mass = mat["density"] * area
            self.elastic = ClothModel(rest, np.asarray(setup.faces), mat["stiffness"], mat["bending"])
        else:
            lat = Lattice(rest, np.asarray(setup.faces), lattice_cells)
            self.lattice = lat
            self.W = lat.W
            self.rest_dofs = lat.nodes
            self.elastic = CorotatedFEM(lat.nodes, lat.tets, mat["stiffness"], mat["poisson"])
            self.dof_mass = np.zeros(len(lat.nodes))
            np.add.at(self.dof_mass, lat.tets.ravel(), np.repeat(mat["density"] * self.elastic.vol / 4.0, 4))
            self.dof_mass = np.maximum(self.dof_mass, 1e-9 * self.dof_mass.max())
        self.vertex_mass = self._vertex_masses(setup)
        self.W3 = sp.kron(self.W, sp.identity(3), format="csr")
        self.M3 = np.repeat(self.dof_mass, 3)
        self.substeps = max(1, int(math.ceil(setup.dt / substep - 1e-9)))
        self.h = setup.dt / self.substeps
        self.newton_iterations = newton_iterations
        self.tolerance = tolerance
        self.pin_k = pin_stiffness(setup.pin_weight, self.vertex_mass, mat, self.diagonal)
        self.pin_H = (self.W3.T @ sp.diags(np.repeat(self.pin_k, 3)) @ self.W3).tocsr()
        # initial state: fit the DOFs to frame 0 (least squares through W) and to velocity0
        self.y = self._fit_dofs(setup.x0)
        self.v = self._fit_dofs(setup.x0 + setup.v0) - self.y
        self.frame = 0

    def _vertex_masses(self, setup):
        if setup.vertex_mass is not None:
            return np.asarray(setup.vertex_mass, dtype=np.float64)
        # distribute the body's mass over vertices in proportion to their interpolation weights
        share = np.asarray(self.W.sum(axis=0)).ravel()
        m = self.W @ (self.dof_mass / np.maximum(share, 1e-12))
        return m * self.dof_mass.sum() / m.sum()

    def _fit_dofs(self, x):
        if self.W.shape[0] == self.W.shape[1] and (self.W != sp.identity(self.W.shape[0])).nnz == 0:
            return np.asarray(x, dtype=np.float64).copy()
        # The affine part of the vertex displacement moves every lattice node (trilinear
        # interpolation reproduces affine fields exactly, so a translation or rotation of the
        # vertices is matched everywhere, including interior nodes no vertex touches); the
        # remainder is matched by the minimal change of the nodes.
        rest = np.asarray(self.setup.rest, dtype=np.float64)
        u = np.asarray(x, dtype=np.float64) - rest
        c = rest.mean(axis=0)
        P = np.hstack([rest - c, np.ones((len(rest), 1))])
        affine, *_ = np.linalg.lstsq(P, u, rcond=None)
        node_u = np.hstack([self.rest_dofs - c, np.ones((len(self.rest_dofs), 1))]) @ affine
        residual = u - np.asarray(self.W @ node_u)
        A = (self.W.T @ self.W + 1e-8 * sp.identity(self.W.shape[1])).tocsc()
        b = self.W.T @ residual
        return self.rest_dofs + node_u + spla.spsolve(A, b).reshape(-1, 3)

    # ----- energies on DOFs y [n,3]; each returns (energy, gradient [3n], Hessian or None)

    def _external_forces(self, frame):
        s = self.setup
        f_vertices = self.vertex_mass[:, None] * np.asarray(s.external_accel(frame))
        f = self.W.T @ f_vertices + self.dof_mass[:, None] * np.asarray(s.gravity)[None, :]
        return np.asarray(f).ravel()

    def _floor_terms(self, x, x_prev, need_hess):
        z = self.setup.floor_z
        n = len(x)
        if z is None:
            return 0.0, np.zeros(3 * n), None
        pen = np.minimum(x[:, 2] - z, 0.0)
        contact = pen < 0
        k = self.vertex_mass * FLOOR_OMEGA2
        kf = self.vertex_mass * FLOOR_FRICTION / self.h ** 2
        slide = (x - x_prev)[:, :2]
        energy = 0.5 * float(np.sum(k * pen ** 2)) + 0.5 * float(np.sum((kf * contact)[:, None] * slide ** 2))
        g = np.zeros((n, 3))
        g[:, 2] = k * pen
        g[:, :2] = (kf * contact)[:, None] * slide
        H = None
        if need_hess:
            diag = np.stack([kf * contact, kf * contact, k * contact], axis=1).ravel()
            H = sp.diags(diag)
        return energy, g.ravel(), H

    def _step(self, frame):
        h = self.h
        y_n, v_n = self.y, self.v
        x_prev = np.asarray(self.W @ y_n)
        f_ext = self._external_forces(frame)
        target = np.asarray(self.setup.pin_target(frame + 1), dtype=np.float64)
        mat = self.setup.material
        _, _, K_n = self.elastic.energy_grad_hess(y_n)
        D = mat["air_damping"] * sp.diags(self.M3) + mat["damping"] * K_n
        y_pred = (y_n + h * v_n).ravel()
        Mh = self.M3 / h ** 2
        pin_rhs = self.W3.T @ (np.repeat(self.pin_k, 3) * target.ravel())

        def total(yf, need_hess=True):
            y = yf.reshape(-1, 3)
            x = np.asarray(self.W @ y)
            e_el, g_el, H_el = self.elastic.energy_grad_hess(y, need_hess)
            dy = yf - y_pred
            dv = yf - y_n.ravel()
            Ddv = D @ dv
            xr = x.ravel()
            pin_res = xr - target.ravel()
            e_pin = 0.5 * float(np.dot(np.repeat(self.pin_k, 3) * pin_res, pin_res))
            e_floor, g_floor, H_floor = self._floor_terms(x, x_prev, need_hess)
            energy = 0.5 * float(np.dot(Mh * dy, dy)) + e_el - float(np.dot(f_ext, yf)) + e_pin + e_floor \
                + 0.5 / h * float(np.dot(dv, Ddv))
            grad = Mh * dy + g_el - f_ext + (self.pin_H @ yf - pin_rhs) + self.W3.T @ g_floor + Ddv / h
            if not need_hess:
                return energy, grad, None
            H = sp.diags(Mh) + H_el + self.pin_H + D / h
            if H_floor is not None:
                H = H + self.W3.T @ H_floor @ self.W3
            return energy, grad, H.tocsc()

        yf = y_n.ravel() + h * v_n.ravel()
        for _ in range(self.newton_iterations):
            energy, grad, H = total(yf)
            step = -self._solve(H, grad)
            alpha, slope = 1.0, float(np.dot(grad, step))
            while alpha > 1e-4:
                e_new, _, _ = total(yf + alpha * step, need_hess=False)
                if e_new <= energy + 1e-4 * alpha * slope:
                    break
                alpha *= 0.5
            yf = yf + alpha * step
            if np.max(np.abs(alpha * step)) < self.tolerance * self.diagonal:
                break
        y_new = yf.reshape(-1, 3)
        self.v = (y_new - y_n) / h
        self.y = y_new

    def _solve(self, H, rhs):
        """Jacobi-preconditioned conjugate gradients; H is SPD and dominated by M/h^2, so it
        converges in tens of iterations. A direct solve is the fallback."""
        if self.direct_solve:
            return spla.spsolve(H.tocsc(), rhs, permc_spec="MMD_AT_PLUS_A")
        H = H.tocsr()
        inv_diag = 1.0 / H.diagonal()
        precond = spla.LinearOperator(H.shape, matvec=lambda r: inv_diag * r)
        x, info = spla.cg(H, rhs, rtol=1e-8, maxiter=400, M=precond)
        if info != 0:
            x = spla.spsolve(H.tocsc(), rhs, permc_spec="MMD_AT_PLUS_A")
        return x

    def vertices(self):
        return np.asarray(self.W @ self.y)

    def step_frame(self):
        for _ in range(self.substeps):
            self._step(self.frame)
        self.frame += 1
        x = self.vertices()
        if not np.all(np.isfinite(x)):
            raise SimulationFault(f"the reference simulation produced NaN at frame {self.frame}", self.frame, None)
        return x

    def iter_frames(self):
        yield self.vertices()
        for _ in range(self.setup.frames - 1):
            yield self.step_frame()

    # ----- diagnostics used by tests and evaluation

    def energy(self):
        """Kinetic + elastic + gravitational energy of the current state (J)."""
        kinetic = 0.5 * float(np.dot(self.M3, self.v.ravel() ** 2))
        elastic, _, _ = self.elastic.energy_grad_hess(self.y, need_hess=False)
        grav = -float(np.dot(self.dof_mass, self.y @ np.asarray(self.setup.gravity)))
        return kinetic + elastic + grav

    def solve_static(self, frame=0, iterations=50):
        """Equilibrium under gravity, forces and pins (Newton on the potential alone)."""
        f_ext = self._external_forces(frame)
        target = np.asarray(self.setup.pin_target(frame), dtype=np.float64).ravel()
        kp = np.repeat(self.pin_k, 3)
        yf = self.y.ravel().copy()
        for _ in range(iterations):
            _, g_el, H_el = self.elastic.energy_grad_hess(yf.reshape(-1, 3))
            grad = g_el - f_ext + self.W3.T @ (kp * (self.W3 @ yf - target))
            step = -spla.spsolve((H_el + self.pin_H).tocsc(), grad)
            yf += step
            if np.max(np.abs(step)) < 1e-10:
                break
        self.y = yf.reshape(-1, 3)
        self.v = np.zeros_like(self.y)
        return self.vertices()
