"""Plots of the evaluation report (matplotlib, Agg): error against frame per split, error
against force scale, time against vertices, ablations, energy drift, and, per evaluation scene,
plausibility against frame (volume / rest and edge strain of reference, model and oracle), and
the beam's tip signal."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .stress import PUSH_MAX
from .targets import TARGETS

COLORS = {"neurok": "C0", "latent_mlp": "C1", "pca_modal": "C2", "hold_still": "C7", "oracle": "C3", "reference": "k"}


def make_figures(result, stress, bench_result, ablations, fig_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    made = {}
    colors = COLORS
    # error vs frame
    splits = [s for s in ("train", "validation", "heldout") if s in result["splits"]]
    if splits:
        fig, axes = plt.subplots(1, len(splits), figsize=(4.2 * len(splits), 3.4), squeeze=False, sharey=True)
        for ax, split in zip(axes[0], splits):
            series = {"neurok": result["splits"][split].get("rel_l2_curve")}
            for b, blocks in result["baselines"].items():
                series[b] = blocks.get(split, {}).get("rel_l2_curve")
            for name, curve in series.items():
                if curve:
                    ys = np.array([np.nan if v is None else v for v in curve], float)
                    ax.plot(np.arange(1, len(ys)), ys[1:], label=name, color=colors.get(name), lw=2 if name == "neurok" else 1.2)
            ax.set_yscale("log")
            ax.set_title(f"{split} ({result['splits'][split]['sequences']} seq)")
            ax.set_xlabel("frame")
            ax.grid(alpha=0.3, which="both")
        axes[0][0].set_ylabel("rel_l2 (mean vertex error / diagonal)")
        axes[0][-1].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "eval_error_vs_frame.png", dpi=110)
        plt.close(fig)
        made["error_vs_frame"] = "figures/eval_error_vs_frame.png"
    # error vs force scale
    rows = [r for r in stress["rows"] if r["group"] == "force"]
    if rows:
        fig, ax = plt.subplots(figsize=(5.2, 3.6))
        xs = [r["param"] for r in rows]
        ax.plot(xs, [r.get("rel_l2_mean", np.nan) for r in rows], "o-", color="C0", label="neurok")
        ax.plot(xs, [r.get("hold_still_rel_l2_mean", np.nan) for r in rows], "s--", color="C7", label="hold still (= size of the motion)")
        bad = [(r["param"], r.get("rel_l2_mean", np.nan)) for r in rows if r.get("unstable")]
        if bad:
            ax.plot(*zip(*bad), "x", color="red", ms=10, label="unstable")
        ax.set_xscale("log"); ax.set_yscale("log")
        ax.set_xlabel(f"push / largest training push ({PUSH_MAX:g} m/s^2)")
        ax.set_ylabel("rel_l2 rollout mean")
        ax.grid(alpha=0.3, which="both"); ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "eval_error_vs_force.png", dpi=110)
        plt.close(fig)
        made["error_vs_force"] = "figures/eval_error_vs_force.png"
    # time vs vertices
    if bench_result["rows"]:
        fig, ax = plt.subplots(figsize=(5.4, 3.8))
        line = lambda r: (r["engine"] + (", self-collision" if r.get("self_collision") else "")  # noqa: E731
                          + (", layer on every vertex" if r.get("full_layer") else ""), r["device"])
        keys = sorted({line(r) for r in bench_result["rows"]})
        for k, (eng, dev) in enumerate(keys):
            rs = sorted([r for r in bench_result["rows"] if line(r) == (eng, dev)], key=lambda r: r["vertices"])
            ax.plot([r["vertices"] for r in rs], [r["ms_per_frame"] for r in rs], "o-", label=f"{eng} ({dev})", color=f"C{k}")
        ax.plot([10000, 100000], [TARGETS["ms_10k"], TARGETS["ms_100k"]], "k*", ms=10, label="targets (neurok)")
        ax.set_xscale("log"); ax.set_yscale("log")
        ax.set_xlabel("vertices"); ax.set_ylabel("ms per frame")
        ax.grid(alpha=0.3, which="both"); ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "eval_time_vs_vertices.png", dpi=110)
        plt.close(fig)
        made["time_vs_vertices"] = "figures/eval_time_vs_vertices.png"
    # ablations
    run_rows = [r for r in ablations.get("rows", []) if r.get("status") == "run"]
    if run_rows:
        fig, ax = plt.subplots(figsize=(7.0, 0.45 * len(run_rows) + 1.2))
        names = [r["name"] for r in run_rows]
        vals = [r["rel_l2"]["mean"] if r["rel_l2"]["mean"] is not None else np.nan for r in run_rows]
        ax.barh(range(len(run_rows)), vals, color=[f"C{i % 10}" for i in range(len(run_rows))])
        ax.set_yticks(range(len(run_rows)), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("rel_l2 rollout mean (evaluation subset)")
        ax.grid(alpha=0.3, axis="x")
        fig.tight_layout()
        fig.savefig(fig_dir / "eval_ablations.png", dpi=110)
        plt.close(fig)
        made["ablations"] = "figures/eval_ablations.png"
    # energy drift
    curves = result.get("energy_drift_detail", {}).get("curves")
    if curves:
        fig, ax = plt.subplots(figsize=(5.6, 3.8))
        styles = {"backward_euler": "--", "implicit_midpoint": "-"}
        for k, (mesh, per) in enumerate(curves.items()):
            for integ, c in per.items():
                ys = np.maximum(np.array(c["drift"], float), 1e-12)
                ax.plot(c["step"], ys, styles.get(integ, ":"), color=f"C{k}", label=f"{mesh} {integ}")
        ax.axhline(TARGETS["energy_drift"], color="k", lw=0.8, label=f"{TARGETS['energy_drift']:.0%} target")
        ax.set_yscale("log"); ax.set_xlabel("latent step (undamped, no forces)"); ax.set_ylabel("|E(t) - E(0)| / E(0)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
        fig.savefig(fig_dir / "eval_energy_drift.png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        made["energy_drift"] = "figures/eval_energy_drift.png"
    return made


def scene_figures(scenes: dict, beam: dict | None, fig_dir) -> dict:
    """Per-frame plausibility of every evaluation scene (volume / rest where the surface is
    closed, mean edge strain, rel_l2) for reference, model and oracle; the beam's tip."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    made = {}
    rows = [r for r in scenes.get("scenes", []) if "series" in r]
    if rows:
        fig, axes = plt.subplots(len(rows), 3, figsize=(11.5, 2.1 * len(rows) + 0.6), squeeze=False)
        for i, r in enumerate(rows):
            s = r["series"]
            for name in ("reference", "neurok", "oracle"):
                ser = s[name]
                fr = np.asarray(ser["frame"])
                kw = dict(color=COLORS[name], lw=2 if name == "neurok" else 1.2, label=name)
                vol = np.asarray(ser["volume_ratio"], float)
                if np.any(np.isfinite(vol)):
                    axes[i][0].plot(fr, vol, **kw)
                axes[i][1].plot(fr, np.maximum(np.asarray(ser["strain_mean"], float), 1e-5), **kw)
            for name in ("neurok", "oracle", "hold_still"):
                c = np.asarray(s["rel_l2"][name], float)
                axes[i][2].plot(np.arange(1, len(c)), c[1:], color=COLORS[name], lw=2 if name == "neurok" else 1.2,
                                label=name)
            if not np.any(np.isfinite(np.asarray(s["reference"]["volume_ratio"], float))):
                axes[i][0].text(0.5, 0.5, "open surface: no volume", ha="center", va="center",
                                transform=axes[i][0].transAxes, fontsize=8)
            else:
                axes[i][0].axhline(1.0, color="0.6", lw=0.8)
            axes[i][0].set_ylabel(r["name"], fontsize=9)
            axes[i][1].set_yscale("log")
            for ax in axes[i]:
                ax.grid(alpha=0.3)
                ax.tick_params(labelsize=7)
        axes[0][0].set_title("volume / rest", fontsize=9)
        axes[0][1].set_title("mean edge strain", fontsize=9)
        axes[0][2].set_title("rel_l2 against the reference", fontsize=9)
        axes[0][1].legend(fontsize=7)
        axes[0][2].legend(fontsize=7)
        for ax in axes[-1]:
            ax.set_xlabel("frame", fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "eval_plausibility.png", dpi=100)
        plt.close(fig)
        made["plausibility"] = "figures/eval_plausibility.png"
    if beam and beam.get("tip_signal"):
        fig, ax = plt.subplots(figsize=(6.0, 3.4))
        for name, sig in beam["tip_signal"].items():
            sig = np.asarray(sig, float)
            ax.plot(np.arange(len(sig)) * beam["dt"], 1000 * sig, color=COLORS.get(name), lw=2 if name == "neurok" else 1.2,
                    label=name)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("tip displacement z (mm)")
        ax.set_title(f"pinned beam {beam['length']} x {beam['width']} x {beam['width']} m under gravity", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "eval_beam.png", dpi=110)
        plt.close(fig)
        made["beam"] = "figures/eval_beam.png"
    return made
