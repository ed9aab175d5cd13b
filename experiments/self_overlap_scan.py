"""Self-overlap of the solids in reference sequences: for every closed-surface sequence, the most
vertices lying inside another part of the body (engine/evaluation/reference_stress.py `self_overlap`) over
every `--every`-th frame, and the least enclosed volume. Lists the sequences that overlap.

    python experiments/self_overlap_scan.py data/train_ref5 --every 2
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


from engine.core.errors import NeurokError
from engine.core.formats import read_sequence
from engine.core.geometry import is_closed
from engine.core.measures import MeshMeasures
from engine.evaluation.reference_stress import self_overlap


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--every", type=int, default=2)
    args = ap.parse_args(argv)
    solids = overlapping = 0
    least_volume = 1.0
    for folder in args.folders:
        for path in sorted(Path(folder).rglob("*.npz")):
            try:
                seq = read_sequence(path)
            except NeurokError:
                continue
            faces = np.asarray(seq.faces)
            if not len(faces) or not is_closed(faces):
                continue
            solids += 1
            x = np.asarray(seq.positions, dtype=np.float64)
            worst = max(self_overlap(x[t], faces) for t in range(0, len(x), args.every))
            measures = MeshMeasures(seq.rest, faces)
            volume = min(measures.frame(f)["volume_ratio"] for f in x)
            least_volume = min(least_volume, volume)
            if worst:
                overlapping += 1
                print(f"{path}: at most {worst} of {len(seq.rest)} vertices inside another part, "
                      f"least volume {volume:.3f}", flush=True)
    print(f"{overlapping} of {solids} solid sequences overlap themselves; least volume of any: {least_volume:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
