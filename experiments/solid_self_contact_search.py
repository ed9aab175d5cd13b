"""What the reference solid's self-contact search costs (engine/reference/lattice_contact.py,
`near_balls`), on the guard test's poked jelly: the demo's jelly_poke scene on a 250-vertex
procedural sphere. The reference runs `--frames` frames; every step limit's search
(`safe_fraction`: the pairs that may come within the band along a Newton step) is recorded and
timed again three ways, one core:

- split (what runs): balls wider than WIDE times the median paired directly, the rest by a tree;
- tree: every ball in the tree, whose one radius is the widest ball's (the search before);
- direct: every pair measured.

All three find the same pairs (tests/test_reference_lattice_contact.py).

    OMP_NUM_THREADS=1 python experiments/solid_self_contact_search.py [--frames 9]

Measured (one core, 9 frames, 587 searches): split 18.8 s in all (median 24 ms a search, largest
256), tree 38.3 s (28, 259), direct 23.6 s (38, 105). On two rubber cubes that barely deform
(tests/test_coupling.py's reference drop, 1,264 searches, timed the same way in a scratch run) the
tree took 4.6 s, direct 13.8 s, split 4.8 s: the split is the one near the best on both.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WAYS = {"split": None, "tree": 1e9, "direct": 0.0}      # lattice_contact.WIDE for each (None: as it is)


def recorded_searches(frames):
    """[(contact, y, radius, motion)] of every step limit's search in the poked jelly's first `frames` frames."""
    from engine.api import open_engine
    from engine.core.scene import read_scene, setup_from_scene
    from engine.reference import lattice_contact
    from engine.training.shapes import make_shape
    scene = read_scene(ROOT / "assets" / "scenes" / "jelly_poke.json")
    scene["frames"] = frames
    setup = setup_from_scene(make_shape("sphere", np.random.default_rng(1), 250), scene)
    searches, search = [], lattice_contact.LatticeSelfContact._search

    def recording(self, y, radius, motion=None):
        if motion is not None:
            searches.append((self, y.copy(), radius, motion.copy()))
        return search(self, y, radius, motion)

    lattice_contact.LatticeSelfContact._search = recording
    try:
        open_engine("reference").prepare(setup).bake()
    finally:
        lattice_contact.LatticeSelfContact._search = search
    return searches


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=9, help="frames of the poked jelly (poked at frames 6-8)")
    args = p.parse_args(argv)
    from engine.reference import lattice_contact
    searches = recorded_searches(args.frames)
    print(f"{len(searches)} searches in {args.frames} frames")
    wide = lattice_contact.WIDE
    for name, value in WAYS.items():
        lattice_contact.WIDE = wide if value is None else value
        times = []
        for contact, y, radius, motion in searches:
            t = time.perf_counter()
            contact._search(y, radius, motion)
            times.append(1000 * (time.perf_counter() - t))
        lattice_contact.WIDE = wide
        times = np.array(times)
        print(f"{name:7s} {times.sum() / 1000:6.1f} s in all, per search median {np.median(times):5.1f} ms, "
              f"largest {times.max():5.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
