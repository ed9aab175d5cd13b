"""The `neurok` command line (also `python -m engine`). See DESIGN.md section 4.

A user's mistake ends with one line on stderr and exit status 2; no traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from .core.errors import NeurokError
from .core.formats import atomic_write_text, read_mesh, read_sequence, write_pc2, write_sequence
from .core.setup import SHEET_LAYER_CHOICES, SHEET_LAYER_MS_PER_1000_VERTICES, SHEET_PROXY_VERTICES
from .core.scene import read_scene


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="neurok", description="NeuROK: learned latent Lagrangian dynamics for meshes")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("simulate", help="run a scene on a mesh, or replay a recorded sequence")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--mesh", help="mesh file (.obj, .ply, .npz)")
    src.add_argument("--replay", help="sequence file whose recorded setup is run again")
    s.add_argument("--scene", help="scene file (neurok.scene/1 .json); needed with --mesh")
    s.add_argument("--engine", choices=("neurok", "reference"), default="neurok")
    s.add_argument("--model", help="checkpoint (default: the bundled model)")
    s.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    s.add_argument("--out", required=True, help="output .npz (neurok.sequence/1) or .pc2")
    s.add_argument("--lattice-cells", type=int, default=None,
                   help="reference only: quadratic cells along a solid's longest side (default 6; the "
                        "evaluation's converged ground truth uses 12)")
    s.add_argument("--sheet-layer", choices=SHEET_LAYER_CHOICES, default="auto",
                   help="learned engine, sheets: the full-space layer that lets a sheet hinge, crease and hang "
                        "(auto: as the scene's detail says: off at low, on at medium and high; at medium a sheet "
                        f"of more than {SHEET_PROXY_VERTICES:,} vertices takes it on a coarse proxy of that many; "
                        "full: on the full mesh, about "
                        f"{SHEET_LAYER_MS_PER_1000_VERTICES} ms a frame per 1,000 vertices, `neurok bench`)")
    s.add_argument("--solid-layer", choices=("off", "on"), default="off",
                   help="learned engine, solids (experimental): the fine level that iterates the solid's lattice in "
                        "full space after each latent step (docs/DESIGN_NOTES.md, 'Contact and the floor': "
                        "4-7x the frame time; closer to the reference on a poked body, not on a rolling one)")
    s.add_argument("--keep-good-frames", action="store_true",
                   help="when the run stops (implausible or unstable frame), write the frames before it "
                        "instead of nothing")

    g = sub.add_parser("generate", help="make training sequences with the reference simulator")
    g.add_argument("--out", required=True)
    g.add_argument("--sequences", type=_positive_int, required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--shard", help="I/N: make only sequences i with i %% N == I")
    g.add_argument("--frames", type=_positive_int, default=64)
    g.add_argument("--workers", type=_positive_int, default=os.cpu_count() or 1)
    g.add_argument("--law", choices=("neo_hookean", "mooney_rivlin"), default="neo_hookean",
                   help="mooney_rivlin: solids only, all of that law (the data for a learned rubber)")
    g.add_argument("--i2-share", type=float, default=0.7,
                   help="with --law mooney_rivlin: the share of the shear modulus on the second invariant")
    g.add_argument("--lattice", type=_positive_int, default=None,
                   help="the reference's quadratic cells along a solid's longest side (default 4: fast; 8: the "
                        "converged paths a model is judged against, about 10x the time)")
    g.add_argument("--kind", choices=("solid", "cloth"), default=None,
                   help="only solids or only cloth sheets (default: every family)")

    t = sub.add_parser("train", help="train or fine-tune a model on sequences")
    t.add_argument("--data", required=True, nargs="+", help="data folder(s)")
    t.add_argument("--out", required=True)
    t.add_argument("--init", help="checkpoint to start from (fine-tuning)")
    t.add_argument("--closures", default="density,dissipation",
                   help="which learned closures to train, comma-separated: density (the strain energy's "
                        "correction), dissipation (the damping's beta multiplier per kind of material), "
                        "compression (a compressed cloth edge's share of the membrane stiffness)")
    t.add_argument("--free-run", type=_positive_int, default=None, metavar="FRAMES",
                   help="train on rollouts of FRAMES frames from each sequence's start, as a bake runs "
                        "(default: short rollouts from random frames)")
    budget = t.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=_positive_int)
    budget.add_argument("--minutes", type=_positive_float)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--fit-weights", action="store_true",
                   help="also fit the skinning weight field (off: the mesh's eigenfunctions; docs/MODEL_CARD.md)")
    t.add_argument("--material", help="learn (or refine) only this material preset from the data, "
                                      "keeping everything else of --init as it is")
    t.add_argument("--material-base", type=json.loads, help="with --material: the material (JSON, as in a scene) a new "
                                    "learned material refines when a scene names it (default: the data's median)")
    t.add_argument("--learn", help="with --material: which of its numbers to learn, comma-separated "
                                   "(stiffness, lambda, bending, damping, air_damping, i2_term; default all)")

    e = sub.add_parser("eval", help="measure a model against ground-truth sequences")
    e.add_argument("--model", required=True)
    e.add_argument("--data", required=True)
    e.add_argument("--json", required=True)
    e.add_argument("--max-sequences", type=_positive_int, default=None)

    b = sub.add_parser("bench", help="speed of the learned engine against the reference simulator")
    b.add_argument("--json", required=True)
    b.add_argument("--model")
    b.add_argument("--sizes", default="1000,10000,100000")
    b.add_argument("--frames", type=_positive_int, default=24)
    b.add_argument("--reference-frames", type=_positive_int, default=None,
                   help="frames the reference simulator runs per size (default 8, 3 from 50k vertices)")

    sp = sub.add_parser("specialize", help="fine-tune the model for one mesh with the reference simulator")
    sp.add_argument("--mesh", required=True)
    sp.add_argument("--minutes", type=_positive_float, default=5.0)
    sp.add_argument("--model")
    sp.add_argument("--out", required=True)
    sp.add_argument("--kind", choices=("solid", "cloth"), default=None)

    d = sub.add_parser("demo", help="the main job: bake the bundled samples in Blender (headless)")
    d.add_argument("--out", default="demo_out")
    d.add_argument("--engine", choices=("neurok", "reference"), default=None,
                   help="default: the learned engine when its checkpoint is present, else the reference")
    d.add_argument("--frames", type=_positive_int, default=None, help="frames to bake (default 48 learned, 24 reference)")

    ev = sub.add_parser("evalsuite", help="regenerate docs/EVALUATION.md (small or full preset)")
    ev.add_argument("--preset", choices=("small", "full"), default="small")
    ev.add_argument("--out", default="eval_out")
    ev.add_argument("--model")
    ev.add_argument("--physics-only", action="store_true",
                    help="make (or resume) the evaluation set and the model-free physics kept in data/, run nothing of the model")
    ev.add_argument("--data", help="where the evaluation sets and the model-free physics are kept and made "
                                   "(default: the repository's data/)")

    pt = sub.add_parser("prior-vs-trained", help="a checkpoint against its own classical prior on the held-out scenes "
                                                 "(the rule for bundling a trained model)")
    pt.add_argument("--model", default=None, help="default: the bundled checkpoint")
    pt.add_argument("--frames", type=_positive_int, default=36)
    pt.add_argument("--json", default=None)
    pt.add_argument("--sheets", default=None, help="folder for a contact sheet per scene")
    pt.add_argument("--physics", default="eval_out/small/physics", help="the evaluation's physics cache")
    pt.add_argument("--free-pins", action="store_true",
                    help="both runs with handles of the free body (that move the pins too), as before the subspace "
                         "held them")
    pt.add_argument("--require-closer", action="store_true",
                    help="exit with status 1 unless the trained model's mean distance is below its prior's")
    pt.add_argument("--sheet-layer", choices=SHEET_LAYER_CHOICES, default="off",
                    help="the sheets' full-space layer in both runs (default off: under the layer the closures "
                         "do not act, so both runs are the same)")

    cb = sub.add_parser("calibration-bar", help="stiffness in Pa means Pa: Blender's 0.1 x 0.1 x 1 m bar hanging "
                                                "from its top face, learned engine vs reference vs textbook")
    cb.add_argument("--model", default=None, help="default: the bundled checkpoint")
    cb.add_argument("--trained", action="store_true", help="also run the checkpoint's learned layers as they are")

    fg = sub.add_parser("figures", help="write the tables of README.md and docs/MODEL_CARD.md from the full "
                                        "evaluation's figures file (docs/EVALUATION.json)")
    fg.add_argument("--check", action="store_true", help="write nothing; exit with status 1 if a table differs from the file")
    fg.add_argument("--file", default=None, help="the figures file (default docs/EVALUATION.json)")
    return p


def cmd_simulate(args):
    from .api import SimulationFault, open_engine
    from .core.scene import setup_from_scene, setup_from_sequence
    if args.mesh:
        if not args.scene:
            raise NeurokError("simulate --mesh needs --scene SCENE.json")
        setup = setup_from_scene(read_mesh(args.mesh), read_scene(args.scene), where=args.scene)
    else:
        if args.scene:
            raise NeurokError("--scene cannot be combined with --replay (the sequence records its own setup)")
        setup = setup_from_sequence(read_sequence(args.replay))
    out = Path(args.out)
    if out.suffix.lower() not in (".npz", ".pc2"):
        raise NeurokError(f"--out must end in .npz or .pc2, got '{out.name}'")
    from .core.progress import ProgressBar
    for warning in setup.meta.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    for note in setup.meta.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    if args.lattice_cells is not None and args.lattice_cells < 1:
        raise NeurokError(f"--lattice-cells must be 1 or more, got {args.lattice_cells}")
    if (args.sheet_layer != "auto" or args.solid_layer != "off") and args.engine != "neurok":
        raise NeurokError("--sheet-layer and --solid-layer are the learned engine's settings (--engine neurok)")
    engine = open_engine(args.engine, args.model, args.device, lattice_cells=args.lattice_cells)
    t0 = time.perf_counter()
    run = (engine.prepare(setup, sheet_layer=args.sheet_layer, solid_layer=args.solid_layer) if args.engine == "neurok"
           else engine.prepare(setup))
    if run.ood and run.ood.get("level") != "ok":
        print(f"warning: {run.ood['message']}", file=sys.stderr)
    bar = ProgressBar(setup.frames, f"simulate ({args.engine})")
    run.on_substep = lambda frame, share: bar.update(done=frame + share)   # a slow frame moves the bar too
    try:
        positions = run.bake(progress=lambda done, total: bar.update(done=done))
    except SimulationFault as fault:
        bar.close()
        good = fault.positions if fault.positions is not None else np.zeros((0, setup.num_vertices, 3))
        if args.keep_good_frames and len(good):
            _write_frames(out, setup, good, args.engine)
            raise NeurokError(f"{fault}; the {len(good)} frames before it were written to {out}") from None
        raise NeurokError(f"{fault}; nothing was written (--keep-good-frames writes the {len(good)} frames "
                          f"before it)") from None
    bar.close()
    _write_frames(out, setup, positions, args.engine)
    seconds = time.perf_counter() - t0
    print(f"wrote {len(positions)} frames of {setup.num_vertices} vertices to {out} "
          f"in {seconds:.2f} s ({1000 * seconds / max(1, len(positions) - 1):.1f} ms/frame, engine {args.engine})")


def _write_frames(out, setup, positions, engine):
    if out.suffix.lower() == ".pc2":
        write_pc2(out, positions, start_frame=0.0, sample_rate=1.0)
    else:
        write_sequence(out, setup.to_sequence(positions, {"source": "neurok simulate", "engine": engine}))


def cmd_generate(args):
    from .training.generate import generate
    law = None
    if args.law == "mooney_rivlin":
        if not 0.0 <= args.i2_share <= 1.0:
            raise NeurokError(f"--i2-share must be in [0, 1], got {args.i2_share}")
        law = {"law": "mooney_rivlin", "i2_share": args.i2_share}
    result = generate(args.out, args.sequences, args.seed, args.shard, args.workers, args.frames, law=law,
                      lattice_cells=args.lattice, kind=args.kind)
    rate = result["sequences_per_minute"]
    skipped = f", skipped {len(result['skipped'])} (the reference's work budget stopped them)" if result["skipped"] else ""
    print(f"wrote {result['written']} sequences to {args.out} in {result['seconds']:.1f} s"
          + (f" ({rate:.1f} sequences/minute)" if rate else "") + f"{skipped}; index {result['index']}")


def cmd_train(args):
    from .training.train import train
    train(args.data, args.out, init=args.init, steps=args.steps, minutes=args.minutes, seed=args.seed,
          fit_weights=args.fit_weights, material=args.material,
          learn=[x.strip() for x in args.learn.split(",") if x.strip()] if args.learn else None,
          material_base=args.material_base, closures=[x.strip() for x in args.closures.split(",") if x.strip()],
          free_run=args.free_run)


def cmd_eval(args):
    from .evaluation.metrics import evaluate_command
    evaluate_command(args.model, args.data, args.json, args.max_sequences)


def cmd_bench(args):
    from .evaluation.bench import bench_command
    bench_command(args.json, args.model, [int(s) for s in args.sizes.split(",")], args.frames,
                  reference_frames=args.reference_frames)


def cmd_specialize(args):
    from .training.specialize import specialize
    path = specialize(read_mesh(args.mesh), minutes=args.minutes, out=args.out, model=args.model, kind=args.kind)
    print(f"wrote specialised model to {path}")


def cmd_demo(args):
    # The demo drives Blender (bpy) and lives with the add-on (`python -m neurok_blender.demo`);
    # the engine never imports the add-on, so it is started as a separate process.
    import subprocess
    root = Path(__file__).resolve().parent.parent
    if not (root / "neurok_blender" / "demo.py").is_file():
        raise NeurokError("the demo lives in the repository's neurok_blender/ folder, which is not next to this engine")
    command = [sys.executable, "-m", "neurok_blender.demo", "--out", str(Path(args.out).resolve())]
    if args.engine:
        command += ["--engine", args.engine]
    if args.frames:
        command += ["--frames", str(args.frames)]
    code = subprocess.call(command, cwd=root)
    if code:
        raise NeurokError(f"the demo failed (exit status {code})")


def cmd_evalsuite(args):
    from .evaluation.suite import make_kept_physics, run_suite
    if args.physics_only:
        make_kept_physics(args.preset, args.out, args.model, data_dir=args.data)
    else:
        run_suite(args.preset, args.out, args.model, data_dir=args.data)


def cmd_prior_vs_trained(args):
    from .evaluation.prior_vs_trained import prior_vs_trained_command
    return prior_vs_trained_command(args.model, args.frames, args.json, args.sheets, args.physics, args.free_pins,
                                    args.require_closer, args.sheet_layer)


def cmd_calibration_bar(args):
    from .evaluation.physical import calibration_bar_command
    return calibration_bar_command(args.model, args.trained)


def cmd_figures(args):
    from .evaluation.key_figures import ROOT, read_figures, stale_tables, write_tables
    figures = read_figures(args.file)
    if args.check:
        stale = stale_tables(ROOT, figures)
        for path in stale:
            print(f"neurok figures: {path.relative_to(ROOT)} differs from {args.file or 'docs/EVALUATION.json'} "
                  f"(run `neurok figures`)", file=sys.stderr)
        return 1 if stale else 0
    for path in write_tables(ROOT, figures):
        print(f"wrote the tables of {path.relative_to(ROOT)}")


COMMANDS = {"simulate": cmd_simulate, "generate": cmd_generate, "train": cmd_train, "eval": cmd_eval,
            "bench": cmd_bench, "specialize": cmd_specialize, "demo": cmd_demo, "evalsuite": cmd_evalsuite,
            "prior-vs-trained": cmd_prior_vs_trained, "calibration-bar": cmd_calibration_bar,
            "figures": cmd_figures}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = COMMANDS[args.command](args)
    except NeurokError as e:
        print(f"neurok {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"neurok {args.command}: interrupted", file=sys.stderr)
        return 130
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
