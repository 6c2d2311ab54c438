"""Figures of ``proteus eval`` (matplotlib, Agg backend: no display needed).

- ``fig3a_compliance.png``   accuracy vs tau against the floor, PROTEUS and the baselines;
- ``fig3b_floor_cost.png``   PROTEUS accuracy and cost vs tau with bootstrap 95 % bands, the limit;
- ``fig3c_dynamic.png``      the four dynamic scenarios (target vs rolling accuracy);
- ``cost_accuracy_plane.png`` every router, PROTEUS's and the tau-capable baselines' tau sweeps,
  the oracle and the hindsight-limit curve.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .dynamic import SCENARIOS

FIGURES = ("fig3a_compliance.png", "fig3b_floor_cost.png", "fig3c_dynamic.png", "cost_accuracy_plane.png")
STATIC_LINES = ("BestFixed", "CARROT-Quality", "CARROT-Balanced", "CARROT-Cost")
TAU_BASELINE_STYLE = {"Calibrated-Threshold": ("tab:orange", "s"), "OmniRouter-Style": ("tab:blue", "x")}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _pct(values) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in values], dtype=float) * 100


def fig_compliance(metrics: dict, path: Path) -> None:
    plt = _pyplot()
    rows = metrics["per_tau"]
    taus = np.array([r["tau"] for r in rows])
    acc = _pct([r["accuracy"] for r in rows])
    width = (taus[1] - taus[0]) * 100 * 0.6 if len(taus) > 1 else 0.6
    fig, ax = plt.subplots(figsize=(11, 5))
    colors = ["tab:green" if r["meets_floor"] else "tab:red" for r in rows]
    ax.bar(taus * 100, acc, width=width, color=colors, alpha=0.55, label="PROTEUS (green: meets tau, red: misses)")
    ax.hlines(taus * 100, taus * 100 - width / 2, taus * 100 + width / 2, colors="black", linewidth=2, label="floor tau")
    for name, (color, marker) in TAU_BASELINE_STYLE.items():
        base = metrics["baselines_per_tau"].get(name)
        if base:
            ax.plot(taus * 100, _pct([r["accuracy"] for r in base]), marker=marker, color=color, linestyle="-", label=name)
    styles = iter(["dotted", "dashdot", (0, (5, 2)), (0, (1, 3))])
    shown = [acc, taus * 100]
    for name in STATIC_LINES:
        row = metrics["routers"].get(name)
        if row:
            shown.append(np.array([row["accuracy"] * 100]))
            ax.axhline(row["accuracy"] * 100, color="saddlebrown" if "CARROT" in name else "gray",
                       linestyle=next(styles), linewidth=1.2, label=f"{name} (fixed)")
    values = np.concatenate(shown + [_pct([r["accuracy"] for r in rows]) for rows in metrics["baselines_per_tau"].values()])
    ax.set_ylim(max(0, np.nanmin(values) - 8), min(100, np.nanmax(values) + 4))
    ax.set_xlabel("requested accuracy target tau (%)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"(a) SLA compliance: accuracy vs tau ({metrics['dataset']})")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def fig_floor_cost(metrics: dict, path: Path) -> None:
    plt = _pyplot()
    rows = metrics["per_tau"]
    taus = np.array([r["tau"] for r in rows]) * 100
    acc = _pct([r["accuracy"] for r in rows])
    lo, hi = _pct([r["accuracy_ci_low"] for r in rows]), _pct([r["accuracy_ci_high"] for r in rows])
    cost = np.array([r["cost_per_1k"] for r in rows])
    c_lo, c_hi = np.array([r["cost_ci_low"] for r in rows]), np.array([r["cost_ci_high"] for r in rows])
    limit = np.array([np.nan if r.get("limit_cost_per_1k") is None else r["limit_cost_per_1k"] for r in rows])
    fig, ax = plt.subplots(figsize=(9, 5.8))
    ax.plot(taus, acc, color="tab:blue", marker="o", label="PROTEUS accuracy")
    ax.fill_between(taus, lo, hi, color="tab:blue", alpha=0.2, label="accuracy 95% CI (bootstrap)")
    ax.plot(taus, taus, color="black", linestyle="--", label="floor (accuracy = tau)")
    ax.fill_between(taus, taus, acc, where=acc >= taus, color="tab:green", alpha=0.12, label="reliability margin")
    ax.set_xlabel("requested accuracy target tau (%)")
    ax.set_ylabel("test accuracy (%)")
    right = ax.twinx()
    right.plot(taus, cost, color="tab:orange", linestyle=":", marker=".", label="PROTEUS cost")
    right.fill_between(taus, c_lo, c_hi, color="tab:orange", alpha=0.15, label="cost 95% CI")
    right.plot(taus, limit, color="tab:red", linestyle="-.", label="hindsight limit cost")
    right.set_ylabel("cost (USD per 1K queries)")
    handles = ax.get_legend_handles_labels()
    handles_r = right.get_legend_handles_labels()
    ax.legend(handles[0] + handles_r[0], handles[1] + handles_r[1], fontsize=8, loc="upper center",
              bbox_to_anchor=(0.5, -0.13), ncol=4)
    ax.set_title(f"(b) floor guarantee and cost vs tau ({metrics['dataset']})")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def fig_dynamic(metrics: dict, traces: dict, path: Path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharey=True)
    for ax, scenario in zip(axes.ravel(), SCENARIOS):
        for name, color in (("PROTEUS", "tab:blue"), ("Calibrated-Threshold", "tab:orange")):
            trace = traces.get(name, {}).get(scenario)
            if trace is None:
                continue
            if name == "PROTEUS":
                ax.plot(np.arange(len(trace["tau"])), trace["tau"] * 100, color="black", linestyle="--", label="target tau")
            ax.plot(trace["window_centre"], trace["rolling_accuracy"] * 100, color=color,
                    label=f"{name} (accuracy of the {metrics['dynamic'][scenario]['window']} queries around t)")
        summary = metrics["dynamic"].get(scenario, {})
        ax.set_title(
            f"{scenario} - PROTEUS: floor met in {summary.get('floor_satisfaction', float('nan')):.0%} of windows, "
            f"overshoot {summary.get('mean_overshoot_pp', float('nan')):+.1f} pp",
            fontsize=9,
        )
        ax.set_xlabel("query index")
        ax.set_ylabel("accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"(c) dynamic tau schedules, mean over {metrics['settings']['seeds']} seeds ({metrics['dataset']})")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def fig_plane(metrics: dict, curves: dict, limit, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 6))
    if limit is not None:
        acc = np.linspace(limit.base_accuracy, limit.max_accuracy, 200)
        cost = np.array([limit.cost_per_1k(a) for a in acc], dtype=float)
        ax.plot(cost, acc * 100, color="black", linewidth=1.5, label="hindsight limit (LP)")
    for name, curve in curves.items():
        style = {"PROTEUS": ("tab:green", "-")}.get(name, (TAU_BASELINE_STYLE.get(name, ("gray", ""))[0], "--"))
        ax.plot(curve["cost_per_1k"], np.asarray(curve["accuracy"]) * 100, color=style[0], linestyle=style[1],
                label=f"{name} (tau sweep)")
    for name, row in metrics["routers"].items():
        marker = "*" if name == "PROTEUS" else "o"
        ax.scatter(row["cost_per_1k"], row["accuracy"] * 100, marker=marker, s=90 if marker == "*" else 30, zorder=3)
        ax.annotate(name, (row["cost_per_1k"], row["accuracy"] * 100), fontsize=7, xytext=(4, 3), textcoords="offset points")
    oracle = metrics["oracle"]
    ax.scatter(oracle["cost_per_1k"], oracle["accuracy"] * 100, marker="D", color="black", zorder=3)
    ax.annotate("Oracle", (oracle["cost_per_1k"], oracle["accuracy"] * 100), fontsize=8, xytext=(4, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("cost (USD per 1K queries, log scale)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"cost-accuracy plane ({metrics['dataset']}); single points at tau = {metrics['headline_tau']:.3f}")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def write_figures(metrics: dict, plots: dict, out: Path) -> list[Path]:
    out = Path(out)
    paths = [out / name for name in FIGURES]
    fig_compliance(metrics, paths[0])
    fig_floor_cost(metrics, paths[1])
    fig_dynamic(metrics, plots.get("dynamic_traces", {}), paths[2])
    fig_plane(metrics, plots.get("curves", {}), plots.get("limit"), paths[3])
    return paths
