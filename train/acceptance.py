"""Artifacts side by side on a full-information split: accuracy and cost at each tau of a grid.

``python -m proteus_train.acceptance --data PATH --artifact NEW --reference FULL [--split test]``
routes the split's rows with each artifact exactly as the proxy would (``routing.route_log``, with
prompt-hash mixing) at every tau of the new artifact's declared range (``--tau-step``) and prints
per tau: each artifact's accuracy, whether it keeps the floor (accuracy >= tau), its mean cost per
call, and the new / reference cost ratio.  Used for the learn-from-traffic acceptance
(docs/learn-from-traffic.md); writes ``--out`` JSON.  ``--equal-accuracy ACC ...`` also compares the two
routings at equal measured accuracy (``equal_accuracy``), apart from either tau table.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from litellm_proteus.artifact import load_artifact
from litellm_proteus.predictor import mixing_draw

from .data import assign_splits, load_logs
from .evaluation.inputs import artifact_encoder
from .routing import fill_missing_costs, route_log


TAU_STEP_MIN = 1e-4  # every grid tau routes the split twice: a finer grid is hours of routing for no new point


def route_split(artifact: str, data_paths: list[str], split: str, taus: np.ndarray, cache_dir: str) -> list[dict]:
    model, manifest = load_artifact(artifact)
    data = assign_splits(load_logs(data_paths), seed=0).part(split).with_models(manifest.models)
    encoder = artifact_encoder(manifest.encoder, Path(artifact), cache_dir, "cpu", precision="fp32")
    emb = encoder.encode(data.prompts, progress=False)
    costs = fill_missing_costs(data.costs)
    draws = np.array([mixing_draw(p) for p in data.prompts])
    observed = np.nan_to_num(data.scores, nan=0.0)
    rows = np.arange(len(data))
    out = []
    for tau in taus:
        choice = route_log(model, manifest, emb, costs, float(tau), draws=draws).choice
        acc, cost = float(observed[rows, choice].mean()), float(costs[rows, choice].mean())
        out.append({"tau": round(float(tau), 4), "accuracy": round(acc, 4), "meets_floor": bool(acc >= tau - 1e-9),
                    "cost_usd": round(cost, 8), "in_declared_range": bool(manifest.tau_range[0] - 1e-9 <= tau <= manifest.tau_range[1] + 1e-9)})
    return out


def cheapest_reaching(points: list[dict], accuracy: float) -> float | None:
    """The lowest cost among ``points`` whose accuracy reaches ``accuracy`` (None: none does)."""
    costs = [p["cost_usd"] for p in points if p["accuracy"] >= accuracy - 1e-9]
    return min(costs) if costs else None


def equal_accuracy(new: list[dict], ref: list[dict], targets: np.ndarray) -> list[dict]:
    """Each artifact's test frontier compared at equal *measured* accuracy, whatever tau it was asked:
    per target, the cheapest point of each reaching it and their cost ratio.  Separates the routing's
    quality from the tau table's margin (``--equal-accuracy``)."""
    out = []
    for target in targets:
        a, b = cheapest_reaching(new, target), cheapest_reaching(ref, target)
        out.append({"accuracy": round(float(target), 4), "new_cost_usd": a, "reference_cost_usd": b,
                    "cost_ratio": round(a / b, 4) if a is not None and b else None})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proteus_train.acceptance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", nargs="+", required=True)
    parser.add_argument("--artifact", required=True, help="the artifact under test")
    parser.add_argument("--reference", required=True, help="the full-information artifact to compare costs with")
    parser.add_argument("--split", default="test", choices=("train", "val", "test"))
    parser.add_argument("--tau-step", type=float, default=0.01, help="spacing of the tau grid (default: %(default)s)")
    parser.add_argument("--out", help="JSON file to write")
    parser.add_argument("--equal-accuracy", nargs="+", type=float, metavar="ACC",
                        help="also route both artifacts over every tau (0.5-1.0, step 0.005) and compare the cheapest "
                             "point of each whose measured accuracy reaches each ACC (equal_accuracy in the JSON)")
    parser.add_argument("--cache-dir", default=os.environ.get("PROTEUS_CACHE_DIR", os.path.expanduser("~/.cache/proteus")))
    args = parser.parse_args(argv)
    if not TAU_STEP_MIN <= args.tau_step <= 1:  # NaN fails too
        parser.error(f"--tau-step must be a number in [{TAU_STEP_MIN:g}, 1] (the spacing of the tau grid); got {args.tau_step}")
    lo, hi = load_artifact(args.artifact)[1].tau_range
    taus = np.round(np.arange(lo, hi + 1e-9, args.tau_step), 4)
    new = route_split(args.artifact, args.data, args.split, taus, args.cache_dir)
    ref = route_split(args.reference, args.data, args.split, taus, args.cache_dir)
    rows = [{"tau": a["tau"], "new": a, "reference": b, "cost_ratio": round(a["cost_usd"] / b["cost_usd"], 4)}
            for a, b in zip(new, ref)]
    summary = {
        "artifact": args.artifact, "reference": args.reference, "split": args.split, "declared_range": [lo, hi],
        "floor_compliance": float(np.mean([r["new"]["meets_floor"] for r in rows])),
        "reference_floor_compliance": float(np.mean([r["reference"]["meets_floor"] for r in rows])),
        "max_cost_ratio": max(r["cost_ratio"] for r in rows),
        "mean_cost_ratio": round(float(np.mean([r["cost_ratio"] for r in rows])), 4),
        "rows": rows,
    }
    if args.equal_accuracy:
        sweep = np.round(np.arange(0.5, 1.0 + 1e-9, 0.005), 4)
        summary["equal_accuracy"] = equal_accuracy(route_split(args.artifact, args.data, args.split, sweep, args.cache_dir),
                                                   route_split(args.reference, args.data, args.split, sweep, args.cache_dir),
                                                   np.asarray(args.equal_accuracy))
    text = json.dumps(summary, indent=2)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
