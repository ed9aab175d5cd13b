"""How many training rollouts teach: converge, and give a finite gradient.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/training_rollouts.py data/train_l8 data/train_cloth [--sequences 10]

For each data folder: two 5-frame rollouts from random noisy frames of each of its first training
sequences (`train.rollout_loss`, as `neurok train` draws them), on an untrained model with every
closure trainable. Prints how many stopped at a step Newton could not solve (the rollout teaches
nothing) and how many gave a gradient that is not finite (the optimiser skips the whole batch's
step). Run it on an older checkout with PYTHONPATH=that checkout to compare
(docs/MODEL_CARD.md, "Training that learns").
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch


def main(argv=None):
    from engine.learned.model import ModelConfig, NeurokModel
    from engine.training import train as T
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", nargs="+")
    p.add_argument("--sequences", type=int, default=10)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    model = NeurokModel(ModelConfig())
    params = T.trainable_parameters(model)
    for folder in args.data:
        items = T.load_items(model, folder)[:args.sequences]
        rng = np.random.default_rng(0)
        dropped = not_finite = total = 0
        for item in items:
            for _ in range(2):
                total += 1
                model.zero_grad()
                loss = T.rollout_loss(item, 5, rng)
                if loss is None:
                    dropped += 1
                    continue
                loss.backward()
                grad = torch.cat([q.grad.flatten() for q in params if q.grad is not None])
                not_finite += not bool(torch.isfinite(grad).all())
        print(f"{folder}: {total} rollouts, {dropped} stopped at an unsolved step, {not_finite} with a gradient "
              f"that is not finite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
