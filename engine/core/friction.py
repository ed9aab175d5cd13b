"""Coulomb friction: the one law both engines apply at the floor and at collision objects.

A contact with normal force lambda (taken at the step's start: lagged, as in IPC, Li et al. 2020)
and coefficient mu adds to the step's incremental potential the dissipation potential

    D(u) = mu lambda f0(|u|),   u = the contact's tangential slide over the step (relative to the surface),

with f0(y) = y beyond eps = FRICTION_SLIP_SPEED * h and a cubic below it (C1: f0'(0) = 0, f0'(eps) = 1).
Its gradient is the Coulomb force mu lambda u / |u| while the contact slides faster than the slip
speed (sliding regime) and a stiff spring below it (static regime: a contact held by friction
creeps at most at the slip speed times the share of mu lambda it needs). A force, not a share of
the slide per step, so the law is the same whatever the step.

The functions work on numpy arrays and torch tensors alike (`.clip` and arithmetic only).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .colliders import point_motion, shell_contacts
from .physics import FLOOR_OMEGA2

FRICTION_SLIP_SPEED = 1.0e-3   # m/s: slower slides are static friction (a body held on a slope creeps below this)


def smoothed_slide(y, eps):
    """(f0(y), f1(y) / y, f1'(y)) for slide lengths y >= 0 and threshold eps > 0: the potential
    per unit mu lambda, the gradient's factor on u, and the curvature along u."""
    s = (y / eps).clip(max=1.0)
    f0 = eps * (s * s - s ** 3 / 3.0 + 1.0 / 3.0) + (y - eps * s)
    f1_over_y = (2.0 - s) / (eps * (y / eps).clip(min=1.0))
    f1_prime = 2.0 * (1.0 - s) / eps
    return f0, f1_over_y, f1_prime


@dataclass
class FrictionContacts:
    """The contacts of one step, found at its start (lagged): point `index` [A], surface `normal`
    [A,3], `weight` = mu * lambda [A] and `surface_slide` [A,3], the surface's own displacement
    over the step at the contact (zero for the floor and static colliders)."""
    index: np.ndarray
    normal: np.ndarray
    weight: np.ndarray
    surface_slide: np.ndarray

    @staticmethod
    def join(parts) -> "FrictionContacts | None":
        parts = [p for p in parts if p is not None and len(p.index)]
        if not parts:
            return None
        return FrictionContacts(*(np.concatenate([getattr(p, k) for p in parts])
                                  for k in ("index", "normal", "weight", "surface_slide")))


def floor_contacts(floor_z, mu: float, points, stiffness) -> FrictionContacts | None:
    """Points [P,3] below the floor (its height `floor_z`: a number, or one per point) with penalty
    `stiffness` [P] (N/m, or the engine's units): the normal force of each is stiffness * depth."""
    if floor_z is None or mu <= 0.0:
        return None
    depth = floor_z - np.asarray(points)[:, 2]
    idx = np.nonzero(depth > 0.0)[0]
    normal = np.tile([0.0, 0.0, 1.0], (len(idx), 1))
    return FrictionContacts(idx, normal, mu * stiffness[idx] * depth[idx], np.zeros((len(idx), 3)))


def collider_contacts(colliders, points, stiffness, frame: float, motion) -> FrictionContacts | None:
    """Points [P,3] in the thickness shells of `colliders` (each with its own coefficient) at
    `frame`; `motion(c)`: the collider's vertex displacements [V,3] over the step."""
    parts = []
    for c in colliders:
        if c.friction <= 0.0:
            continue
        found = shell_contacts(points, c, frame)
        if found is None:
            continue
        idx, sd, n, closest, tri = found
        slide = np.zeros((len(idx), 3)) if c.frames == 1 else point_motion(closest, tri, c.at(frame), motion(c))
        parts.append(FrictionContacts(idx, n, c.friction * stiffness[idx] * (c.thickness_outer - sd), slide))
    return FrictionContacts.join(parts)


def friction_contacts(setup, points, mass, frame, frame_start, frame_end, below=0.0) -> FrictionContacts | None:
    """The floor's and the colliders' friction contacts of a setup's points [P,3] (masses [P]), found
    at `frame`, for the substep from `frame_start` to `frame_end`; each point meets the floor `below`
    metres under it ([P] or a number: the reference's `node_depth_outside`). Both engines' full-space
    solves find their contacts here (the reference, a solid's fine level)."""
    k = mass * FLOOR_OMEGA2
    floor = floor_contacts(None if setup.floor_z is None else setup.floor_z - below, setup.floor_friction, points, k)
    if not setup.colliders:
        return floor
    cols = collider_contacts(setup.colliders, points, k, frame, lambda c: c.at(frame_end) - c.at(frame_start))
    return FrictionContacts.join([floor, cols])


def changed(old, new, share: float = 0.1) -> bool:
    """Whether the contacts' total mu lambda moved by more than `share` (a new contact, a lost one)."""
    a = 0.0 if old is None else float(old.weight.sum())
    b = 0.0 if new is None else float(new.weight.sum())
    return abs(a - b) > share * max(a, b)


def coulomb_terms(contacts: FrictionContacts, x, x_prev, h: float, need_hess=True):
    """(energy, gradient [A,3], Hessian blocks [A,3,3] or None) of the friction potential at points
    x [P,3] (metres; positions at the step's start: x_prev), per contact."""
    i = contacts.index
    return slide_terms(x[i] - x_prev[i] - contacts.surface_slide, contacts.normal, contacts.weight, h, need_hess)


def slide_terms(slide, normal, weight, h: float, need_hess=True, majorize=False):
    """(energy, gradient [A,3], Hessian blocks [A,3,3] or None) of the friction potential of
    contacts that slid by `slide` [A,3] over a step h (each relative to what it touches), with unit
    normals [A,3] and weights mu lambda [A]: the gradient and Hessian are with respect to the slide.
    `majorize`: instead of the Hessian, mu lambda f1(|u|)/|u| (I - n n^T), the curvature of the
    quadratic that lies above the potential and touches it at u (IRLS): never less than the exact
    curvature (docs/DESIGN_NOTES.md §5)."""
    n = normal
    u = slide - np.einsum("ai,ai->a", slide, n)[:, None] * n
    y = np.linalg.norm(u, axis=1)
    f0, f1_over_y, f1_prime = smoothed_slide(y, FRICTION_SLIP_SPEED * h)
    w = weight
    if not need_hess:
        return float(np.sum(w * f0)), (w * f1_over_y)[:, None] * u, None
    tangent = np.eye(3)[None] - np.einsum("ai,aj->aij", n, n)
    if majorize:
        return float(np.sum(w * f0)), (w * f1_over_y)[:, None] * u, (w * f1_over_y)[:, None, None] * tangent
    unit = u / np.maximum(y, 1e-300)[:, None]
    uu = np.einsum("ai,aj->aij", unit, unit)
    H = w[:, None, None] * (f1_prime[:, None, None] * uu + f1_over_y[:, None, None] * (tangent - uu))
    return float(np.sum(w * f0)), (w * f1_over_y)[:, None] * u, H


def coordinate_stiffness(contacts: FrictionContacts, x, x_prev, h: float) -> np.ndarray:
    """[A,3] each contact's friction curvature at points x [P,3] (start of step x_prev), as the
    diagonal a preconditioner solved one coordinate at a time takes: the majorizer's
    mu lambda f1(|u|)/|u| (`slide_terms`) on the tangent plane, (1 - n_c^2) of it in coordinate c."""
    i = contacts.index
    _, _, H = slide_terms(x[i] - x_prev[i] - contacts.surface_slide, contacts.normal, contacts.weight, h, majorize=True)
    return np.einsum("aii->ai", H)
