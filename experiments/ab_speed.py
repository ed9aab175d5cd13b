"""The bench's learned-engine frame against another commit's, run alternately in one process.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/ab_speed.py --base COMMIT [--scene sphere|cloth|cloth_folds|contact] [--rounds 6]

On a shared machine one bench run can be 30 % off the next; alternating the two engines in one
process puts both under the same load. The base commit is checked out into a temporary git
worktree whose engine/ is imported under another package name (the engine imports itself
relatively, so both copies load side by side). Each round runs `bench.bench_neurok` once per
engine on the bench's 10k scene (`--scene sphere`: the pinned, pushed rubber sphere; `cloth`: the
sheet in a gust; `cloth_folds`: the same with self-collision, as the add-on's cloth runs; `contact`: the sphere thrown along a floor with friction), 24 frames; prints the
best and the median ms per frame of each.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def engine_at(commit: str, folder: Path) -> str:
    """Check `commit` out under folder and make its engine importable as `engine_base`."""
    tree = folder / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), commit], check=True)
    init = tree / "engine" / "__init__.py"   # imported as a package of its own: no search-path edit
    spec = importlib.util.spec_from_file_location("engine_base", init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["engine_base"] = module
    spec.loader.exec_module(module)
    return str(tree)


def prepared(package: str, scene: str, vertices: int, frames: int):
    bench = importlib.import_module(package + ".evaluation.bench")
    runtime = importlib.import_module(package + ".learned.runtime")
    checkpoint = importlib.import_module(package + ".learned.checkpoint")
    engine = runtime.NeurokEngine(checkpoint.default_model_path())
    bench.bench_neurok(engine, bench.bench_setup(bench.bench_mesh(200), 3))        # first-call costs
    if scene == "sphere":
        setup = bench.bench_setup(bench.bench_mesh(vertices), frames)
    elif scene == "contact":
        setup = bench.contact_setup(bench.bench_mesh(vertices), frames)
    elif scene == "cloth_folds":
        setup = bench.bench_setup(bench.bench_sheet(vertices), frames, dict(bench.CLOTH_SCENE, self_collision=True))
    else:
        setup = bench.bench_setup(bench.bench_sheet(vertices), frames, bench.CLOTH_SCENE)
    return bench, engine, setup


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the commit to compare against")
    p.add_argument("--scene", choices=("sphere", "cloth", "cloth_folds", "contact"), default="sphere")
    p.add_argument("--vertices", type=int, default=10_000)
    p.add_argument("--frames", type=int, default=24)
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tree = engine_at(args.base, Path(tmp))
        try:
            engines = {name: prepared(name, args.scene, args.vertices, args.frames) for name in ("engine", "engine_base")}
            times = {name: [] for name in engines}
            for _ in range(args.rounds):
                for name, (bench, engine, setup) in engines.items():
                    times[name].append(bench.bench_neurok(engine, setup)["ms_per_frame"])
            for name, label in (("engine", "this tree"), ("engine_base", args.base)):
                t = sorted(times[name])
                print(f"{label:>12}: best {t[0]:.2f}  median {t[len(t) // 2]:.2f} ms/frame  "
                      f"({' '.join(f'{x:.2f}' for x in times[name])})")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", tree], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
