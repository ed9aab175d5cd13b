"""docs/EVALUATION.md from the suite's results: the prose lives in `report_template.md`
(string.Template placeholders); this module only turns numbers into tables, links and the
data-driven list of findings, and fills the template."""
from __future__ import annotations

from pathlib import Path
from string import Template

from ..core.formats import atomic_write_text
from .figures import make_figures, scene_figures
from .targets import TARGETS, _minutes, fmt, no_shortfall_sentence, targets

TEMPLATE = Path(__file__).with_name("report_template.md")
ROOT = Path(__file__).resolve().parent.parent.parent
ENGINES3 = ("reference", "neurok", "oracle")


def _pct(v, digits=1):
    return "n/a" if v is None else f"{100 * v:.{digits}f}%"


def _ratio(v):
    return "n/a" if v is None else f"{v:.2f}".replace("-0.00", "0.00")


def _three(row, key, f=fmt):
    vals = [row.get(e, {}).get("plausibility", {}).get(key) for e in ENGINES3]
    return " / ".join(f(v) for v in vals)


def _drift(v):
    return "n/a" if v is None else ("blew up" if v == float("inf") or v > 1e3 else f"{100 * v:.3g}%")


def _rel(p):
    if p is None:
        return None
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def _fig_link(path, docs):
    """Path of a figure relative to the report's folder."""
    try:
        return str(Path(path).resolve().relative_to(Path(docs).resolve()))
    except ValueError:
        return str(path)


def _table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# =========================================================================== findings

def findings(scenes, beam, stress, result) -> list[str]:
    """Plain sentences on where the model falls short, each backed by a number in the tables."""
    t = TARGETS
    out = []
    for r in scenes.get("scenes", []):
        if "neurok" not in r:
            continue
        m, ref, o = r["neurok"]["plausibility"], r["reference"]["plausibility"], r["oracle"]["plausibility"]
        parts = []
        vm, vr = m.get("volume_ratio_min"), ref.get("volume_ratio_min")
        if vm is not None and vr is not None and (vm < 0 or vm < vr - t["volume_below_reference"]):
            what = "turns inside out" if vm < 0 else "loses more volume than the reference"
            parts.append(f"its closed surface {what} (volume/rest down to {_ratio(vm)}; reference {vr:.2f}, oracle "
                         f"{_ratio(o.get('volume_ratio_min'))})")
        sm, sr = m.get("strain_mean") or 0.0, ref.get("strain_mean") or 0.0
        if sm > t["strain_mean"] and sm > t["strain_vs_reference"] * sr:
            parts.append(f"edges stretch {_pct(sm)} on average and up to {_pct(m.get('strain_max'), 0)} "
                         f"(reference {_pct(sr)}, oracle {_pct(o.get('strain_mean'))})")
        if r["kind"] == "solid" and (m.get("flipped_max") or 0) > t["solid_flipped"] \
                and (ref.get("flipped_max") or 0) < t["reference_flipped"]:
            parts.append(f"up to {_pct(m['flipped_max'], 0)} of its triangles flip")
        gm, gr = m.get("growth_max"), ref.get("growth_max")
        if gm is not None and gr is not None and gm > t["growth_vs_reference"] * gr:
            parts.append(f"it swells to {gm:.1f}x its rest size in its own frame (reference {gr:.2f}x)")
        amp = r["neurok"].get("amplitude_ratio")
        within = t["amplitude_within"]
        if amp is not None and amp < t["amplitude_barely"]:
            parts.append(f"it barely moves ({amp:.2f} of the reference's motion amplitude)")
        elif amp is not None and amp < 1 - within:
            parts.append(f"it moves less than the reference ({amp:.2f} of its motion amplitude; target within {within:.0%})")
        elif amp is not None and amp > 1 + within:
            parts.append(f"it moves {amp:.2f}x as much as the reference (target within {within:.0%})")
        if r["neurok"].get("unstable"):
            why = r.get("model_error") or ""
            if why.startswith("implausible"):
                parts.append(f"the plausibility guard stopped the run at frame {r['neurok'].get('unstable_frame')} "
                             f"({why.split(':', 1)[-1].strip()[:120]}); later frames are held at the last good one")
            else:
                parts.append(f"the rollout failed at frame {r['neurok'].get('unstable_frame')}")
        e_m, e_o, e_h = r["neurok"]["horizons"]["all"], r["oracle"]["horizons"]["all"], r["hold_still"]["horizons"]["all"]
        if e_m is not None and e_h and e_m >= e_h:
            parts.append(f"it is no closer to the reference than holding still (rel_l2 {e_m:.3f} vs {e_h:.3f}; oracle {e_o:.3f})")
        elif e_m is not None and e_o and e_m > t["oracle_factor"] * e_o:
            parts.append(f"its distance to the reference is {e_m / e_o:.1f}x the oracle's ({e_m:.3f} vs {e_o:.3f}): "
                         "the learned dynamics, not the subspace size, lose it")
        elif e_m is not None and e_h and e_m > t["hold_still_factor"] * e_h:   # over the whole rollout
            who = ("the oracle is as far, " if e_o is not None and e_o > 0.8 * e_m else "oracle ") + f"{_ratio(e_o and e_o / e_h)}x"
            parts.append(f"its path departs from the reference's: rel_l2 {e_m:.3f} = {e_m / e_h:.2f}x hold-still "
                         f"(target {t['hold_still_factor']:g}x; {who}; see its contact sheet)")
        fm, fr = m.get("flipped_max"), ref.get("flipped_max")
        if r["kind"] == "cloth" and fm is not None and fr is not None and fr > t["cloth_reference_folds"] \
                and fm < t["cloth_fold_share"] * fr:
            parts.append(f"it does not fold like the reference (folded-over triangles {_pct(fm, 0)} vs {_pct(fr, 0)}): "
                         "the sheet curls as one smooth surface")
        if parts:
            out.append(f"**{r['name']}** ({r['title']}): " + "; ".join(parts) + ".")
    if beam and beam.get("relative_errors", {}).get("neurok"):
        q, e = beam["quantities"], beam["relative_errors"]["neurok"]
        bits = []
        for key, label, unit, scale in (("sag", "static sag", "mm", 1000), ("frequency", "first frequency", "Hz", 1),
                                        ("damping_ratio", "damping ratio", "", 1)):
            if e.get(key) is not None and e[key] > t["beam_error"]:
                bits.append(f"{label} off by {_pct(e[key], 0)} ({fmt(q['neurok'].get(key) and q['neurok'][key] * scale, 3)} vs "
                            f"reference {fmt(q['reference'].get(key) and q['reference'][key] * scale, 3)} {unit}".rstrip() + ")")
        if bits:
            out.append("**Pinned beam**: " + "; ".join(bits) + f" (oracle: sag {_pct(beam['relative_errors']['oracle'].get('sag'), 0)}, "
                       f"frequency {_pct(beam['relative_errors']['oracle'].get('frequency'), 0)} off).")
    longs = [r for r in stress.get("rows", []) if r.get("group") == "long"]
    for r in longs:
        p = r.get("plausibility") or {}
        bad = []
        if r.get("unstable") or r.get("nan"):
            bad.append("unstable")
        if p.get("volume_ratio_min") is not None and p["volume_ratio_min"] < t["long_volume"]:
            bad.append(f"volume/rest down to {p['volume_ratio_min']:.2f}")
        if (p.get("strain_mean") or 0) > t["long_strain"]:
            bad.append(f"mean edge strain {_pct(p['strain_mean'])}")
        if bad:
            out.append(f"**{r['name']}** ({r['frames']} frames): " + ", ".join(bad) + ".")
    unstable = [r["name"] for r in stress.get("rows", []) if r.get("group") != "long" and (r.get("unstable") or r.get("nan"))]
    if unstable:
        out.append(f"**Stress**: unstable in {', '.join(unstable)} (see the stress table).")
    collapsed = [f"{r['name']} ({r['reference']['plausibility']['volume_ratio_min']:.2f})" for r in scenes.get("scenes", [])
                 if "reference" in r and (r["reference"]["plausibility"].get("volume_ratio_min") or 1.0) < t["truth_volume"]]
    worst_ref = result.get("reference", {}).get("all", {}).get("plausibility_worst", {}).get("volume_ratio_min")
    truth_collapsed = worst_ref is not None and worst_ref < t["truth_volume"]
    if collapsed or truth_collapsed:
        where = ", ".join(collapsed + ([f"the procedural set (worst {worst_ref:.2f})"] if truth_collapsed else []))
        out.append(f"**The ground truth itself** loses more than half its volume in {where}: the reference simulator's "
                   "elasticity collapses under strong compression, so distances there are measured against an implausible "
                   "truth; the model's plausibility columns still say what a viewer sees.")
    allb = result.get("splits", {}).get("all", {})
    orc = result.get("baselines", {}).get("oracle", {}).get("all", {})
    hold = result.get("baselines", {}).get("hold_still", {}).get("all", {})
    if allb and orc and hold:
        m, o, h = allb["rel_l2"]["mean"], orc["rel_l2"]["mean"], hold["rel_l2"]["mean"]
        if m is not None and o is not None and h:
            out.append(f"**Procedural evaluation set**: rel_l2 rollout mean {m:.3f} = {m / h:.2f}x hold-still; the oracle "
                       f"reaches {o:.3f} = {o / h:.2f}x. Model strain {_pct(allb['plausibility'].get('strain_mean'))} vs "
                       f"reference {_pct(result['reference']['all']['plausibility'].get('strain_mean'))}, worst volume/rest "
                       f"{_ratio(allb['plausibility_worst'].get('volume_ratio_min'))} vs "
                       f"{_ratio(result['reference']['all']['plausibility_worst'].get('volume_ratio_min'))}.")
    ed = result.get("energy_drift_detail") or {}
    mid = (ed.get("max") or {}).get("implicit_midpoint")
    if ed.get("max") and (mid is None or not mid < t["energy_drift"]):
        per = ", ".join(f"{mesh} {_drift(v.get('implicit_midpoint', {}).get('max'))}" for mesh, v in ed.get("per_mesh", {}).items())
        out.append(f"**Energy drift**: the implicit midpoint option does not conserve energy to {t['energy_drift']:.0%} over {ed.get('steps')} "
                   f"undamped steps (worst |E(t) - E(0)|/E(0) per mesh: {per}; backward Euler "
                   f"{_drift(ed['max'].get('backward_euler'))}, dissipative by design).")
    mlp = result.get("baselines", {}).get("latent_mlp", {}).get("all", {})
    if allb and mlp and mlp.get("rel_l2", {}).get("mean") is not None and allb["rel_l2"]["mean"] is not None \
            and mlp["rel_l2"]["mean"] < allb["rel_l2"]["mean"]:
        out.append(f"**Latent-MLP baseline**: the non-Lagrangian stepper in the same subspace is closer to the ground truth "
                   f"on the procedural set (rel_l2 mean {mlp['rel_l2']['mean']:.3f} vs the model's {allb['rel_l2']['mean']:.3f}).")
    return out or [no_shortfall_sentence()]


# =========================================================================== tables

def headline_table(scenes) -> str:
    header = ["scene", "vertices", "volume min", "strain", "max strain", "flipped", "rel_l2 1..24 model", "oracle",
              "noise floor", "hold still", "rel_l2 whole model", "oracle", "hold still", "amplitude"]
    rows = []
    for r in scenes.get("scenes", []):
        if "neurok" not in r:
            rows.append([r["name"], r.get("vertices"), r.get("error", "failed")] + [""] * (len(header) - 3))
            continue
        nf = r.get("noise_floor", {})
        h_m, h_o, h_s = r["neurok"]["horizons"], r["oracle"]["horizons"], r["hold_still"]["horizons"]
        rows.append([r["name"], r["vertices"], _three(r, "volume_ratio_min", _ratio),
                     _three(r, "strain_mean", _pct), _three(r, "strain_max", lambda v: _pct(v, 0)),
                     _three(r, "flipped_max", lambda v: _pct(v, 0)),
                     f"**{fmt(h_m.get('24'), 3)}**", fmt(h_o.get("24"), 3),
                     fmt(nf.get("rel_l2"), 3) if nf.get("available") else "n/a", fmt(h_s.get("24"), 3),
                     f"**{fmt(h_m.get('all'), 3)}**", fmt(h_o.get("all"), 3), fmt(h_s.get("all"), 3),
                     fmt(r["neurok"].get("amplitude_ratio"), 2)])
    return _table(header, rows)


def sheets_section(scenes, docs) -> str:
    out = []
    for r in scenes.get("scenes", []):
        if "sheet" not in r:
            continue
        out.append(f"**{r['name']}** — {r['title']}: [GIF]({_fig_link(r['gif'], docs)})\n\n"
                   f"![{r['name']}: reference | model | oracle]({_fig_link(r['sheet'], docs)})")
    return "\n\n".join(out) or "No scene was rendered."


def beam_table(beam) -> str:
    if not beam:
        return "Not run."
    q, e = beam["quantities"], beam["relative_errors"]
    header = ["engine", "static sag (mm)", "frequency, FFT (Hz)", "frequency, fit (Hz)", "damping ratio",
              "sag error", "frequency error", "damping error"]
    rows = []
    for name in ENGINES3:
        v = q.get(name, {})
        err = e.get(name, {})
        rows.append([name, fmt(v.get("sag") and 1000 * v["sag"], 2), fmt(v.get("frequency_fft"), 3), fmt(v.get("frequency"), 3),
                     fmt(v.get("damping_ratio"), 3), "—" if name == "reference" else _pct(err.get("sag")),
                     "—" if name == "reference" else _pct(err.get("frequency")),
                     "—" if name == "reference" else _pct(err.get("damping_ratio"))])
    return _table(header, rows)


def stress_table(stress) -> str:
    header = ["case", "vertices", "frames", "unstable", "NaN", "volume min (model)", "strain mean (model)",
              "flipped max (model)", "rel_l2 mean", "hold still", "ms/frame", "notes"]
    rows = []
    for r in stress["rows"]:
        p = r.get("plausibility") or {}
        notes = []
        if r.get("truth"):
            notes.append("no ground truth")
        if r.get("cross_resolution_rel") is not None:
            notes.append(f"differs from the smallest mesh's motion by {r['cross_resolution_rel']:.4f}")
        if r.get("error"):
            notes.append(r["error"][:80])
        if r.get("truth_error"):
            notes.append("reference failed: " + r["truth_error"][:60])
        rows.append([r["name"], r["vertices"], r["frames"], fmt(bool(r.get("unstable"))), fmt(r["nan"]),
                     _ratio(p.get("volume_ratio_min")), _pct(p.get("strain_mean")), _pct(p.get("flipped_max"), 0),
                     fmt(r.get("rel_l2_mean")), fmt(r.get("hold_still_rel_l2_mean")), fmt(r.get("ms_per_frame"), 2),
                     "; ".join(notes)])
    return _table(header, rows)


def eval_plausibility_table(result) -> str:
    header = ["split", "engine", "volume min", "strain mean", "strain max", "flipped max", "penetration max",
              "centroid path error", "amplitude"]
    rows = []
    for split in [s for s in ("train", "validation", "heldout", "all") if s in result["splits"]]:
        blocks = [("reference", result["reference"][split], None), ("neurok", result["splits"][split], True)]
        blocks += [(n, b[split], True) for n, b in result["baselines"].items() if n in ("oracle", "latent_mlp") and split in b]
        for name, b, moving in blocks:
            p, w = b["plausibility"], b["plausibility_worst"]
            rows.append([split, name, f"{_ratio(p.get('volume_ratio_min'))} ({_ratio(w.get('volume_ratio_min'))})",
                         f"{_pct(p.get('strain_mean'))} ({_pct(w.get('strain_mean'))})",
                         f"{_pct(p.get('strain_max'), 0)} ({_pct(w.get('strain_max'), 0)})",
                         f"{_pct(p.get('flipped_max'), 0)} ({_pct(w.get('flipped_max'), 0)})",
                         fmt(w.get("penetration_max"), 4),
                         fmt(b.get("centroid_path_error"), 4) if moving else "—",
                         fmt(b.get("amplitude_ratio"), 2) if moving else "—"])
    return _table(header, rows)


def eval_horizon_table(result) -> str:
    header = ["split", "engine", "frames 1..24", "frames 1..100", "whole rollout", "chamfer_l1", "unstable"]
    rows = []
    for split in [s for s in ("train", "validation", "heldout", "all") if s in result["splits"]]:
        for name, b in [("neurok", result["splits"][split])] + [(n, bl[split]) for n, bl in result["baselines"].items()
                                                               if split in bl]:
            h = b.get("horizons", {})
            rows.append([split, f"**{name}**" if name == "neurok" else name, fmt(h.get("24")), fmt(h.get("100")),
                         fmt(h.get("all")), fmt(b.get("chamfer_l1")), fmt(b.get("unstable_share"), 2)])
    return _table(header, rows)


def _metric_row(name, block):
    r = block["rel_l2"]
    last = f"{fmt(block.get('rel_l2_last'))} ({block.get('last_frame')})" if block.get("rel_l2_last") is not None else "n/a"
    return [name] + [fmt(r.get(str(f))) for f in (1, 10, 50, 100, 200)] + [last, fmt(r.get("mean")), fmt(block.get("chamfer_l1")),
                                                                           fmt(block.get("unstable_share"), 2), block.get("sequences")]


METRIC_HEADER = ["engine", "t=1", "t=10", "t=50", "t=100", "t=200", "last frame (t)", "mean", "chamfer_l1", "unstable",
                 "sequences"]


def eval_frame_tables(result) -> str:
    out = []
    for split in [s for s in ("train", "validation", "heldout", "all") if s in result["splits"]]:
        rows = [_metric_row("neurok", result["splits"][split])]
        rows += [_metric_row(b, blocks[split]) for b, blocks in result["baselines"].items() if split in blocks]
        out.append(f"**{split}**\n\n" + _table(METRIC_HEADER, rows))
    return "\n\n".join(out)


def family_table(result) -> str:
    rows = [_metric_row(f"family {k}", b) for k, b in result["families"].items()]
    rows += [_metric_row(f"scenario {k}", b) for k, b in result["scenarios"].items()]
    return _table(["group"] + METRIC_HEADER[1:], rows)


def energy_section(result, figs) -> str:
    ed = result.get("energy_drift_detail", {})
    if not ed.get("max"):
        return f"Not measured: {ed.get('note', 'switched off')}."
    integ = list(ed["max"])
    lines = [f"|E(t) - E(0)| / E(0), E = 1/2 |q'|^2 + V_elastic(q) (the basis is mass-orthonormal, so 1/2 |q'|^2 is the "
             f"kinetic energy), over {ed.get('steps')} undamped, force-free, gravity-free latent steps of "
             f"h = {fmt(ed.get('h'), 4)} s with the engine's own step function and Newton tolerance, from a deformation "
             f"along the mesh's soft elastic modes whose largest vertex displacement is {fmt(100 * ed.get('amplitude', 0.01), 2)}% "
             "of the diagonal, at rest velocity; max over the steps (inf = the state blew up or inverted). Backward Euler "
             f"is dissipative by design; implicit midpoint is the conservative option (target: below {TARGETS['energy_drift']:.0%}).", ""]
    rows = [[mesh] + [fmt(per[i]["max"], pct=True) for i in integ] + [fmt(per[i]["final"], pct=True) for i in integ]
            for mesh, per in ed.get("per_mesh", {}).items()]
    tight = ed.get("tight")
    if tight:
        for row, (mesh, per) in zip(rows, ed.get("per_mesh", {}).items()):
            row += [fmt(per[i].get("tight", {}).get("max"), pct=True) for i in integ]
    lines.append(_table(["mesh"] + [f"{i} (max)" for i in integ] + [f"{i} (final)" for i in integ]
                        + ([f"{i} (max, Newton tol {ed.get('tight_tolerance'):g})" for i in integ] if tight else []), rows))
    if tight:
        lines += ["", "The last columns re-solve every step to a much tighter Newton tolerance than the runtime's: what "
                      "remains there is the integrator's own drift, not the solver's stopping rule."]
    if "energy_drift" in figs:
        lines += ["", f"![energy drift]({figs['energy_drift']})"]
    return "\n".join(lines)


def speed_section(bench_result, figs) -> str:
    lines = [f"Scene: {bench_result.get('scene')}. ms_per_frame = step + decode of one frame after encoding once; peak_mb = "
             "peak resident memory above the level before the run.", ""]
    rows = [[r["engine"], r["device"], r["vertices"], r["frames"], fmt(r["encode_ms"], 1), fmt(r["ms_per_frame"], 2),
             fmt(r["peak_mb"], 1), r.get("note", "")] for r in bench_result["rows"]]
    lines.append(_table(["engine", "device", "vertices", "frames", "encode ms", "ms/frame", "peak MB", "note"], rows))
    lines.append("")
    for name, vals in bench_result.get("ratios", {}).items():
        lines.append(f"- {name.replace('_', ' ')}: " + ", ".join(f"{k} v: {v:.1f}x" for k, v in vals.items()))
    for note in bench_result.get("notes", []):
        lines.append(f"- {note}")
    if "time_vs_vertices" in figs:
        lines += ["", f"![time vs vertices]({figs['time_vs_vertices']})"]
    return "\n".join(lines)


def ablations_section(ablations, figs) -> str:
    if ablations.get("skipped"):
        return f"Not run: {ablations['skipped']}."
    trained = ablations.get("model_trained")
    lines = [f"On {len(ablations.get('sequences', []))} sequences of the evaluation set, no baselines. Latent sizes run the "
             f"checkpoint's own density (trained at {ablations.get('model_handles')} handles) in subspaces of other sizes, "
             "without retraining: the learned part of model v2 is a local density, independent of the subspace."
             + ("" if trained else " The checkpoint is untrained, so 'learned' and 'classical-only' are the same density "
                                    "and the rows must agree."), ""]
    rows = []
    for r in ablations["rows"]:
        if r.get("status") != "run":
            rows.append([r["name"]] + [""] * 8 + [f"not run: {r.get('reason')}"])
            continue
        rr, hz = r["rel_l2"], r.get("horizons") or {}
        rows.append([r["name"], fmt(hz.get("24")), fmt(rr.get("mean")), fmt(r.get("heldout_rel_l2_mean")),
                     fmt(r.get("volume_ratio_min"), 2), fmt(r.get("strain_mean") and 100 * r["strain_mean"], 1) + "%",
                     fmt(r.get("flipped_max"), 2), fmt(r.get("unstable_share"), 2), fmt(r.get("ms_per_frame"), 1), "run"])
    lines.append(_table(["variant", "rel_l2 1..24", "rel_l2 mean", "heldout mean", "volume min (worst)", "strain mean",
                         "flipped (worst)", "unstable", "ms/frame", "status"], rows))
    if "ablations" in figs:
        lines += ["", f"![ablations]({figs['ablations']})"]
    return "\n".join(lines)


def targets_table(suite, result, stress, bench_result) -> str:
    rows = [[name, text, {"met": "**met**", "missed": "**missed**"}.get(v, v)]
            for name, text, v in targets(suite, result, stress, bench_result)]
    return _table(["target", "measured", "verdict"], rows)


# =========================================================================== the report

def write_report(suite, result, scenes, beam, stress, bench_result, ablations, docs) -> Path:
    docs = Path(docs)
    fig_dir = docs / "figures"
    figs = make_figures(result, stress, bench_result, ablations, fig_dir)
    figs.update(scene_figures(scenes, beam, fig_dir))
    cfg, preset = suite["config"], suite["preset"]
    out = _rel(suite["out"])
    out_parent = str(Path(out).parent)
    model_opt = f" --model {_rel(suite['model_arg'])}" if suite.get("model_arg") else ""
    overrides = suite.get("overrides") or {}
    command = f"python -m engine evalsuite --preset {preset} --out {out_parent}{model_opt}"
    if overrides:
        kw = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
        generated = (f"Generated on {suite['started']} ({suite['wall_minutes']} minutes) by the {preset} preset **with "
                     f"overrides** ({kw}) of `{command}`. Every number below comes from that one run.")
    else:
        generated = f"Generated by `{command}` on {suite['started']} ({suite['wall_minutes']} minutes). Every number below comes from that one run."
    m = bench_result.get("machine", {})
    generated += (f" Machine: {m.get('cpu')}, {m.get('cpu_affinity') or m.get('cpu_count')} CPU cores, torch {m.get('torch')}; "
                  f"CUDA: {m.get('cuda') or 'none'}.")
    if suite.get("source"):
        generated += f" {suite['source']}"
    mm = suite.get("model_meta") or {}
    latent = scenes.get("oracle", {}).get("model_latent") or "unknown"
    if mm.get("steps"):
        generated += (f" Model: `{_rel(suite['model'])}` (latent {latent}; trained "
                      f"{mm.get('steps')} steps / {_minutes(mm.get('seconds'))} on {mm.get('sequences')} sequences).")
    else:
        generated += (f" Model: `{_rel(suite['model'])}` (latent {latent}; **untrained**: its learned correction is zero, "
                      "so its strain energy density is exactly the classical one).")
    preset_note = ("**Small preset**: short rollouts, few scenes, no ablations, no 100k-vertex timings; `make eval` "
                   "(`--preset full`) makes the full report." if preset == "small" else "")
    nf_avail = [r for r in scenes.get("scenes", []) if r.get("noise_floor", {}).get("available")]
    if nf_avail:
        noise_note = (f"Noise floor measured on {', '.join(r['name'] for r in nf_avail)} (`engine/evaluation/noise_floor.py`: "
                      f"the reference at its default resolution against twice that, first {cfg.get('noise_frames')} frames; "
                      "the ground truth here runs at the generator's coarser settings, so its own error is at least "
                      "this); n/a where this preset does not measure it (each costs two reference runs).")
    else:
        notes = {r.get("noise_floor", {}).get("note") for r in scenes.get("scenes", [])} - {None}
        noise_note = ("Noise floor: " + ("; ".join(sorted(notes)) if notes else "not measured") +
                      ". The column fills in when the reference simulator's noise-floor function is present.")
    enf = result.get("noise_floor", {})
    eval_noise = (f"rel_l2 {fmt(enf.get('rel_l2'))} ({fmt(enf.get('ratio_to_hold_still'), 2)}x hold-still) on "
                  f"{enf.get('measured_on')} sequence(s), first {enf.get('frames')} frames" if enf.get("available")
                  else enf.get("note", "not available"))
    gaps = [f"The {cfg['long_frames']}-frame runs and the largest pushes have no ground truth (the reference is too slow); "
            "they are judged by stability and plausibility alone.",
            "Inverted elements are not counted for the model: model v2's density is infinite at J <= 0, so no cubature "
            "sample can invert (its line search rejects such a step); flipped surface triangles measure what a viewer sees "
            "between the samples."]
    gaps += scenes.get("notes", [])
    if preset == "small":
        gaps.append("Small preset: no horizon-100 figures on the scenes, no frame-200 errors, no ablations.")
    if not any(r["device"] == "cuda" for r in bench_result["rows"]):
        gaps.append("No CUDA rows: torch saw no GPU on this machine.")
    q = (beam or {}).get("material", {})
    fields = {
        "generated": generated, "preset_note": preset_note,
        "oracle_dofs": scenes.get("oracle", {}).get("dofs"), "model_latent": scenes.get("oracle", {}).get("model_latent") or "unknown",
        "findings": "\n".join(f"- {f}" for f in findings(scenes, beam, stress, result)),
        "scene_frames": cfg["scene_frames"],
        "reference_settings": ", ".join(f"{k} {v:.4g}" for k, v in scenes.get("reference_settings", {}).items()),
        "headline_table": headline_table(scenes), "noise_note": noise_note,
        "plausibility_figure": figs.get("plausibility", ""), "sheets": sheets_section(scenes, docs),
        "beam_size": f"{(beam or {}).get('length')} x {(beam or {}).get('width')} x {(beam or {}).get('width')}",
        "beam_vertices": (beam or {}).get("vertices"), "beam_stiffness": f"{q.get('stiffness', 0):.3g}",
        "beam_density": f"{q.get('density', 0):.4g}", "beam_frames": (beam or {}).get("frames"),
        "beam_table": beam_table(beam), "beam_figure": figs.get("beam", ""),
        "long_frames": cfg["long_frames"], "push_max": stress.get("push_max"), **stress["summary"],
        "stress_table": stress_table(stress),
        "force_figure": f"![error vs force]({figs['error_vs_force']})" if "error_vs_force" in figs else "",
        "eval_data": _rel(suite["eval_data"]), "seed": cfg["seed"], "sequences": cfg["sequences"],
        "frames": cfg["frames"], "heldout": cfg["heldout"], "eval_plausibility_table": eval_plausibility_table(result),
        "eval_noise": eval_noise, "eval_horizon_table": eval_horizon_table(result),
        "eval_frame_tables": eval_frame_tables(result), "error_figure": figs.get("error_vs_frame", ""),
        "latent_mlp_note": str(result["baselines_info"].get("latent_mlp", {}).get("skipped")
                               or f"{result['baselines_info'].get('latent_mlp', {}).get('steps', '?')} steps"),
        "pin_drift": fmt(result["splits"]["all"].get("pin_drift"), 6),
        "pin_drift_truth": fmt(result["splits"]["all"].get("pin_drift_truth"), 6),
        "replay_ms": fmt(result.get("ms_per_frame"), 2), "family_table": family_table(result),
        "energy_section": energy_section(result, figs), "speed_section": speed_section(bench_result, figs),
        "targets_table": targets_table(suite, result, stress, bench_result),
        "ablations_section": ablations_section(ablations, figs),
        "commands": "\n".join([command,
                               f"# pieces: python -m engine eval --model {_rel(suite['model'])} --data {_rel(suite['eval_data'])} --json {out}/eval.json",
                               f"#         python -m engine bench --model {_rel(suite['model'])} --json {out}/bench.json "
                               f"--sizes {','.join(str(s) for s in cfg['bench_sizes'])} --frames {cfg['bench_frames']}"]),
        "out": out, "gaps": "\n".join(f"- {g}" for g in gaps),
    }
    text = Template(TEMPLATE.read_text(encoding="utf-8")).substitute(fields)
    docs.mkdir(parents=True, exist_ok=True)
    path = docs / "EVALUATION.md"
    atomic_write_text(path, text)
    return path
