"""The learned engine's speed on CUDA beside the CPU, from one run: for the first machine with a GPU.

    .venv/bin/python experiments/bench_gpu.py --json eval_out/bench_gpu.json [--sizes 1000,10000,100000] [--frames 48]

The same scene and code path as `neurok bench` (the step runs on whichever device the engine
was opened on: float64 energy and gradient, float32 Newton matrix, every tensor on the device),
without the reference simulator and Blender's cloth. Rows: one per device and size, with
ms_per_frame, encode_ms and peak memory (device memory on CUDA). Exits with one line when torch
sees no GPU. The test suite never needs one.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    import torch

    from engine.evaluation.bench import bench
    from engine.evaluation.metrics import write_json
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default="eval_out/bench_gpu.json")
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--frames", type=int, default=48)
    p.add_argument("--model", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_gpu: torch sees no CUDA device here (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    result = bench(args.model, sizes, args.frames, reference=False, blender=False, cuda=True)
    result["gpu"] = torch.cuda.get_device_name(0)
    write_json(args.json, result)
    for r in result["rows"]:
        print(f"{r['device']:>4} {r['vertices']:>7} v: {r['ms_per_frame']:8.2f} ms/frame, encode {r['encode_ms']:8.1f} ms, "
              f"peak {r['peak_mb']:7.1f} MB")
    for name, vals in result["ratios"].items():
        print(f"{name}: " + ", ".join(f"{k} v: {v:.1f}x" for k, v in vals.items()))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
