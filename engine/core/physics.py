"""Physical constants and laws shared by the reference simulator and the learned engine, so both apply
pins, floor contact and friction by the same law.

Pins and the floor are stiff springs whose stiffness is proportional to the mass they hold:
k = weight * mass * omega^2. With omega^2 = 1e6 s^-2 (a 160 Hz spring) a firm pin holding its
own weight sags by g / omega^2 ~ 0.01 mm. The floor uses the same 160 Hz spring: its contact
vertices carry the whole body, so a softer floor (1e5 s^-2 was tried) let a body dropped from a few
centimetres sink 1-2 % of its size into it, and rest 0.4 % deep.
"""
import math

import numpy as np

PIN_OMEGA2 = 1.0e6        # s^-2, least pin stiffness per kg at pin strength 1.0
PIN_OVER_MATERIAL = 1.0e3 # a pin is at least this many times stiffer (per kg) than the material
FLOOR_OMEGA2 = 1.0e6      # s^-2, floor penalty stiffness per kg
DEFAULT_SELF_DISTANCE = 0.005   # m: a cloth's self-collision thickness by default, Blender's Self Collision Distance
FLOOR_FRICTION = 0.5      # the floor's Coulomb coefficient when a scene does not set it (engine/core/friction.py)
SELF_FRICTION = 0.5       # Coulomb coefficient between a cloth's layers by default (woven cotton on itself: 0.5-0.6)


def substeps_per_frame(dt: float, longest: float) -> int:
    """How many equal steps a frame of dt seconds takes when none may be longer than `longest`: dt /
    longest rounded up, where 1e-3 of a step over a whole number does not add one (a frame time
    written to six digits, 0.041667 s, is 24 fps: two steps of 1/48 s). Every engine counts its
    steps by this law, so the reference and the learned engine step a frame alike."""
    return max(1, int(math.ceil(dt / longest - 1e-3)))


def pin_omega2(w0sq: float) -> float:
    """The pin law: Omega^2 (s^-2) of a firm pin on a body whose own omega^2 is `w0sq`, large both in
    absolute terms and against the material, so a firm pin holds against the body."""
    return max(PIN_OMEGA2, PIN_OVER_MATERIAL * w0sq)


def pin_stiffness(pin_weight, vertex_mass, material, diagonal: float):
    """Spring stiffness (N/m) of each vertex's pin: weight * mass * Omega^2 (`pin_omega2`) on a body
    of `material` (a `Material`) and size `diagonal` (its units: metres, or 1 when normalised)."""
    return pin_weight * vertex_mass * pin_omega2(material.omega2(diagonal))


def carried_vertex_masses(W, node_mass):
    """kg per vertex of a body whose vertices ride its lattice's nodes by the weights W [N,n]: the
    nodes' masses shared out in proportion to the weights, then all rescaled to the body's mass.
    A node that vertices barely touch gives only part of its mass (its share counts as at least
    0.25): dividing by its tiny share would hand its whole mass to a vertex that lies a rounding
    error off a grid plane, so float32 coordinates (a replay) would change the masses."""
    share = np.asarray(W.sum(axis=0)).ravel()
    m = W @ (node_mass / np.maximum(share, 0.25))
    return m * node_mass.sum() / m.sum()

