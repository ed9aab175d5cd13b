"""Fitted cubature: which elements carry a reduced body's elastic energy, and with what weights.

The elastic energy of a body is an integral over all its elements (lattice cells of a solid,
triangles of a sheet). In a subspace of d coordinates it can be integrated with far fewer
elements, if their weights are chosen so the reduced force over typical poses matches the force
integrated over every element (An, Kim & James 2008, "Optimizing cubature for efficient
integration of subspace deformations"):

    minimise  sum_p | sum_k w_k f_k(q_p) - f_full(q_p) |^2 / |f_full(q_p)|^2,   w >= 0,

f_k(q) = G_k^T dpsi(local_k(q)) the reduced force of element k. Elements are added greedily
(those whose forces best explain what is left), the weights refitted by non-negative least
squares each time, until the relative error falls below `TOLERANCE` or `CAP` elements are used.

The poses are the body's own: its softest elastic modes at several amplitudes, each turned by a
random rotation (what a body does as it moves). (Poses from data are not used yet: the fit is
made at prepare, where a user's mesh has none.) The classical density
is used term by term (neo-Hookean's shear and volume terms, or the cloth membrane), so one set of
weights serves every Poisson ratio. The error reported (`Cubature.error`) is measured on other
poses than those fitted.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize

TOLERANCE = 0.02          # relative error of the reduced force on the fitted poses
CAP = 200                 # at most this many elements
POSES = 64                # fitted poses (fewer where there are many coordinates: ROWS); HELD_OUT more measure the error
ROWS = 12_500             # about this many rows of the fit at most (poses x density terms x (coordinates + 1))
HELD_OUT = 24
AMPLITUDES = (0.01, 0.03, 0.1, 0.2)   # RMS of |F - I| (solids) or of the edge strain (cloth)
MIN_J = 0.3               # a pose is scaled back until every element keeps det F above this


@dataclass
class Cubature:
    elements: np.ndarray   # [K] indices of the chosen elements
    weights: np.ndarray    # [K] their weights (the full body's volume or area is 1)
    error: float           # relative force error on held-out poses (RMS over poses)


# --------------------------------------------------------------------------- classical forces

def solid_terms(F):
    """Per-element energies [T,E] and stress dpsi/dF [T,E,9] of neo-Hookean's two terms (T = 2:
    shear mu(|F|^2/2 - 3/2 - log J), volume (log J)^2 / 2), F [E,3,3]."""
    cof = np.cross(np.roll(F, -1, axis=1), np.roll(F, -2, axis=1))
    J = np.einsum("ei,ei->e", F[:, 0], cof[:, 0])
    logJ = np.log(J)
    dlog = (cof / J[:, None, None]).reshape(len(F), 9)
    flat = F.reshape(len(F), 9)
    energy = np.stack([0.5 * (flat * flat).sum(-1) - 1.5 - logJ, 0.5 * logJ ** 2])
    stress = np.stack([flat - dlog, logJ[:, None] * dlog])
    return energy, stress


def triangle_edges(y):
    """The three edges [E,3,3] of triangles from their two first edges y = (x1 - x0, x2 - x0) [E,6]."""
    return np.stack([y[:, :3], y[:, 3:], y[:, 3:] - y[:, :3]], axis=1)


def cloth_terms(y, rest_lengths):
    """Membrane energy [1,E] and dpsi/dy [1,E,6] from a triangle's two edges y [E,6]."""
    e = triangle_edges(y)
    length = np.maximum(np.linalg.norm(e, axis=-1), 1e-12)
    strain = length / rest_lengths - 1.0
    dedge = (strain / (3.0 * rest_lengths * length))[..., None] * e       # d psi / d edge  [E,3,3]
    grad = np.concatenate([dedge[:, 0] - dedge[:, 2], dedge[:, 1] + dedge[:, 2]], axis=1)
    return ((strain ** 2).sum(-1) / 6.0)[None], grad[None]


class ElementForces:
    """Reduced forces of every element at a pose: local coordinates offset + G q of each element
    ([E,m] + [E,m,d] q), the classical density's terms at them, pulled back by G^T."""

    def __init__(self, kind, G, offset, rest_lengths=None):
        self.kind, self.G, self.offset, self.rest_lengths = kind, G, offset, rest_lengths

    def local(self, q):
        return self.offset + (self.G.reshape(-1, self.G.shape[2]) @ q).reshape(self.offset.shape)

    def valid(self, q) -> bool:
        if self.kind != "solid":
            return True
        F = self.local(q).reshape(-1, 3, 3)
        return bool(np.linalg.det(F).min() > MIN_J)

    def amplitude(self, q) -> float:
        """RMS over elements of |F - I| / sqrt(3) (solids) or of the edge strain (cloth): a uniform
        stretch by e measures e either way."""
        y = self.local(q)
        if self.kind == "solid":
            return float(np.sqrt(3.0 * np.mean((y - self.offset) ** 2)))
        strain = np.linalg.norm(triangle_edges(y), axis=-1) / self.rest_lengths - 1.0
        return float(np.sqrt(np.mean(strain ** 2)))

    def at(self, q):
        """(energies [T,E], reduced forces [T,E,d]) at pose q."""
        y = self.local(q)
        if self.kind == "solid":
            energy, grad = solid_terms(y.reshape(-1, 3, 3))
        else:
            energy, grad = cloth_terms(y, self.rest_lengths)
        return energy, np.matmul(grad.transpose(1, 0, 2), self.G).transpose(1, 0, 2)   # per element, BLAS


def rest_stiffness(forces: ElementForces, full_weights) -> np.ndarray:
    """The reduced small-strain stiffness [d,d] of full integration: linear elasticity at
    nu = 0.3 for solids, the membrane for cloth (which leaves bending free: a small ridge keeps
    bending modes in the poses, at amplitudes set by their strain)."""
    G = forces.G
    if forces.kind == "solid":
        mu, lam = 1.0 / 2.6, 0.3 / (1.3 * 0.4)
        C = mu * (np.eye(9) + np.eye(9).reshape(3, 3, 3, 3).transpose(0, 1, 3, 2).reshape(9, 9))
        C += lam * np.outer(np.eye(3).ravel(), np.eye(3).ravel())
        CG = np.einsum("mn,end->emd", C, G)
        K = np.einsum("e,emd,emf->df", full_weights, G, CG, optimize=True)
    else:
        e = triangle_edges(forces.offset)
        a = e / (np.linalg.norm(e, axis=-1, keepdims=True) * forces.rest_lengths[..., None])   # d strain_e / d edge_e
        K = np.zeros((G.shape[2], G.shape[2]))
        for k, (c0, c1) in enumerate(((1.0, 0.0), (0.0, 1.0), (-1.0, 1.0))):   # edge k = c0 y[:3] + c1 y[3:]
            v = np.einsum("em,emd->ed", np.concatenate([c0 * a[:, k], c1 * a[:, k]], axis=1), G)
            K += (full_weights[:, None] * v).T @ v / 3.0            # a product, not einsum's loop: 0.5 s at 264 coordinates
        K += 1e-3 * np.abs(np.linalg.eigvalsh(K)).max() * np.eye(len(K))
    return 0.5 * (K + K.T)


# --------------------------------------------------------------------------- poses

def random_rotation(rng) -> np.ndarray:
    q = rng.normal(size=4)
    a, b, c, d = q / np.linalg.norm(q)
    return np.array([[a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c)],
                     [2 * (b * c + a * d), a * a - b * b + c * c - d * d, 2 * (c * d - a * b)],
                     [2 * (b * d - a * c), 2 * (c * d + a * b), a * a - b * b - c * c + d * d]])


def modal_poses(forces: ElementForces, stiffness, node_basis, nodes, node_mass, count, seed):
    """`count` poses [count,d]: random mixes of the softest elastic modes (the modes of
    `stiffness`, weighted by 1/sqrt(eigenvalue), as thermal motion is), scaled to one of
    AMPLITUDES and turned by a random rotation about the centre of mass."""
    rng = np.random.default_rng(seed)
    vals, vecs = np.linalg.eigh(stiffness)
    elastic = vals > 1e-8 * vals.max()
    vals, vecs = vals[elastic], vecs[:, elastic]
    centre = (node_mass[:, None] * nodes).sum(axis=0)
    flat = node_basis.reshape(-1, node_basis.shape[2])
    shapes, turns = [], []
    for i in range(count):
        # K^(-1/2) z through the modes and back: unlike mixing the modes with random numbers, it
        # does not depend on the signs eigh gives them (nor on turns within equal eigenvalues)
        q = vecs @ ((vecs.T @ rng.normal(size=len(stiffness))) / np.sqrt(vals))
        q *= AMPLITUDES[i % len(AMPLITUDES)] / max(forces.amplitude(q), 1e-300)
        while not forces.valid(q):
            q *= 0.7
        shapes.append(q)
        turns.append(random_rotation(rng))
    # all poses through the basis at once (a sheet's basis is 600 MB at 100k vertices: read per pose it was 5 s)
    x = (nodes - centre)[None] + (flat @ np.array(shapes).T).T.reshape(count, -1, 3)
    moved = x @ np.array(turns).transpose(0, 2, 1) + (centre - nodes)[None]      # rotated nodes: still in the subspace
    return (flat.T @ (np.repeat(node_mass, 3)[:, None] * moved.reshape(count, -1).T)).T   # mass-orthonormal projection


# --------------------------------------------------------------------------- the fit

def _rows(forces: ElementForces, full_weights, poses):
    """The least-squares system of the fit: per pose and density term, the elements' forces
    and energies (columns) against the fully integrated ones (right-hand side), each block
    scaled by the full force's norm."""
    blocks, rhs = [], []
    for q in poses:
        energy, f = forces.at(q)                                   # [T,E], [T,E,d]
        for t in range(len(f)):
            target = full_weights @ f[t]
            scale = np.linalg.norm(target)
            if scale <= 1e-300:
                continue
            e_target = full_weights @ energy[t]
            e_scale = abs(e_target) if abs(e_target) > 1e-300 else 1.0
            blocks.append(np.concatenate([f[t].T / scale, energy[t][None] / e_scale]))
            rhs.append(np.concatenate([target / scale, [e_target / e_scale]]))
    return np.concatenate(blocks), np.concatenate(rhs)


COMPRESS_COLUMNS = 1024


def greedy_nnls(A, b, tolerance=TOLERANCE, cap=CAP):
    """Columns of A and non-negative weights w with |A w - b| <= tolerance |b| (or `cap` columns):
    the best-correlated columns with the residual are added, a few at a time, and all weights
    refitted by NNLS. Returns (indices, weights)."""
    if A.shape[1] <= COMPRESS_COLUMNS:
        # the same fit on a square system: R of the QR factorisation of [A b] keeps every inner
        # product (with many columns the factorisation costs more than the whole greedy loop)
        R = scipy.linalg.qr(np.column_stack([A, b]), mode="r")[0][:A.shape[1] + 1]
        A, b = R[:, :-1], R[:, -1]
    norms = np.maximum(np.linalg.norm(A, axis=0), 1e-300)
    chosen_qr = GrowingQR(len(b), min(cap, A.shape[1]), b)
    chosen = np.zeros(0, dtype=np.int64)
    w = np.zeros(0)
    residual = b
    target = np.linalg.norm(b)
    while len(chosen) < chosen_qr.most:
        score = (A.T @ residual) / norms
        score[chosen] = -np.inf
        add = max(1, len(chosen) // 32)
        picks = np.argsort(-score)[:add]
        picks = picks[score[picks] > 0][:chosen_qr.most - len(chosen)]
        if not len(picks):
            break
        for j in picks:
            chosen_qr.append(A[:, j])
        chosen = np.concatenate([chosen, picks])
        w, _ = scipy.optimize.nnls(*chosen_qr.system(), maxiter=50 * len(chosen))
        residual = b - A[:, chosen] @ w
        if np.linalg.norm(residual) <= tolerance * target:
            break
    keep = w > 0
    return chosen[keep], w[keep]


class GrowingQR:
    """Q R of the chosen columns, grown a column at a time (Gram-Schmidt, done twice so Q stays
    orthonormal to rounding), and Q^T b: NNLS on the k x k system (R, Q^T b) has the same solution as on
    the tall one (A[:, chosen], b), and costs a fraction of it (the 1k sheet's fit 2.7 -> 0.9 s)."""

    def __init__(self, rows, most, b):
        self.most, self.b, self.k = most, b, 0
        self.Q = np.zeros((rows, most), order="F")
        self.R = np.zeros((most, most))
        self.Qb = np.zeros(most)

    def append(self, a):
        k, Q = self.k, self.Q[:, :self.k]
        r = Q.T @ a
        v = a - Q @ r
        again = Q.T @ v
        v -= Q @ again
        length = np.linalg.norm(v)
        self.R[:k, k], self.R[k, k] = r + again, length
        self.Q[:, k] = v / length if length > 0 else 0.0
        self.Qb[k] = self.Q[:, k] @ self.b
        self.k += 1

    def system(self):
        return self.R[:self.k, :self.k], self.Qb[:self.k]


def force_error(forces: ElementForces, full_weights, elements, weights, poses) -> float:
    """RMS over poses and density terms of |fitted force - full force| / |full force|."""
    errors = []
    for q in poses:
        _, f = forces.at(q)
        for t in range(len(f)):
            full = full_weights @ f[t]
            scale = np.linalg.norm(full)
            if scale > 1e-300:
                errors.append(np.linalg.norm(weights @ f[t][elements] - full) / scale)
    return float(np.sqrt(np.mean(np.square(errors)))) if errors else 0.0


def fit_cubature(forces: ElementForces, full_weights, stiffness, node_basis, nodes, node_mass,
                 tolerance=TOLERANCE, cap=CAP, seed=0) -> Cubature:
    """Elements and weights whose reduced force matches full integration (`full_weights` [E],
    summing to 1) over the body's modal poses."""
    count = int(np.clip(ROWS // (2 * (node_basis.shape[2] + 1)), 16, POSES))
    poses = modal_poses(forces, stiffness, node_basis, nodes, node_mass, count, seed)
    A, b = _rows(forces, full_weights, poses)
    elements, weights = greedy_nnls(A, b, tolerance, cap)
    order = np.argsort(elements)
    elements, weights = elements[order], weights[order]
    held_out = modal_poses(forces, stiffness, node_basis, nodes, node_mass, HELD_OUT, seed + 1)
    return Cubature(elements, weights, force_error(forces, full_weights, elements, weights, held_out))
