"""PROTEUS against the operator baselines across ``proteus eval`` runs (seeds x datasets).

``python -m proteus_train.evaluation.compare runs/eval/* --out runs/frontier.json`` reads each run's
``metrics.json`` (and its artifact's manifest) and prints, per run, at every tau of the declared
grid: who meets the floor, their test cost, PROTEUS's cost ratio to each baseline and who is the
cheapest among those meeting the floor; then per dataset the figures of the acceptance criteria
with their spread over the runs (seeds).  "Within the CI": PROTEUS's bootstrap cost interval
reaches down to the baseline's cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

BASELINES = ("Single-Model", "LiteLLM-Complexity")
PROTEUS = "PROTEUS"


def per_tau_rows(metrics: dict) -> list[dict]:
    """Per tau of the declared grid: PROTEUS and each operator baseline (floor met, cost, accuracy,
    PROTEUS's cost ratio) and the cheapest of those meeting the floor."""
    rows = []
    per = {PROTEUS: metrics["per_tau"], **{b: metrics["baselines_per_tau"][b] for b in BASELINES}}
    for j, p in enumerate(per[PROTEUS]):
        row = {"tau": p["tau"], PROTEUS: {"meets": p["meets_floor"], "cost_per_1k": p["cost_per_1k"], "accuracy": p["accuracy"]}}
        meeting = {PROTEUS: p["cost_per_1k"]} if p["meets_floor"] else {}
        for b in BASELINES:
            r = per[b][j]
            both = p["meets_floor"] and r["meets_floor"]
            row[b] = {
                "meets": r["meets_floor"],
                "cost_per_1k": r["cost_per_1k"],
                "accuracy": r["accuracy"],
                "ratio": p["cost_per_1k"] / r["cost_per_1k"] if r["cost_per_1k"] > 0 else None,
                "proteus_not_dearer": (p["cost_ci_low"] <= r["cost_per_1k"]) if both else None,
            }
            if r["meets_floor"]:
                meeting[b] = r["cost_per_1k"]
        row["cheapest_meeting_floor"] = min(meeting, key=meeting.get) if meeting else None
        rows.append(row)
    return rows


def run_summary(metrics: dict, manifest: dict) -> dict:
    """The per-tau comparison and the acceptance figures of one ``proteus eval`` run."""
    rows = per_tau_rows(metrics)
    ratios = {b: [r[b]["ratio"] for r in rows if r[b]["ratio"] is not None] for b in BASELINES}
    cal = manifest["calibration"]
    candidates = manifest["metrics"].get("operating_point_candidates", [])
    single = [c["accuracy"] for c in candidates if c["rule"].startswith("slot:")]
    quality = [c["accuracy"] for c in candidates if c["rule"] == "quality"]
    detail = metrics["max_compliant_tau_detail"]
    return {
        "dataset": metrics["dataset"],
        "seed": manifest["training"]["config"]["seed"],
        "rows": rows,
        "floors_met": sum(r[PROTEUS]["meets"] for r in rows),
        "n_tau": len(rows),
        "not_dearer": {b: [sum(r[b]["proteus_not_dearer"] is True for r in rows), sum(r[b]["proteus_not_dearer"] is not None for r in rows)] for b in BASELINES},
        "median_ratio": {b: statistics.median(v) if v else None for b, v in ratios.items()},
        "declared_top": manifest["tau_range"][1],
        "margin": cal["margin"],
        "val_best_single": manifest["metrics"]["val_best_single_accuracy"],
        "calibration_best_single": max(single) if single else None,
        "calibration_quality": quality[0] if quality else None,
        "max_compliant_tau": metrics["max_compliant_tau"],
        "compliance_grid_step": detail.get("step", 0.01),
        "best_single_test": metrics["best_single_test"]["accuracy"],
        "frontier_rules": [p["kind"] for p in cal.get("frontier_point", [])] or ["policy"] * len(cal["frontier_policy_tau"]),
    }


def _fmt_cost(x: float) -> str:
    return f"{x:.3f}"


def per_tau_table(rows: list[dict]) -> list[str]:
    """Markdown lines of ``per_tau_rows``."""
    out = ["| tau | PROTEUS acc / $/1K | Single-Model acc / $/1K | ratio | LiteLLM-Complexity acc / $/1K | ratio | cheapest meeting the floor |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r['tau']:.3f}"]
        for name in (PROTEUS, *BASELINES):
            x = r[name]
            mark = "" if x["meets"] else " (miss)"
            cells.append(f"{x['accuracy']:.3f} / {_fmt_cost(x['cost_per_1k'])}{mark}")
            if name != PROTEUS:
                cells.append(f"{x['ratio']:.2f}" if x["ratio"] is not None else "-")
        cells.append(r["cheapest_meeting_floor"] or "none")
        out.append("| " + " | ".join(cells) + " |")
    return out


def markdown(summaries: list[dict]) -> str:
    out = []
    for s in summaries:
        out.append(f"\n### {s['dataset']}, seed {s['seed']}\n")
        out += per_tau_table(s["rows"])
    out.append("\n### Acceptance figures per run\n")
    out.append("| dataset | seed | floors met | not dearer than Single-Model (CI) | not dearer than LiteLLM-Complexity (CI) "
               "| median ratio vs Single / vs Complexity | declared top | best single (val / calibration rows) - margin "
               "| max compliant tau | best single test - 0.01 |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        nd = s["not_dearer"]
        med = s["median_ratio"]
        best_cal = s["calibration_best_single"]
        out.append(
            f"| {s['dataset']} | {s['seed']} | {s['floors_met']}/{s['n_tau']} | {nd['Single-Model'][0]}/{nd['Single-Model'][1]} "
            f"| {nd['LiteLLM-Complexity'][0]}/{nd['LiteLLM-Complexity'][1]} "
            f"| {med['Single-Model']:.2f} / {med['LiteLLM-Complexity']:.2f} | {s['declared_top']:.4f} "
            f"| {s['val_best_single'] - s['margin']:.4f} / {(best_cal - s['margin']) if best_cal else float('nan'):.4f} "
            f"| {s['max_compliant_tau']} | {s['best_single_test'] - s['compliance_grid_step']:.4f} |"
        )
    out.append("\n### Spread over seeds (min - max)\n")
    out.append("| dataset | runs | median ratio vs Single-Model | median ratio vs LiteLLM-Complexity | declared top | max compliant tau |")
    out.append("|---|---|---|---|---|---|")
    by_dataset: dict[str, list[dict]] = {}
    for s in summaries:
        by_dataset.setdefault(s["dataset"], []).append(s)
    for name, runs in by_dataset.items():
        def span(values):
            values = [v for v in values if v is not None]
            return f"{min(values):.3f} - {max(values):.3f}" if values else "-"
        out.append(
            f"| {name} | {len(runs)} | {span([r['median_ratio']['Single-Model'] for r in runs])} "
            f"| {span([r['median_ratio']['LiteLLM-Complexity'] for r in runs])} | {span([r['declared_top'] for r in runs])} "
            f"| {span([r['max_compliant_tau'] for r in runs])} |"
        )
    return "\n".join(out) + "\n"


def read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read {what} ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: {what} must be a JSON object; got a {type(data).__name__}")
    return data


def artifact_manifest(metrics_path: Path, metrics: dict) -> dict:
    """The manifest of the run's ``artifact``: as written, else (a relative path, written from where
    ``proteus eval`` ran) relative to the folder of ``metrics.json``."""
    artifact = metrics.get("artifact")
    if not isinstance(artifact, str) or not artifact:
        raise ValueError(f"{metrics_path}: field 'artifact' must be the artifact's folder; got {artifact!r}")
    tried = [Path(artifact)] if Path(artifact).is_absolute() else [Path(artifact), metrics_path.parent / artifact]
    for folder in tried:
        if (folder / "manifest.json").is_file():
            return read_json(folder / "manifest.json", "the artifact's manifest")
    raise ValueError(f"{metrics_path}: artifact {artifact!r} not found: no manifest.json in "
                     f"{' or '.join(repr(str(f)) for f in tried)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proteus_train.evaluation.compare", description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="proteus eval --out directories")
    parser.add_argument("--out", help="write the summaries as JSON here")
    args = parser.parse_args(argv)
    summaries = []
    for run in args.runs:
        path = Path(run) / "metrics.json"
        if not path.is_file():
            print(f"error: {path} not found (run proteus eval --out {run} first)", file=sys.stderr)
            return 2
        try:
            metrics = read_json(path, "the run's metrics")
            manifest = artifact_manifest(path, metrics)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        summaries.append(run_summary(metrics, manifest))
    print(markdown(summaries))
    if args.out:
        Path(args.out).write_text(json.dumps(summaries, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
