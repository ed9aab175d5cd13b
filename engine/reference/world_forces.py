"""The reference simulator's interactions with the world around its body: collision objects and
force fields (Blender's Collision physics and effectors; `engine.core.colliders`,
`engine.core.fields`, issue 13). The learned engine's counterpart is
`engine/learned/latent_world_forces.py`; both apply the same laws with the same constants.

Colliders -- `collider_terms(...)`, one more term of the incremental potential, modelled on the
floor (`ReferenceSimulator._floor_terms`): every point (mesh vertex) closer to a collider's
surface than its Thickness Outer (or inside a closed collider, or less than Thickness Inner
behind an open one) is pushed out by the penalty

    E_n = 1/2 k sum_i m_i (thickness - d_i)^2,   k = FLOOR_OMEGA2 (the floor's 160 Hz spring),

d_i the signed distance to the collider where it is at the END of the substep (a fractional
frame: a moving collider is interpolated linearly between its stored frames). Friction is
Coulomb's law with the collider's own coefficient (`engine.core.friction`, as at the floor):
`core.friction.friction_contacts` finds the contacts at the substep's start and `friction_terms` adds their
dissipation potential, the slide taken relative to the collider's own motion over the substep.
Gradient and Gauss-Newton Hessian (k m n n^T per contact) are per point; the simulator
pulls them back to its degrees of freedom through W. The geometry (closest point, normal,
inside test) is recomputed at every trial state of the Newton iteration. As with the floor, a
solid's lattice nodes feel the colliders too (with their own masses): the lattice cells are the
simulated body, and a node left to sink into a collider under a vertex held out of it folds the
cell between them (measured: a rubber ball on a box sagged to half its height that way).
The collider's Damping is not used (backward Euler already removes the approach speed).

Force fields -- `external_accel(setup, frame, x, v, cloth)`: the painted accelerations
(`setup.external_accel`) plus `setup.effectors` evaluated at the vertices' current positions,
velocities and area-weighted normals (on the surface, as Blender's cloth, for cloth; as points
for solids). This is where the reference simulator evaluates a force field. The simulator calls it at the start of every substep: explicit, exact at the
vertices (no sampling), so a very strong Drag (strength x substep > 2) can overshoot.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..core.colliders import Collider, point_motion, shell_contacts
from ..core.fields import total_accel, vertex_normals
from ..core.friction import FrictionContacts, coulomb_terms
from ..core.physics import FLOOR_OMEGA2


# --------------------------------------------------------------------------- colliders

def contacts(c: Collider, x: np.ndarray, frame: float, frame_prev: float | None = None):
    """Contacts of points x [P,3] with collider c at (fractional) `frame`:
    (indices [A], signed distance [A], outward normal [A,3], displacement of the collider's closest
    point from `frame_prev` to `frame` [A,3]) for the active points, or None when none is."""
    found = shell_contacts(x, c, frame)
    if found is None:
        return None
    idx, sd, n, closest, tri = found
    if c.frames > 1 and frame_prev is not None:
        verts = c.at(frame)
        disp = point_motion(closest, tri, verts, verts - c.at(frame_prev))
    else:
        disp = np.zeros((len(idx), 3))
    return idx, sd, n, disp


def collider_terms(colliders, x, mass, frame, need_hess=True):
    """(energy, gradient [3P], Hessian (sparse 3P x 3P) or None) of the collider penalty on
    points x [P,3], summed over `colliders` at the substep's end `frame` (fractional)."""
    P = len(x)
    energy, g = 0.0, np.zeros((P, 3))
    rows, blocks = [], []
    for c in colliders:
        geo = contacts(c, x, frame)
        if geo is None:
            continue
        idx, sd, n, _ = geo
        m = mass[idx]
        k = m * FLOOR_OMEGA2
        depth = c.thickness_outer - sd
        energy += 0.5 * float(np.sum(k * depth ** 2))
        np.add.at(g, idx, -(k * depth)[:, None] * n)
        nn = np.einsum("pi,pj->pij", n, n)
        block = k[:, None, None] * nn
        rows.append(idx)
        blocks.append(block)
    H = block_diagonal(np.concatenate(rows), np.concatenate(blocks), P) if need_hess and rows else None
    return energy, g.ravel(), H


def block_diagonal(idx, blocks, P):
    """Sparse 3P x 3P matrix with 3x3 `blocks` [A,3,3] at points `idx` [A] (repeats summed)."""
    r = (3 * idx[:, None, None] + np.arange(3)[None, :, None]) + np.zeros((1, 1, 3), dtype=np.int64)
    cidx = (3 * idx[:, None, None] + np.arange(3)[None, None, :]) + np.zeros((1, 3, 1), dtype=np.int64)
    return sp.coo_matrix((blocks.ravel(), (r.ravel(), cidx.ravel())), shape=(3 * P, 3 * P)).tocsr()


def friction_terms(contacts: FrictionContacts | None, x, x_prev, h, need_hess=True):
    """(energy, gradient [3P], Hessian or None) of Coulomb friction at points x [P,3] over a
    substep of h from x_prev (`engine.core.friction.coulomb_terms`)."""
    P = len(x)
    if contacts is None:
        return 0.0, np.zeros(3 * P), None
    energy, g_contacts, H_blocks = coulomb_terms(contacts, x, x_prev, h)
    g = np.zeros((P, 3))
    np.add.at(g, contacts.index, g_contacts)
    return energy, g.ravel(), (block_diagonal(contacts.index, H_blocks, P) if need_hess else None)


# --------------------------------------------------------------------------- force fields

def has_fields(setup) -> bool:
    return bool(setup.effectors)


def external_accel(setup, frame: int, x, v, cloth: bool) -> np.ndarray:
    """Acceleration per vertex [N,3] (m/s^2) applied over the step from `frame`: the painted part
    (`setup.external_accel`) and the force fields evaluated at the vertices' current positions x,
    velocities v and normals (see the module docstring). Without `setup.effectors` this is
    `setup.external_accel(frame)` unchanged."""
    a = np.asarray(setup.external_accel(frame), dtype=np.float64)
    effectors = setup.effectors
    if not effectors:
        return a
    normals = vertex_normals(x, setup.faces)
    return a + total_accel(effectors, frame, x, v, normals, surface=cloth)
