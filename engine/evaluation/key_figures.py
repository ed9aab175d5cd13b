"""The evaluation's figures in one file, and the documents' tables made from it.

Every run of the suite writes `EVALUATION.json` beside its report (`collect`): the full preset's
into docs/, where it is committed, the small preset's into eval_out/small/. The tables of
README.md and docs/MODEL_CARD.md stand between markers

    <!-- figures:NAME -->
    ...
    <!-- /figures:NAME -->

and are written from the committed file by `neurok figures` (`write_tables`); `neurok figures
--check` (and the test suite) fails when a table and the file disagree (`stale_tables`). A
figure that no evaluation run measures does not go in these tables: the documents give it in
their text with the command that measures it.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from ..core.errors import NeurokError
from ..core.formats import atomic_write_text
from ..core.setup import SHEET_PROXY_VERTICES
from .targets import targets

ROOT = Path(__file__).resolve().parents[2]
FIGURES_FORMAT = "neurok.figures/1"
FIGURES_FILE = "docs/EVALUATION.json"
SHEETS = ("flag_wind", "grid", "drape")
HELD_OUT_SOLIDS = ("toy_drop", "jelly_poke", "torus")
PRIMITIVES = ("cone", "cylinder", "uv_sphere", "monkey", "ico_sphere")


# =========================================================================== collecting

def _round(v, digits=4):
    """v to `digits` significant digits (None and non-finite numbers stay None)."""
    if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(f"{v:.{digits}g}")


def _pair(block, key):
    """{reference, neurok, oracle} of one measure in a scene's cloth block."""
    return {k: _round(v) for k, v in (block or {}).get(key, {}).items()}


def _scene(r) -> dict:
    if "neurok" not in r:
        return {"name": r["name"], "kind": r.get("kind"), "vertices": r.get("vertices"), "error": r.get("error", "failed")}
    m, ref = r["neurok"], r.get("reference", {})
    plaus = lambda block, key: _round((block.get("plausibility") or {}).get(key))
    out = {"name": r["name"], "title": r.get("title"), "kind": r.get("kind"), "vertices": r.get("vertices"),
           "handles": r.get("handles"), "truth_lattice": r.get("truth_lattice"), "frames": r.get("frames"),
           "rel_l2": _round(m["horizons"].get("all")), "rel_l2_24": _round(m["horizons"].get("24")),
           "oracle": _round(r["oracle"]["horizons"].get("all")), "hold_still": _round(r["hold_still"]["horizons"].get("all")),
           "hold_still_24": _round(r["hold_still"]["horizons"].get("24")),
           "amplitude": _round(m.get("amplitude_ratio")), "ms_per_frame": _round(r.get("ms_per_frame")),
           "volume_min": {"neurok": plaus(m, "volume_ratio_min"), "reference": plaus(ref, "volume_ratio_min")},
           "strain_mean": {"neurok": plaus(m, "strain_mean"), "reference": plaus(ref, "strain_mean")},
           "flipped_max": {"neurok": plaus(m, "flipped_max"), "reference": plaus(ref, "flipped_max")}}
    if r.get("cloth"):
        out.update({key: _pair(r["cloth"], key) for key in ("far_edge_fall_4", "crossing_pairs", "overhang_tilt")
                    if key in r["cloth"]})
    return out


def _speed(bench_result) -> dict:
    """{engine: [[vertices, ms a frame, first prepare s], ...]}; the cloth with its layer, without
    it, and with its layer and self-collision apart."""
    out = {}
    for r in bench_result["rows"]:
        name = r["engine"]
        if name == "neurok_cloth":
            name = ("cloth_self_collision" if r.get("self_collision") else "cloth_full_layer" if r.get("full_layer")
                    else "cloth_layer" if r.get("sheet_layer") else "cloth_latent")
        out.setdefault(name, []).append([r["vertices"], _round(r["ms_per_frame"]), _round(r["encode_ms"] / 1000.0, 3)])
    return out


def _energy(result) -> dict:
    """The implicit midpoint's worst drift per mesh; None where the state blew up (at which step)."""
    out = {}
    for mesh, per in result.get("energy_drift_detail", {}).get("per_mesh", {}).items():
        r = per.get("implicit_midpoint")
        if r:
            out[mesh] = {"max": _round(r.get("max")), "steps": r.get("steps"), "failed_steps": r.get("failed_steps")}
    return out


def _procedural(result) -> dict:
    """Whole-rollout rel_l2 of the model, the oracle and hold-still on the procedural set (all splits)."""
    get = lambda block: _round(block.get("all", {}).get("rel_l2", {}).get("mean"))
    base = result.get("baselines", {})
    return {"neurok": get(result.get("splits", {})), "oracle": get(base.get("oracle", {})),
            "hold_still": get(base.get("hold_still", {})), "sequences": result.get("splits", {}).get("all", {}).get("sequences")}


def collect(suite, result, scenes, beam, stress, bench_result) -> dict:
    """The figures of one evaluation run, compact and named (`EVALUATION.json`)."""
    machine = bench_result.get("machine", {})
    return {
        "format": FIGURES_FORMAT, "preset": suite["preset"],
        "command": "make eval" if suite["preset"] == "full" else f"make eval-{suite['preset']}",
        "started": suite.get("started"), "source": suite.get("source"),
        "machine": {"cpu": machine.get("cpu"), "cores": machine.get("cpu_affinity") or machine.get("cpu_count"),
                    "torch": machine.get("torch"), "cuda": machine.get("cuda")},
        "speed": _speed(bench_result),
        "scenes": {r["name"]: _scene(r) for r in scenes.get("scenes", [])},
        "beam": {"quantities": {k: {q: _round(v.get(q)) for q in ("sag", "frequency", "damping_ratio")}
                                for k, v in (beam or {}).get("quantities", {}).items()},
                 "errors": {k: {q: _round(v.get(q)) for q in ("sag", "frequency", "damping_ratio")}
                            for k, v in (beam or {}).get("relative_errors", {}).items()}},
        "stress": dict(stress["summary"], force_scale_max=max(suite["config"].get("force_scales") or [1.0])),
        "procedural": _procedural(result),
        "energy_drift": _energy(result),
        "targets": [list(t) for t in targets(suite, result, stress, bench_result)],
    }


def write_figures(path, figures) -> Path:
    path = Path(path)
    atomic_write_text(path, json.dumps(figures, indent=1) + "\n")
    return path


def read_figures(path=None) -> dict:
    path = Path(path) if path else ROOT / FIGURES_FILE
    if not path.is_file():
        raise NeurokError(f"no figures file at {path}: run `make eval` first")
    figures = json.loads(path.read_text())
    if figures.get("format") != FIGURES_FORMAT:
        raise NeurokError(f"{path} is not a {FIGURES_FORMAT} file")
    return figures


# =========================================================================== formatting

def _fixed(v, digits) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _ms(v) -> str:
    return "n/a" if v is None else (f"{v:.1f}" if v < 100 else f"{v:,.0f}")


def _times(v) -> str:
    """A factor: 0.14×, 2.5×, 28×."""
    if v is None:
        return "n/a"
    return f"{v:.2f}×" if v < 1 else (f"{v:.1f}×" if v < 10 else f"{v:,.0f}×")


def _pct(v) -> str:
    """A share in per cent with two or three significant digits: 0.11 %, 5.7 %, 94.8 %."""
    if v is None:
        return "n/a"
    p = 100 * v
    return f"{p:.2f} %" if abs(p) < 1 else (f"{p:.1f} %" if abs(p) < 100 else f"{p:.0f} %")


def _div(a, b):
    return None if a is None or not b else a / b


def _k(n) -> str:
    return f"{round(n / 1000):,}k"


def _by_size(figures, engine) -> dict:
    """{rounded size in thousands: (vertices, ms, prepare s)} of one engine's bench rows."""
    return {round(v / 1000): (v, ms, s) for v, ms, s in figures["speed"].get(engine, [])}


def _ms_column(figures, engine, sizes) -> str:
    rows = _by_size(figures, engine)
    return " / ".join(_ms(rows[s][1]) if s in rows else "n/a" for s in sizes)


def _slower(figures, engine, base, sizes) -> str:
    a, b = _by_size(figures, engine), _by_size(figures, base)
    return " / ".join(_times(_div(a[s][1], b[s][1])) if s in a and s in b else "n/a" for s in sizes)


def _scenes(figures, names):
    return [figures["scenes"][n] for n in names if n in figures["scenes"] and "error" not in figures["scenes"][n]]


def _hold(s) -> str:
    """A scene's whole-rollout distance as a share of hold-still's."""
    return _times(_div(s["rel_l2"], s["hold_still"]))


def _distance(s) -> str:
    return _fixed(s["rel_l2"], 3)


def _amplitude(s) -> str:
    return _fixed(s["amplitude"], 2)


def _names(rows) -> str:
    return " / ".join(s["name"] for s in rows)


def _trio(rows, f) -> str:
    return " / ".join(f(s) for s in rows)


def _source(figures) -> str:
    return f"`{figures['command']}` ({figures['preset']} preset)"


def _verdict(figures, start) -> str:
    """The verdict of the first target whose name starts with `start`."""
    for name, _, verdict in figures["targets"]:
        if name.startswith(start):
            return verdict
    return "not measured"


# =========================================================================== the README's table

def _speed_rows(figures):
    sizes = sorted(_by_size(figures, "neurok"))
    size_text = " / ".join(_k(1000 * s) for s in sizes)
    solid = (f"{_ms_column(figures, 'neurok', sizes)} ms a frame; the reference simulator "
             f"{_slower(figures, 'reference', 'neurok', sizes)} slower, Blender's cloth on the same mesh "
             f"{_slower(figures, 'blender_cloth', 'neurok', sizes)} slower")
    layer = sorted(_by_size(figures, "cloth_layer"))
    latent = _by_size(figures, "cloth_latent")
    cloth = (f"{_ms_column(figures, 'cloth_layer', layer)} ms a frame; Blender's cloth on the same sheet "
             f"{_ms_column(figures, 'blender_cloth_sheet', layer)} ms. Target at 10k (<= 50 ms and 3× faster than "
             f"Blender's): {_verdict(figures, 'cloth at 10k')}")
    if latent:
        big = max(latent)
        cloth += f". The latent step alone (Low) at {_k(1000 * big)}: {_ms(latent[big][1])} ms"
    folds = _by_size(figures, "cloth_self_collision")
    if folds:
        cloth += f". With self-collision: {_ms_column(figures, 'cloth_self_collision', sorted(folds))} ms"
    full = _by_size(figures, "cloth_full_layer")
    if full:
        cloth += (f". Above {SHEET_PROXY_VERTICES:,} vertices Medium creases a {SHEET_PROXY_VERTICES:,}-vertex proxy; "
                  f"the layer on every vertex (High) at {' / '.join(_k(1000 * s) for s in sorted(full))}: "
                  f"{_ms_column(figures, 'cloth_full_layer', sorted(full))} ms")
    return [(f"speed, solids (learned engine), {size_text} vertices", solid),
            (f"speed, cloth with its full-space layer (creases), {' / '.join(_k(1000 * s) for s in layer)} vertices", cloth)]


def _accuracy_rows(figures):
    rows = []
    solids = _scenes(figures, HELD_OUT_SOLIDS)
    if solids:
        rows.append((f"accuracy, held-out solids: {_names(solids)}",
                     f"rel_l2 {_trio(solids, _distance)} "
                     f"({_trio(solids, _hold)} hold-still)"))
    sheets = _scenes(figures, SHEETS)
    if sheets:
        text = f"{_trio(sheets, _hold)} hold-still"
        fall = figures["scenes"].get("flag_wind", {}).get("far_edge_fall_4")
        if fall:
            text += (f"; the flag's far edge falls {1000 * fall['neurok']:.0f} mm by frame 4 "
                     f"(reference {1000 * fall['reference']:.0f})")
        tilt = figures["scenes"].get("drape", {}).get("overhang_tilt")
        if tilt:
            text += f"; the drape hangs {tilt['neurok']:.0f}° from vertical (reference {tilt['reference']:.0f}°)"
        rows.append((f"accuracy, sheets: {_names(sheets)}", text))
    prims = _scenes(figures, PRIMITIVES)
    if prims:
        rows.append((f"accuracy, Blender primitives: {_names(prims)}",
                     f"{_trio(prims, _hold)} hold-still; motion amplitude {_trio(prims, _amplitude)} "
                     f"of the reference's"))
    every = _scenes(figures, list(figures["scenes"]))
    if every:
        rows.append(("against exact physics in the same state space (oracle), every scene",
                     f"{_times(min(_div(s['rel_l2'], s['oracle']) for s in every))} to "
                     f"{_times(max(_div(s['rel_l2'], s['oracle']) for s in every))} its distance "
                     f"(median {_times(_median([_div(s['rel_l2'], s['oracle']) for s in every]))})"))
    p = figures["procedural"]
    if p.get("neurok") is not None:
        rows.append((f"procedural set ({p['sequences']} sequences)",
                     f"{_times(_div(p['neurok'], p['hold_still']))} hold-still (oracle {_times(_div(p['oracle'], p['hold_still']))})"))
    return rows


def _median(values):
    values = sorted(v for v in values if v is not None)
    return values[len(values) // 2] if values else None


def _physics_rows(figures):
    rows = []
    e = figures["beam"]["errors"].get("neurok")
    if e:
        rows.append(("pinned beam: static sag, first frequency, damping ratio",
                     f"{_pct(e['sag'])}, {_pct(e['frequency'])}, {_pct(e['damping_ratio'])} off the reference"))
    solids = [s for s in figures["scenes"].values() if s.get("kind") == "solid" and "error" not in s]
    if solids:
        low = min(solids, key=lambda s: s["volume_min"]["neurok"] if s["volume_min"]["neurok"] is not None else math.inf)
        flipped = max(s["flipped_max"]["neurok"] or 0.0 for s in solids)
        inside_out = f"at most {_pct(flipped)} of triangles inside out" if flipped else "no triangle inside out"
        rows.append(("plausibility, solids",
                     f"lowest volume {_pct(low['volume_min']['neurok'])} of the rest volume ({low['name']}; reference "
                     f"{_pct(low['volume_min']['reference'])}); {inside_out}"))
    sheets = _scenes(figures, SHEETS)
    if sheets:
        strain = lambda key: _trio(sheets, lambda s: _pct(s["strain_mean"][key]))
        cross = lambda key: _trio(sheets, lambda s: f"{s['crossing_pairs'][key]:.1f}" if s.get("crossing_pairs") else "n/a")
        rows.append(("plausibility, sheets: mean edge strain; crossing triangle pairs a frame",
                     f"{strain('neurok')} (reference {strain('reference')}); {cross('neurok')} (reference {cross('reference')})"))
    st = figures["stress"]
    rows.append((f"stability: {st['runs']} stress runs, pushes up to {st['force_scale_max']:g}× the training push's",
                 f"{st['nan_runs']} with NaN; {st['unstable_runs']} stopped by the plausibility guard with one line"))
    drift = figures["energy_drift"]
    if drift:
        parts = [f"{mesh} {_pct(d['max'])}" if d["max"] is not None else f"{mesh} blew up at step {d['steps']}"
                 for mesh, d in drift.items()]
        rows.append(("energy drift, implicit midpoint, 1,000 undamped steps (target < 1 %)",
                     f"{', '.join(parts)}: {_verdict(figures, 'energy drift')}"))
    return rows


def readme_table(figures) -> str:
    rows = _speed_rows(figures) + _accuracy_rows(figures) + _physics_rows(figures)
    source = _source(figures)
    lines = ["| what | measured | command |", "|---|---|---|"]
    lines += [f"| {what} | {measured} | {source} |" for what, measured in rows]
    return "\n".join(lines)


# =========================================================================== the model card's tables

def scenes_table(figures) -> str:
    """Every evaluation scene: distance, the oracle's, amplitude, volume, strain."""
    lines = ["| scene | vertices | handles | model rel_l2 (× hold-still) | oracle | model / oracle | amplitude | "
             "volume min, model / reference | edge strain, model / reference |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in figures["scenes"].values():
        if "error" in s:
            lines.append(f"| {s['name']} | {s['vertices']} | | not measured: {s['error'][:80]} | | | | | |")
            continue
        truth = "" if s.get("truth_lattice") in (None, 12) or s["kind"] != "solid" else f" (ground truth on {s['truth_lattice']} cells)"
        vol = (f"{_pct(s['volume_min']['neurok'])} / {_pct(s['volume_min']['reference'])}"
               if s["volume_min"]["neurok"] is not None else "—")
        lines.append(f"| {s['name']}{truth} | {s['vertices']:,} | {s['handles']} | {s['rel_l2']:.3f} ({_hold(s)}) | "
                     f"{s['oracle']:.3f} | {_times(_div(s['rel_l2'], s['oracle']))} | {s['amplitude']:.2f} | {vol} | "
                     f"{_pct(s['strain_mean']['neurok'])} / {_pct(s['strain_mean']['reference'])} |")
    return "\n".join(lines) + f"\n\n{_source(figures)}, {figures['scenes'] and next(iter(figures['scenes'].values())).get('frames')} frames each."


def speed_table(figures) -> str:
    """ms a frame per engine and size, and the first prepare."""
    engines = [("neurok", "learned engine, rubber sphere"), ("reference", "reference simulator, same sphere"),
               ("blender_cloth", "Blender's cloth, same sphere"), ("cloth_latent", "cloth sheet, latent step alone (Low)"),
               ("cloth_layer", "cloth sheet with its full-space layer"),
               ("cloth_self_collision", "the same with self-collision"),
               ("cloth_full_layer", "the layer on every vertex, no proxy (High)"),
               ("blender_cloth_sheet", "Blender's cloth, same sheet")]
    sizes = sorted({round(v / 1000) for rows in figures["speed"].values() for v, _, _ in rows})
    lines = ["| engine | " + " | ".join(f"{_k(1000 * s)} vertices" for s in sizes) + " | first prepare |",
             "|---|" + "---|" * (len(sizes) + 1)]
    for key, title in engines:
        rows = _by_size(figures, key)
        if not rows:
            continue
        prepare = " / ".join(f"{rows[s][2]:.1f} s" if s in rows else "—" for s in sizes)
        lines.append(f"| {title} | " + " | ".join(f"{_ms(rows[s][1])} ms" if s in rows else "—" for s in sizes)
                     + f" | {prepare} |")
    m = figures["machine"]
    return "\n".join(lines) + f"\n\n{_source(figures)} on {m['cores']} cores of an {m['cpu']} CPU, torch {m['torch']}."


def physics_table(figures) -> str:
    """The pinned beam against the reference, and the targets with their verdicts."""
    lines = ["| quantity | model | reference | off by |", "|---|---|---|---|"]
    q, e = figures["beam"]["quantities"], figures["beam"]["errors"].get("neurok", {})
    units = {"sag": ("static sag", lambda v: f"{1000 * v:.1f} mm"), "frequency": ("first frequency", lambda v: f"{v:.3f} Hz"),
             "damping_ratio": ("damping ratio", lambda v: f"{v:.3f}")}
    for key, (title, f) in units.items():
        if key in q.get("neurok", {}):
            lines.append(f"| pinned beam: {title} | {f(q['neurok'][key])} | {f(q['reference'][key])} | {_pct(e.get(key))} |")
    lines += ["", "| target | measured | verdict |", "|---|---|---|"]
    lines += [f"| {name} | {measured} | {verdict} |" for name, measured, verdict in figures["targets"]]
    return "\n".join(lines) + f"\n\n{_source(figures)}."


TABLES = {"README.md": {"readme": readme_table},
          "docs/MODEL_CARD.md": {"scenes": scenes_table, "speed": speed_table, "physics": physics_table}}


# =========================================================================== the documents

def _block(name) -> re.Pattern:
    return re.compile(rf"(<!-- figures:{name} [^\n]*-->\n)(.*?)(<!-- /figures:{name} -->)", re.S)


def _filled(text, name, table, path) -> str:
    pattern = _block(name)
    if not pattern.search(text):
        raise NeurokError(f"{path} has no '<!-- figures:{name} ... -->' block")
    return pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(3), text, count=1)


def _documents(root, figures):
    """[(path, its text now, its text with today's tables)]."""
    out = []
    for rel, tables in TABLES.items():
        path = Path(root) / rel
        text = path.read_text()
        new = text
        for name, make in tables.items():
            new = _filled(new, name, make(figures), rel)
        out.append((path, text, new))
    return out


def write_tables(root, figures) -> list[Path]:
    """Write the tables into the documents; the paths that changed."""
    changed = []
    for path, text, new in _documents(root, figures):
        if new != text:
            atomic_write_text(path, new)
            changed.append(path)
    return changed


def stale_tables(root, figures) -> list[Path]:
    """The documents whose tables differ from the figures file."""
    return [path for path, text, new in _documents(root, figures) if new != text]
