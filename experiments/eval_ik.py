"""Inverse-kinematics posing accuracy (the paper's Chamfer-L1 measure) on held-out shapes.

For every held-out sequence of an evaluation set, take frames 10, 30 and 50 as target poses,
drag 16 spread handle vertices to their true positions with `NeurokEngine.solve_ik`, and compare
the whole posed surface with the true one (Chamfer-L1 / rest bbox diagonal). "Rest" is the same
measure for the undeformed shape, the do-nothing answer.

    python experiments/eval_ik.py --data eval_out/full/data --model assets/neurok_default.ckpt
"""
import argparse
import json

import numpy as np
import torch

from engine.evaluation.metrics import bbox_diagonal, chamfer_l1
from engine.core.formats import read_sequence
from engine.training.generate import load_index
from engine.core.geometry import farthest_point_sample
from engine.learned.runtime import NeurokEngine
from engine.core.scene import setup_from_sequence


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--model", default="assets/neurok_default.ckpt")
    p.add_argument("--handles", type=int, default=16)
    args = p.parse_args()
    torch.set_num_threads(1)
    engine = NeurokEngine(args.model)
    ik, rest = [], []
    for entry in (e for e in load_index(args.data) if e["split"] == "heldout"):
        seq = read_sequence(entry["path"])
        setup = setup_from_sequence(seq)
        diag = bbox_diagonal(seq.rest)
        handles = farthest_point_sample(seq.rest, args.handles)
        for t in (10, 30, 50):
            true = seq.positions[t]
            posed = engine.solve_ik(setup, handles, true[handles])
            ik.append(chamfer_l1(posed, true, seq.faces, diag))
            rest.append(chamfer_l1(seq.positions[0], true, seq.faces, diag))
    print(json.dumps({"poses": len(ik), "handles": args.handles, "ik_chamfer_l1": float(np.mean(ik)),
                      "rest_chamfer_l1": float(np.mean(rest))}))


if __name__ == "__main__":
    main()
