"""Count plausibility-guard false alarms on ground truth: run the guard (engine/core/guard.py) over
every frame of reference-simulator sequences (an evaluation set, a training set) and list any frame
it would have stopped, with the full check and with the quick one (a 1,000-element sample, no
volume: what the learned engine's frames between two full checks get). The reference is the
ground truth, so every stop is a false alarm.

    python experiments/guard_false_alarms.py eval_out/small data/train_set
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="*", default=["eval_out"], help="folders of sequences (default: eval_out)")
    folders = p.parse_args(argv).folders
    from engine.core.errors import NeurokError
    from engine.core.formats import read_sequence
    from engine.core.guard import Guard
    from engine.core.scene import setup_from_sequence
    sequences = frames = 0
    alarms = {"full": 0, "quick": 0}
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.npz")):
            try:
                seq = read_sequence(path)
            except NeurokError:
                continue
            if seq.meta.get("engine") not in (None, "reference") and "reference" not in str(seq.meta.get("source", "reference")):
                continue
            guard = Guard(setup_from_sequence(seq))
            sequences += 1
            stopped = set()
            for t in range(1, seq.frames):
                frames += 1
                for check, quick in (("full", False), ("quick", True)):   # the quick check: every frame of the learned engine
                    violation = None if check in stopped else guard.check(t, seq.positions[t], quick=quick)
                    if violation is not None:
                        alarms[check] += 1
                        stopped.add(check)
                        print(f"{path}: frame {t} ({check} check): {violation}")
    print(f"{alarms['full']} false alarms of the full check and {alarms['quick']} of the quick check in "
          f"{sequences} reference sequences ({frames} frames checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
