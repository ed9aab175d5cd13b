"""docs/EVALUATION.md from the suite's results: the prose lives in `report_template.md`, the page
(string.Template placeholders) and below it the named fragments, the sentences chosen by the
results (findings, notes, section intros); this module only computes values and tables, picks
the fragments and fills them in."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from string import Template

from ..core.formats import atomic_write_text
from .plots import make_figures, scene_figures
from .targets import TARGETS, _minutes, energy_target, fmt, no_shortfall_sentence, targets

TEMPLATE = Path(__file__).with_name("report_template.md")
ROOT = Path(__file__).resolve().parent.parent.parent
# how the model line names each learned closure a checkpoint records (`training.train.CLOSURES`)
CLOSURE_WORDS = {"dissipation": "a dissipation closure (the damping's beta per kind of material)",
                 "compression": "a compression closure (a compressed cloth edge's share of the membrane stiffness)"}
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


def _oracle_size(dofs) -> str:
    """'96 DOFs' for a fixed oracle size; the phrase itself when the oracle follows the model's handles."""
    return f"{dofs} DOFs" if isinstance(dofs, (int, float)) else str(dofs or "unknown size")


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


# =========================================================================== template and fragments

FRAGMENTS_MARK = "\n\n<!-- fragments:"
_FRAGMENT = re.compile(r"^<!-- fragment (\w+) -->$", re.M)


@lru_cache(maxsize=1)
def _template():
    """The page (string.Template) and the named fragments, each fragment's lines joined into one."""
    page, _, rest = TEMPLATE.read_text(encoding="utf-8").partition(FRAGMENTS_MARK)
    pieces = _FRAGMENT.split(rest)[1:]
    fragments = {name: " ".join(line.strip() for line in body.strip().splitlines())
                 for name, body in zip(pieces[::2], pieces[1::2])}
    return page + "\n", fragments


def say(fragment, /, **values) -> str:
    """The template's fragment named `fragment` with its placeholders filled."""
    return Template(_template()[1][fragment]).substitute(values)


# =========================================================================== findings

def _volume_part(m, ref, o):
    vm, vr = m.get("volume_ratio_min"), ref.get("volume_ratio_min")
    if vm is None or vr is None or not (vm < 0 or vm < vr - TARGETS["volume_below_reference"]):
        return None
    return say("find_inside_out" if vm < 0 else "find_volume_loss", model=_ratio(vm), reference=f"{vr:.2f}",
               oracle=_ratio(o.get("volume_ratio_min")))


def _strain_part(m, ref, o):
    sm, sr = m.get("strain_mean") or 0.0, ref.get("strain_mean") or 0.0
    if sm > TARGETS["strain_mean"] and sm > TARGETS["strain_vs_reference"] * sr:
        return say("find_strain", mean=_pct(sm), max=_pct(m.get("strain_max"), 0), reference=_pct(sr),
                   oracle=_pct(o.get("strain_mean")))
    return None


def _shape_parts(r, m, ref):
    t, parts = TARGETS, []
    if r["kind"] == "solid" and (m.get("flipped_max") or 0) > t["solid_flipped"] \
            and (ref.get("flipped_max") or 0) < t["reference_flipped"]:
        parts.append(say("find_flipped", share=_pct(m["flipped_max"], 0)))
    gm, gr = m.get("growth_max"), ref.get("growth_max")
    if gm is not None and gr is not None and gm > t["growth_vs_reference"] * gr:
        parts.append(say("find_swells", model=f"{gm:.1f}", reference=f"{gr:.2f}"))
    return parts


def _amplitude_part(amp):
    within = TARGETS["amplitude_within"]
    if amp is None:
        return None
    if amp < TARGETS["amplitude_barely"]:
        return say("find_barely_moves", amplitude=f"{amp:.2f}")
    if amp < 1 - within:
        return say("find_moves_less", amplitude=f"{amp:.2f}", within=f"{within:.0%}")
    if amp > 1 + within:
        return say("find_moves_more", amplitude=f"{amp:.2f}", within=f"{within:.0%}")
    return None


def _degrees(v):
    return "n/a" if v is None else f"{v:.0f}°"


def _end_turns(r):
    if r["kind"] != "solid":
        return "n/a"
    return f"{_degrees(r['neurok'].get('end_turn_degrees'))} / {_degrees(r['oracle'].get('end_turn_degrees'))}"


def _turn_part(r):
    turn = r["neurok"].get("end_turn_degrees") if r["kind"] == "solid" else None   # a folded sheet has no up axis
    if turn is None or turn <= TARGETS["end_turn_degrees"]:
        return None
    return say("find_turned", degrees=_degrees(turn), oracle=_degrees(r["oracle"].get("end_turn_degrees")),
               target=f"{TARGETS['end_turn_degrees']:g}")


def _stability_part(r):
    if not r["neurok"].get("unstable"):
        return None
    why, frame = r.get("model_error") or "", r["neurok"].get("unstable_frame")
    if why.startswith("implausible"):
        return say("find_guard_stopped", frame=frame, why=why.split(":", 1)[-1].strip()[:120])
    return say("find_rollout_failed", frame=frame)


def _distance_part(r):
    t = TARGETS
    e_m, e_o, e_h = r["neurok"]["horizons"]["all"], r["oracle"]["horizons"]["all"], r["hold_still"]["horizons"]["all"]
    if e_m is None:
        return None
    if e_h and e_m >= e_h:
        return say("find_no_closer", model=f"{e_m:.3f}", hold=f"{e_h:.3f}", oracle=f"{e_o:.3f}")
    if e_o and e_m > t["oracle_factor"] * e_o:
        return say("find_vs_oracle", factor=f"{e_m / e_o:.1f}", model=f"{e_m:.3f}", oracle=f"{e_o:.3f}")
    if e_h and e_m > t["hold_still_factor"] * e_h:   # over the whole rollout
        as_far = e_o is not None and e_o > 0.8 * e_m
        oracle = say("oracle_as_far" if as_far else "oracle_factor", factor=_ratio(e_o and e_o / e_h))
        return say("find_departs", model=f"{e_m:.3f}", factor=f"{e_m / e_h:.2f}", target=f"{t['hold_still_factor']:g}",
                   oracle=oracle)
    return None


def _fold_part(r, m, ref):
    fm, fr = m.get("flipped_max"), ref.get("flipped_max")
    if r["kind"] == "cloth" and fm is not None and fr is not None and fr > TARGETS["cloth_reference_folds"] \
            and fm < TARGETS["cloth_fold_share"] * fr:
        return say("find_no_fold", model=_pct(fm, 0), reference=_pct(fr, 0))
    return None


def _scene_finding(r):
    m, ref, o = r["neurok"]["plausibility"], r["reference"]["plausibility"], r["oracle"]["plausibility"]
    parts = [_volume_part(m, ref, o), _strain_part(m, ref, o), *_shape_parts(r, m, ref),
             _amplitude_part(r["neurok"].get("amplitude_ratio")), _turn_part(r), _stability_part(r), _distance_part(r),
             _fold_part(r, m, ref)]
    parts = [p for p in parts if p]
    return say("find_scene", name=r["name"], title=r["title"], parts="; ".join(parts)) if parts else None


def _beam_finding(beam):
    if not (beam and beam.get("relative_errors", {}).get("neurok")):
        return None
    q, e = beam["quantities"], beam["relative_errors"]["neurok"]
    bits = [say(f"beam_{key}", error=_pct(e[key], 0), model=fmt(q["neurok"].get(key) and q["neurok"][key] * scale, 3),
                reference=fmt(q["reference"].get(key) and q["reference"][key] * scale, 3))
            for key, scale in (("sag", 1000), ("frequency", 1), ("damping_ratio", 1))
            if e.get(key) is not None and e[key] > TARGETS["beam_error"]]
    oracle = beam["relative_errors"]["oracle"]
    return say("find_beam", parts="; ".join(bits), sag=_pct(oracle.get("sag"), 0),
               frequency=_pct(oracle.get("frequency"), 0)) if bits else None


def _long_finding(r):
    p = r.get("plausibility") or {}
    bad = [say("long_unstable")] if r.get("unstable") or r.get("nan") else []
    if p.get("volume_ratio_min") is not None and p["volume_ratio_min"] < TARGETS["long_volume"]:
        bad.append(say("long_volume", volume=f"{p['volume_ratio_min']:.2f}"))
    if (p.get("strain_mean") or 0) > TARGETS["long_strain"]:
        bad.append(say("long_strain", strain=_pct(p["strain_mean"])))
    return say("find_long", name=r["name"], frames=r["frames"], parts=", ".join(bad)) if bad else None


def _stress_findings(stress):
    rows = stress.get("rows", [])
    out = [_long_finding(r) for r in rows if r.get("group") == "long"]
    unstable = [r["name"] for r in rows if r.get("group") != "long" and (r.get("unstable") or r.get("nan"))]
    return out + ([say("find_stress", names=", ".join(unstable))] if unstable else [])


def _unmeasured_finding(scenes):
    """The scenes whose reference failed (the work budget stopped it, say): nothing to compare."""
    def why(error):     # "reference failed: WorkBudgetExceeded: the reference simulator gave up at frame 2: ..."
        text = error.removeprefix("reference failed: ")
        head, _, rest = text.partition(": ")
        return (rest if head.isidentifier() and rest else text).split(":")[0]
    parts = [f"{r['name']} ({why(r.get('error', 'failed'))})" for r in scenes.get("scenes", []) if "neurok" not in r]
    return say("find_unmeasured", parts=", ".join(parts)) if parts else None


def _truth_finding(scenes, result):
    limit = TARGETS["truth_volume"]
    where = [f"{r['name']} ({r['reference']['plausibility']['volume_ratio_min']:.2f})" for r in scenes.get("scenes", [])
             if "reference" in r and (r["reference"]["plausibility"].get("volume_ratio_min") or 1.0) < limit]
    worst = result.get("reference", {}).get("all", {}).get("plausibility_worst", {}).get("volume_ratio_min")
    if worst is not None and worst < limit:
        where.append(say("truth_procedural", volume=f"{worst:.2f}"))
    return say("find_truth_collapsed", where=", ".join(where)) if where else None


def _procedural_finding(result):
    allb = result.get("splits", {}).get("all", {})
    orc = result.get("baselines", {}).get("oracle", {}).get("all", {})
    hold = result.get("baselines", {}).get("hold_still", {}).get("all", {})
    if not (allb and orc and hold):
        return None
    m, o, h = allb["rel_l2"]["mean"], orc["rel_l2"]["mean"], hold["rel_l2"]["mean"]
    if m is None or o is None or not h:
        return None
    ref = result["reference"]["all"]
    return say("find_procedural", model=f"{m:.3f}", model_factor=f"{m / h:.2f}", oracle=f"{o:.3f}",
               oracle_factor=f"{o / h:.2f}", strain=_pct(allb["plausibility"].get("strain_mean")),
               strain_reference=_pct(ref["plausibility"].get("strain_mean")),
               volume=_ratio(allb["plausibility_worst"].get("volume_ratio_min")),
               volume_reference=_ratio(ref["plausibility_worst"].get("volume_ratio_min")))


def _energy_finding(result):
    ed = result.get("energy_drift_detail") or {}
    mid = (ed.get("max") or {}).get("implicit_midpoint")
    if not ed.get("max") or (mid is not None and mid < TARGETS["energy_drift"]):
        return None
    return say("find_energy", target=f"{TARGETS['energy_drift']:.0%}", steps=ed.get("steps"), per_mesh=energy_target(result)[1],
               backward_euler=_drift(ed["max"].get("backward_euler")))


def _mlp_finding(result):
    model = result.get("splits", {}).get("all", {}).get("rel_l2", {}).get("mean")
    mlp = result.get("baselines", {}).get("latent_mlp", {}).get("all", {}).get("rel_l2", {}).get("mean")
    if model is None or mlp is None or not mlp < model:
        return None
    return say("find_latent_mlp", mlp=f"{mlp:.3f}", model=f"{model:.3f}")


def findings(scenes, beam, stress, result) -> list[str]:
    """Plain sentences on where the model falls short, each backed by a number in the tables."""
    out = [_scene_finding(r) for r in scenes.get("scenes", []) if "neurok" in r] + [_unmeasured_finding(scenes)]
    out += [_beam_finding(beam), *_stress_findings(stress), _truth_finding(scenes, result),
            _procedural_finding(result), _energy_finding(result), _mlp_finding(result)]
    return [f for f in out if f] or [no_shortfall_sentence()]


# =========================================================================== tables

def headline_table(scenes) -> str:
    header = ["scene", "vertices", "handles", "volume min", "strain", "max strain", "flipped", "rel_l2 1..24 model", "oracle",
              "noise floor", "hold still", "rel_l2 whole model", "oracle", "prior", "model / oracle", "model / prior",
              "hold still", "amplitude", "end turn model / oracle"]
    rows = []
    for r in scenes.get("scenes", []):
        if "neurok" not in r:
            rows.append([r["name"], r.get("vertices"), "", r.get("error", "failed")] + [""] * (len(header) - 4))
            continue
        nf = r.get("noise_floor", {})
        h_m, h_o, h_s = r["neurok"]["horizons"], r["oracle"]["horizons"], r["hold_still"]["horizons"]
        rows.append([r["name"], r["vertices"], r.get("handles", ""), _three(r, "volume_ratio_min", _ratio),
                     _three(r, "strain_mean", _pct), _three(r, "strain_max", lambda v: _pct(v, 0)),
                     _three(r, "flipped_max", lambda v: _pct(v, 0)),
                     f"**{fmt(h_m.get('24'), 3)}**", fmt(h_o.get("24"), 3),
                     fmt(nf.get("rel_l2"), 3) if nf.get("available") else "n/a", fmt(h_s.get("24"), 3),
                     f"**{fmt(h_m.get('all'), 3)}**", fmt(h_o.get("all"), 3), fmt(_whole(r, "prior"), 3),
                     _ratio_of(h_m.get("all"), h_o.get("all")), _ratio_of(h_m.get("all"), _whole(r, "prior")),
                     fmt(h_s.get("all"), 3),
                     fmt(r["neurok"].get("amplitude_ratio"), 2),
                     _end_turns(r)])
    return _table(header, rows)


def _whole(row, run):
    """A run's rel_l2 over the whole rollout in a scene row, or None where it was not run."""
    return row.get(run, {}).get("horizons", {}).get("all")


def _ratio_of(a, b) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}×"


def sheets_section(scenes, docs) -> str:
    out = []
    for r in scenes.get("scenes", []):
        if "sheet" not in r:
            continue
        out.append(f"**{r['name']}** — {r['title']}: [GIF]({_fig_link(r['gif'], docs)})\n\n"
                   f"![{r['name']}: reference | model | oracle]({_fig_link(r['sheet'], docs)})")
    return "\n\n".join(out) or say("no_sheets")


def cloth_table(scenes) -> str:
    """The sheets' own measures (`scene_eval.cloth_measures`), reference / model / oracle."""
    rows = []
    for r in scenes.get("scenes", []):
        c = r.get("cloth")
        if not c:
            continue
        trio = lambda key, f: " / ".join(f(c[key][k]) if c.get(key) and k in c[key] else "n/a"
                                         for k in ("reference", "neurok", "oracle"))
        rows.append([r["name"], trio("far_edge_fall_4", lambda v: f"{1000 * v:.0f} mm"),
                     trio("crossing_pairs", lambda v: f"{v:.1f}"), trio("overhang_tilt", lambda v: f"{v:.0f}°")])
    if not rows:
        return say("no_sheets")
    return _table(["scene", "far edge fall by frame 4", "crossing triangle pairs a frame", "overhang from vertical"], rows)


def beam_table(beam) -> str:
    if not beam:
        return say("not_run")
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
        return say("energy_off", note=ed.get("note", say("switched_off")))
    integ = list(ed["max"])
    lines = [say("energy_intro", steps=ed.get("steps"), h=fmt(ed.get("h"), 4), amplitude=fmt(100 * ed.get("amplitude", 0.01), 2),
                 target=f"{TARGETS['energy_drift']:.0%}"), ""]
    rows = [[mesh] + [fmt(per[i]["max"], pct=True) for i in integ] + [fmt(per[i]["final"], pct=True) for i in integ]
            for mesh, per in ed.get("per_mesh", {}).items()]
    tight = ed.get("tight")
    if tight:
        for row, (mesh, per) in zip(rows, ed.get("per_mesh", {}).items()):
            row += [fmt(per[i].get("tight", {}).get("max"), pct=True) for i in integ]
    lines.append(_table(["mesh"] + [f"{i} (max)" for i in integ] + [f"{i} (final)" for i in integ]
                        + ([f"{i} (max, Newton tol {ed.get('tight_tolerance'):g})" for i in integ] if tight else []), rows))
    if tight:
        lines += ["", say("energy_tight")]
    if "energy_drift" in figs:
        lines += ["", f"![energy drift]({figs['energy_drift']})"]
    return "\n".join(lines)


def speed_section(bench_result, figs) -> str:
    lines = [say("speed_intro", scene=bench_result.get("scene")), ""]
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
        return say("ablations_skipped", why=ablations["skipped"])
    intro = [say("ablations_intro", sequences=len(ablations.get("sequences", [])), handles=ablations.get("model_handles"))]
    if not ablations.get("model_trained"):
        intro.append(say("ablations_untrained"))
    lines = [" ".join(intro), ""]
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

def _generated(suite, bench_result, scenes, command) -> str:
    """The 'generated by' paragraph: command, machine, code and model."""
    overrides = suite.get("overrides") or {}
    physics = suite.get("physics") or {}
    minutes = f"{suite['wall_minutes']} minutes"
    if physics.get("jobs"):
        minutes += (f"; {physics['computed']} of its {physics['jobs']} physics runs computed in it"
                    + ("" if physics["computed"] == physics["jobs"] else ", the others kept from an earlier run"))
    when = dict(command=command, started=suite["started"], minutes=minutes)
    if overrides:
        kw = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
        parts = [say("generated_overrides", preset=suite["preset"], overrides=kw, **when)]
    else:
        parts = [say("generated_plain", **when)]
    m = bench_result.get("machine", {})
    parts.append(say("machine", cpu=m.get("cpu"), cores=m.get("cpu_affinity") or m.get("cpu_count"), torch=m.get("torch"),
                     cuda=m.get("cuda") or "none"))
    if suite.get("source"):
        parts.append(suite["source"])
    mm = suite.get("model_meta") or {}
    model = dict(model=_rel(suite["model"]), latent=scenes.get("oracle", {}).get("model_latent") or "unknown")
    if mm.get("closures") and set(mm["closures"]) <= set(CLOSURE_WORDS):
        parts.append(say("model_closures", closures=" and ".join(CLOSURE_WORDS[c] for c in mm["closures"]),
                         steps=mm.get("steps"), minutes=_minutes(mm.get("seconds")),
                         sequences=mm.get("sequences"), frames=mm.get("free_run") or "short", **model))
    elif str(mm.get("density", "")).startswith("classical prior"):
        parts.append(say("model_prior", steps=mm.get("steps"), minutes=_minutes(mm.get("seconds")), **model))
    elif mm.get("steps"):
        parts.append(say("model_trained", steps=mm.get("steps"), minutes=_minutes(mm.get("seconds")),
                         sequences=mm.get("sequences"), **model))
    else:
        parts.append(say("model_untrained", **model))
    return " ".join(parts)


def _noise_note(scenes, cfg) -> str:
    measured = [r for r in scenes.get("scenes", []) if r.get("noise_floor", {}).get("available")]
    if measured:
        return say("noise_measured", scenes=", ".join(r["name"] for r in measured), frames=cfg.get("noise_frames"))
    notes = {r.get("noise_floor", {}).get("note") for r in scenes.get("scenes", [])} - {None}
    return say("noise_missing", notes="; ".join(sorted(notes)) if notes else say("not_measured"))


def _eval_noise(result) -> str:
    enf = result.get("noise_floor", {})
    if not enf.get("available"):
        return enf.get("note", say("not_available"))
    return say("eval_noise", rel_l2=fmt(enf.get("rel_l2")), ratio=fmt(enf.get("ratio_to_hold_still"), 2),
               sequences=enf.get("measured_on"), frames=enf.get("frames"))


def _gaps(suite, scenes, bench_result) -> list[str]:
    """The 'Not covered' list."""
    gaps = [say("gap_long_runs", long_frames=suite["config"]["long_frames"]), say("gap_inversion")]
    gaps += scenes.get("notes", [])
    if suite["preset"] == "small":
        gaps.append(say("gap_small_preset"))
    if not any(r["device"] == "cuda" for r in bench_result["rows"]):
        gaps.append(say("gap_no_cuda"))
    return gaps


def _commands(suite, command, out) -> str:
    cfg, model, data = suite["config"], _rel(suite["model"]), _rel(suite["eval_data"])
    return "\n".join([command,
                      f"# pieces: python -m engine eval --model {model} --data {data} --json {out}/eval.json",
                      f"#         python -m engine bench --model {model} --json {out}/bench.json "
                      f"--sizes {','.join(str(s) for s in cfg['bench_sizes'])} --frames {cfg['bench_frames']}"
                      + (f" --reference-frames {cfg['bench_reference_frames']}" if cfg.get("bench_reference_frames") else "")])


def _scene_fields(scenes, beam, stress, result, cfg, figs, docs) -> dict:
    """Placeholders of the sections on the scenes, the beam and the stress runs."""
    q, b = (beam or {}).get("material", {}), beam or {}
    return {
        "oracle_dofs": _oracle_size(scenes.get("oracle", {}).get("dofs")), "model_latent": scenes.get("oracle", {}).get("model_latent") or "unknown",
        "findings": "\n".join(f"- {f}" for f in findings(scenes, beam, stress, result)),
        "scene_frames": cfg["scene_frames"],
        "reference_settings": ", ".join(f"{k} {v:.4g}" for k, v in scenes.get("reference_settings", {}).items())
                              + "".join(f"; {n} at {c} cells, converged there already"
                                        for n, c in scenes.get("converged_coarser", {}).items())
                              + "".join(f"; {n} at {c} cells, the finest where the reference finishes (not converged)"
                                        for n, c in scenes.get("finished_coarser", {}).items()),
        "headline_table": headline_table(scenes), "noise_note": _noise_note(scenes, cfg),
        "plausibility_figure": figs.get("plausibility", ""), "sheets": sheets_section(scenes, docs), "cloth_table": cloth_table(scenes),
        "beam_size": f"{b.get('length')} x {b.get('width')} x {b.get('width')}",
        "beam_vertices": b.get("vertices"), "beam_stiffness": f"{q.get('stiffness', 0):.3g}",
        "beam_density": f"{q.get('density', 0):.4g}", "beam_frames": b.get("frames"),
        "beam_table": beam_table(beam), "beam_figure": figs.get("beam", ""),
        "long_frames": cfg["long_frames"], "push_max": stress.get("push_max"), **stress["summary"],
        "stress_table": stress_table(stress),
        "force_figure": f"![error vs force]({figs['error_vs_force']})" if "error_vs_force" in figs else "",
    }


def set_truth(cfg) -> str:
    """What the procedural set's ground truth is: the reference on the preset's lattice."""
    from ..training.generate import CONVERGED_LATTICE, GENERATOR_LATTICE
    cells = cfg.get("set_lattice", GENERATOR_LATTICE)
    if cells >= CONVERGED_LATTICE:
        return (f"Ground truth: the reference at the generator's substep on the converged {cells}-cell lattice the "
                "model's solid training data is made on. On the generator's 4 cells, before solid physics 4, a body "
                "stood on its lattice's flat sole: this set's squeezed union stayed upright there (5°) where on 8 and "
                "12 cells it tips over and rolls, as the model's does (`experiments/ground_truth_convergence.py --data "
                "data/eval/small`).")
    return (f"Ground truth: the reference at the generator's settings, whose {cells}-cell lattice is not converged for "
            "solids (a stiffer body: 0.09 rel_l2 off a dropped blob's converged path, where the model is 0.19 from "
            "that path; before solid physics 4 a body stood on its lattice's flat sole there, so a squeezed one stayed "
            "upright that tips over on 8 cells; docs/DESIGN_NOTES.md §6). Read these rows as agreement with that coarse reference; the "
            "held-out scenes above are judged against converged ground truth.")


def _eval_fields(suite, result, cfg, figs) -> dict:
    """Placeholders of the section on the procedural evaluation set."""
    mlp = result["baselines_info"].get("latent_mlp", {})
    return {
        "eval_data": _rel(suite["eval_data"]), "seed": cfg["seed"], "sequences": cfg["sequences"], "set_truth": set_truth(cfg),
        "frames": cfg["frames"], "heldout": cfg["heldout"], "eval_plausibility_table": eval_plausibility_table(result),
        "eval_noise": _eval_noise(result), "eval_horizon_table": eval_horizon_table(result),
        "eval_frame_tables": eval_frame_tables(result), "error_figure": figs.get("error_vs_frame", ""),
        "latent_mlp_note": str(mlp.get("skipped") or f"{mlp.get('steps', '?')} steps"),
        "pin_drift": fmt(result["splits"]["all"].get("pin_drift"), 6),
        "pin_drift_truth": fmt(result["splits"]["all"].get("pin_drift_truth"), 6),
        "replay_ms": fmt(result.get("ms_per_frame"), 2), "family_table": family_table(result),
    }


def write_report(suite, result, scenes, beam, stress, bench_result, ablations, docs) -> Path:
    docs = Path(docs)
    fig_dir = docs / "figures"
    figs = make_figures(result, stress, bench_result, ablations, fig_dir)
    figs.update(scene_figures(scenes, beam, fig_dir))
    cfg, preset = suite["config"], suite["preset"]
    out = _rel(suite["out"])
    model_opt = f" --model {_rel(suite['model_arg'])}" if suite.get("model_arg") else ""
    command = f"python -m engine evalsuite --preset {preset} --out {Path(out).parent}{model_opt}"
    fields = {
        "generated": _generated(suite, bench_result, scenes, command),
        "preset_note": say("small_preset") if preset == "small" else "",
        **_scene_fields(scenes, beam, stress, result, cfg, figs, docs), **_eval_fields(suite, result, cfg, figs),
        "energy_section": energy_section(result, figs), "speed_section": speed_section(bench_result, figs),
        "targets_table": targets_table(suite, result, stress, bench_result),
        "ablations_section": ablations_section(ablations, figs),
        "commands": _commands(suite, command, out), "out": out,
        "gaps": "\n".join(f"- {g}" for g in _gaps(suite, scenes, bench_result)),
    }
    text = Template(_template()[0]).substitute(fields)
    docs.mkdir(parents=True, exist_ok=True)
    path = docs / "EVALUATION.md"
    atomic_write_text(path, text)
    return path
