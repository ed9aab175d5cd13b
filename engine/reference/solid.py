"""Stable neo-Hookean elasticity on linear or quadratic tetrahedra.

Energy density (Smith, de Goes & Kim 2018, in the rest-stable form of Kim & Eberle 2022):

    psi(F) = mu/2 (|F|^2 - 3) - mu (J - 1) + (lam + mu)/2 (J - 1)^2,      J = det F

with Lame parameters mu, lam from Young's modulus and Poisson's ratio. Linearised this is exactly
linear elasticity, mu |eps|^2 + lam/2 tr(eps)^2 (hence lam + mu, not lam).

A second law, Mooney-Rivlin (`law: mooney_rivlin` in a scene), is a data source for learning a
rubber the learned engine's prior does not contain. A share s (`i2_share`) of the small-strain
shear modulus is carried by the second invariant:

    psi = (1 - s) psi_SNH + s [mu/2 (I2~ - 3) + kappa/2 (J - 1)^2],   I2~ = J^(-4/3) |cof F|^2,

kappa = lam + 2 mu / 3, so it linearises to the same linear elasticity (a hanging bar stretches
the same) and differs only at large strain, where the I2 term stiffens less in tension and more
in shear than neo-Hookean. Its Hessian is written out and projected per point (eigh of 9 x 9). It is smooth through
J = 0 and its volume term grows on both sides of J = 1, so an inverted element is pushed back:
unlike corotated elasticity there is no stable inverted (pancaked) state.

It is integrated with 4 points per quadratic tetrahedron (exact for the linear stiffness). A
mean-dilatation volume term (one J per element) was tried against locking and made bending
18 % too soft at nu = 0.3 (the linear through-thickness dilatation of a bent beam lost its
stiffness); full integration on quadratic elements locks only mildly: the cantilever of
docs/PHYSICS.md is within 4 % of Euler-Bernoulli for nu from 0 to 0.49.

Stable neo-Hookean resists compression with a bounded pressure (at most 2 mu + lam at J = 0), so a
soft, compressible body under a hard blow can still be crushed through J = 0 and then stay folded,
held by its neighbours. An inversion barrier closes that: below J = BARRIER_J an element's
volume term also gets the log barrier -k (J - J0)^2 log(J / J0) (zero with its first two
derivatives at J0, infinite at J = 0, k = lam + mu), and the simulator's line search never accepts
a step that takes a quadrature point to J <= 0. Like a real elastomer, whose pressure diverges as
its volume goes to zero, no element can then invert; at J > J0 (all ordinary motion) nothing
changes. A state that starts inverted (a user's crushed input) is solved without the barrier until
every point is upright again.

The Hessian comes from the analytic eigensystem of d2psi/dF2 (three twists, three flips and
three scalings in the SVD frame of F) with negative eigenvalues clamped to zero, so every element
block is positive semi-definite and Newton always descends.
"""
from __future__ import annotations

import numpy as np

from ..core.assembly import SparseAssembler, dofs3

# 4-point rule, exact for quadratic integrands (the stiffness of quadratic tetrahedra)
_A, _B = 0.5854101966249685, 0.1381966011250105
QUADRATURE = {
    1: (np.full((1, 4), 0.25), np.ones(1)),
    2: (np.array([[_A, _B, _B, _B], [_B, _A, _B, _B], [_B, _B, _A, _B], [_B, _B, _B, _A]]), np.full(4, 0.25)),
}
TET_EDGES = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))
# (i, j, k): the pair (i, j) spans a twist and a flip, k is the remaining singular value
PAIRS = ((1, 2, 0), (2, 0, 1), (0, 1, 2))
BARRIER_J = 0.5                 # the inversion barrier acts below half an element's rest volume


def lame(young, poisson):
    mu = young / (2.0 * (1.0 + poisson))
    lam = young * poisson / ((1.0 + poisson) * (1.0 - 2.0 * poisson))
    return mu, lam


def shape_gradients(order, bary, grad_bary):
    """Gradients of the element's shape functions at quadrature points [T,Q,k,3] from the
    barycentric coordinates of the points [Q,4] and the gradients of barycentrics [T,4,3]."""
    if order == 1:
        return np.broadcast_to(grad_bary[:, None], (len(grad_bary), len(bary), 4, 3)).copy()
    lam = bary[None, :, :, None]                                                  # [1,Q,4,1]
    g = grad_bary[:, None]                                                        # [T,1,4,3]
    corners = (4.0 * lam - 1.0) * g                                               # [T,Q,4,3]
    edges = [4.0 * (lam[:, :, a] * g[:, :, b] + lam[:, :, b] * g[:, :, a]) for a, b in TET_EDGES]
    return np.concatenate([corners, np.stack(edges, axis=2)], axis=2)


def cofactor(F):
    """dJ/dF = cof(F), for a stack of 3x3 matrices."""
    c0 = np.cross(F[..., 1, :], F[..., 2, :])
    c1 = np.cross(F[..., 2, :], F[..., 0, :])
    c2 = np.cross(F[..., 0, :], F[..., 1, :])
    return np.stack([c0, c1, c2], axis=-2)


def rotation_variant_svd(F):
    """F = U diag(s) V^T with U, V rotations (an inversion shows as a negative s[2])."""
    U, s, Vt = np.linalg.svd(F)
    V = np.swapaxes(Vt, -1, -2)
    du, dv = np.linalg.det(U) < 0, np.linalg.det(V) < 0
    U[du, :, 2] *= -1
    s[du, 2] *= -1
    V[dv, :, 2] *= -1
    s[dv, 2] *= -1
    return U, s, V


def projected_pointwise_hessian(F, mu, c, a, clamp=True):
    """PSD projection of the Hessian of psi over vec F (row-major), mu I + a g g^T + c H_J with
    g = vec cof F, H_J = d2J/dF2 (for psi: a = lam + mu, c = dpsi/dJ = mu (J - 2) + lam (J - 1)),
    from its analytic eigensystem in the SVD frame of F; per point: [P,9,9]."""
    U, s, V = rotation_variant_svd(F)
    J = s.prod(axis=-1)
    others = np.stack([s[:, 1] * s[:, 2], s[:, 2] * s[:, 0], s[:, 0] * s[:, 1]], axis=1)   # dJ/ds_i
    A = np.empty(F.shape[:-2] + (3, 3))
    for i in range(3):
        A[:, i, i] = mu + a * others[:, i] ** 2
    for i, j, k in PAIRS:
        A[:, i, j] = A[:, j, i] = s[:, k] * (a * J + c)
    a_val, a_vec = np.linalg.eigh(A)
    vals, mats = [a_val], []
    for m in range(3):                              # scaling modes U diag(e_m) V^T
        mats.append(np.einsum("pik,pk,pjk->pij", U, a_vec[:, :, m], V))
    twist_vals, flip_vals = [], []
    for i, j, k in PAIRS:
        ui, uj, vi, vj = U[:, :, i], U[:, :, j], V[:, :, i], V[:, :, j]
        a, b = np.einsum("pi,pj->pij", ui, vj), np.einsum("pi,pj->pij", uj, vi)
        mats.append((a - b) / np.sqrt(2.0))          # twist
        mats.append((a + b) / np.sqrt(2.0))          # flip
        twist_vals.append(mu + c * s[:, k])
        flip_vals.append(mu - c * s[:, k])
    vals = np.concatenate([a_val] + [np.stack([t, f], axis=1) for t, f in zip(twist_vals, flip_vals)], axis=1)
    Q = np.stack(mats, axis=-1).reshape(len(F), 9, 9)                 # columns: eigenvectors
    if clamp:
        vals = np.maximum(vals, 0.0)
    return (Q * vals[:, None, :]) @ np.swapaxes(Q, 1, 2)


def inversion_barrier(J, J0=BARRIER_J):
    """b(J) = -(J - J0)^2 log(J / J0) for 0 < J < J0 (else 0), with b' and b''; C2 at J0."""
    inside = J < J0
    Jc = np.where(inside, np.maximum(J, 1e-300), J0)
    d, log = Jc - J0, np.log(Jc / J0)
    b = -d ** 2 * log
    db = -2.0 * d * log - d ** 2 / Jc
    d2b = -2.0 * log - 4.0 * d / Jc + d ** 2 / Jc ** 2
    return b * inside, db * inside, d2b * inside


# Levi-Civita symbol: d2 det F / dF_ij dF_kl = eps_ikm eps_jln F_mn
LEVI_CIVITA = np.zeros((3, 3, 3))
for _i, _j, _k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
    LEVI_CIVITA[_i, _j, _k], LEVI_CIVITA[_i, _k, _j] = 1.0, -1.0


def second_invariant_terms(F, mu, kappa):
    """psi, dpsi/dF [P,3,3] and the projected Hessian [P,9,9] (row-major vec F) of
    mu/2 (J^(-4/3) I2 - 3) + kappa/2 (J - 1)^2, I2 = |cof F|^2 = (I1^2 - |F^T F|^2) / 2."""
    eye = np.eye(3)
    C = np.swapaxes(F, -1, -2) @ F
    B = F @ np.swapaxes(F, -1, -2)
    I1 = np.einsum("pij,pij->p", F, F)
    I2 = 0.5 * (I1 ** 2 - np.einsum("pij,pij->p", C, C))
    J = np.linalg.det(F)
    cof = cofactor(F)
    f = J ** (-4.0 / 3.0)
    dI2 = 2.0 * (I1[:, None, None] * F - F @ C)
    df = (-4.0 / 3.0) * (f / J)[:, None, None] * cof
    psi = 0.5 * mu * (f * I2 - 3.0) + 0.5 * kappa * (J - 1.0) ** 2
    P = 0.5 * mu * (f[:, None, None] * dI2 + I2[:, None, None] * df) + (kappa * (J - 1.0))[:, None, None] * cof
    outer = lambda a, b: np.einsum("pij,pkl->pijkl", a, b)
    d2I2 = 2.0 * (2.0 * outer(F, F) + np.einsum("p,ik,jl->pijkl", I1, eye, eye) - np.einsum("ik,plj->pijkl", eye, C)
                  - np.einsum("pil,pkj->pijkl", F, F) - np.einsum("pik,jl->pijkl", B, eye))
    d2J = np.einsum("ikm,jln,pmn->pijkl", LEVI_CIVITA, LEVI_CIVITA, F)
    d2f = ((28.0 / 9.0) * (f / J ** 2))[:, None, None, None, None] * outer(cof, cof) \
        - ((4.0 / 3.0) * f / J)[:, None, None, None, None] * d2J
    H = 0.5 * mu * (f[:, None, None, None, None] * d2I2 + outer(df, dI2) + outer(dI2, df)
                    + I2[:, None, None, None, None] * d2f) \
        + kappa * outer(cof, cof) + (kappa * (J - 1.0))[:, None, None, None, None] * d2J
    H = H.reshape(len(F), 9, 9)
    vals, vecs = np.linalg.eigh(0.5 * (H + np.swapaxes(H, 1, 2)))
    return psi, P, (vecs * np.maximum(vals, 0.0)[:, None, :]) @ np.swapaxes(vecs, 1, 2)


class StableNeoHookean:
    """Elastic energy of a tetrahedral mesh (`tets` [T,4] or [T,10]) over node positions;
    `i2_share` > 0: the Mooney-Rivlin law (module docstring)."""

    def __init__(self, nodes, tets, young, poisson, order=2, barrier=True, i2_share=0.0):
        self.tets, self.order = tets, order
        self.mu, self.lam = lame(young, poisson)
        self.i2_share = float(i2_share)
        self.barrier = barrier          # the simulator turns it off while a state is inverted
        corners = nodes[tets[:, :4]]
        Dm = np.transpose(corners[:, 1:] - corners[:, :1], (0, 2, 1))            # columns = edges
        self.vol = np.abs(np.linalg.det(Dm)) / 6.0
        Bm = np.linalg.inv(Dm)                                                     # rows: grad of barycentrics 1..3
        grad_bary = np.concatenate([-Bm.sum(axis=1, keepdims=True), Bm], axis=1)  # [T,4,3]
        bary, self.weights = QUADRATURE[order]
        self.dN = shape_gradients(order, bary, grad_bary)                          # [T,Q,k,3]
        self.wv = self.vol[:, None] * self.weights[None, :]                        # [T,Q]
        # G maps the element's node coordinates (a, m) to vec F (i, j): dF_ij/dx_am = delta_im dN_aj
        T, Q, k, _ = self.dN.shape
        G = np.zeros((T, Q, 3, 3, k, 3))
        for i in range(3):
            G[:, :, i, :, :, i] = np.swapaxes(self.dN, 2, 3)
        self.G = G.reshape(T, Q, 9, 3 * k)
        self.assembler = SparseAssembler(dofs3(tets), 3 * len(nodes))

    def deformation(self, y):
        return np.swapaxes(y[self.tets], 1, 2)[:, None] @ self.dN

    def energy_grad_hess(self, y, need_hess=True):
        """Energy, gradient [3n] and PSD Hessian (sparse); with the barrier on, a state with an
        inverted quadrature point has infinite energy (returned as (inf, None, None))."""
        mu, lam, s = self.mu, self.lam, self.i2_share
        F = self.deformation(y)                                                    # [T,Q,3,3]
        J = np.linalg.det(F)
        if self.barrier and J.min() <= 0.0:
            return np.inf, None, None
        cof = cofactor(F)
        psi = 0.5 * mu * (np.einsum("tqij,tqij->tq", F, F) - 3.0) - mu * (J - 1.0) + 0.5 * (lam + mu) * (J - 1.0) ** 2
        c = mu * (J - 2.0) + lam * (J - 1.0)                                       # coefficient of cof F
        a = lam + mu                                                               # ... and of cof F cof F^T
        psi, c, a, mu_n = (1.0 - s) * psi, (1.0 - s) * c, (1.0 - s) * a, (1.0 - s) * mu   # the neo-Hookean share
        if self.barrier:
            b, db, d2b = inversion_barrier(J)
            psi, c, a = psi + (lam + mu) * b, c + (lam + mu) * db, a + (lam + mu) * d2b
        P = mu_n * F + c[..., None, None] * cof
        if s > 0.0:
            psi2, P2, H2 = second_invariant_terms(F.reshape(-1, 3, 3), mu, lam + 2.0 * mu / 3.0)
            psi, P = psi + s * psi2.reshape(J.shape), P + s * P2.reshape(F.shape)
        energy = float(np.sum(self.wv * psi))
        g_e = (self.dN @ np.swapaxes(self.wv[..., None, None] * P, 2, 3)).sum(axis=1)   # [T,k,3]
        grad = np.bincount(dofs3(self.tets).ravel(), weights=g_e.ravel(), minlength=y.size)
        if not need_hess:
            return energy, grad, None
        T, Qn = J.shape
        a = np.broadcast_to(a, J.shape).ravel()
        H9 = projected_pointwise_hessian(F.reshape(-1, 3, 3), mu_n, c.ravel(), a).reshape(T, Qn, 9, 9)
        if s > 0.0:
            H9 = H9 + s * H2.reshape(T, Qn, 9, 9)
        HG = (self.wv[..., None, None] * H9) @ self.G                              # [T,Q,9,3k]
        k3 = self.G.shape[-1]
        blocks = np.swapaxes(self.G.reshape(T, Qn * 9, k3), 1, 2) @ HG.reshape(T, Qn * 9, k3)
        return energy, grad, self.assembler.assemble(blocks)

    def all_upright(self, y):
        return self.inverted_share(y) == 0.0

    def inverted_share(self, y):
        """Share of quadrature points with det F <= 0."""
        return float(np.mean(np.linalg.det(self.deformation(y)) <= 0.0))

    def volume_ratio(self, y):
        """Deformed over rest volume of the whole lattice body."""
        return float(np.sum(self.wv * np.linalg.det(self.deformation(y))) / self.vol.sum())
