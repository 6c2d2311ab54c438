"""What ``rule_price_limit`` buys when a slot's price rises after training:
``python -m proteus_train.bench.repricing --data DATA --slot MODEL --out OUT [--artifact A]``.

The artifact's test split is routed at each tier with the slot's logged costs multiplied by each
``--factors`` entry (every other slot at its logged cost), once with the limit off (the fixed
operating points keep routing to the slot) and once at each ``--limits`` value (past it, a point
picking the slot takes the cheapest candidate predicted at least as accurate).  Per tier, factor and setting:
accuracy on the test split, cost per 1K requests at the new prices, and the slot's share.

Prints a table and writes ``OUT/repricing.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def route(predictor, split, tau: float, costs: np.ndarray, slot: int, as_trained: bool) -> dict:
    from litellm_proteus.predictor import Candidate

    k = costs.shape[1]
    candidates = [[Candidate(j, float(costs[r, j]), 0.0, as_trained or j != slot) for j in range(k)] for r in range(len(costs))]
    chosen = np.array([d.slot for d in predictor.decide_embeddings(split.emb, [tau] * len(costs), candidates, split.draws)])
    rows = np.arange(len(chosen))
    return {
        "accuracy": round(float(np.nan_to_num(split.scores, nan=0.0)[rows, chosen].mean()), 4),
        "cost_per_1k": round(float(costs[rows, chosen].mean() * 1000), 4),
        "slot_share": round(float((chosen == slot).mean()), 4),
    }


def main(argv: list[str] | None = None) -> int:
    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
    from litellm_proteus.engine import within_price_limit
    from litellm_proteus.predictor import ProteusPredictor

    from ..evaluation.inputs import load_inputs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--artifact", default=str(DEFAULT_ARTIFACT_DIR))
    parser.add_argument("--slot", required=True, help="the model whose price rises")
    parser.add_argument("--tiers", type=float, nargs="+", default=[0.79, 0.82, 0.84])
    parser.add_argument("--factors", type=float, nargs="+", default=[2, 5, 10, 100])
    parser.add_argument("--limits", type=float, nargs="+", default=[1.5])
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    inputs = load_inputs(args.artifact, data=[args.data])
    predictor = ProteusPredictor(args.artifact, device="cpu")
    if args.slot not in predictor.models:
        parser.error(f"--slot {args.slot!r} is not a slot of the artifact; slots: {predictor.models}")
    slot, split = predictor.models.index(args.slot), inputs.test
    rows = []
    for tau in args.tiers:
        for factor in args.factors:
            costs = np.array(split.costs, dtype=np.float64)
            costs[:, slot] *= factor
            row = {"tau": tau, "factor": factor, "off": route(predictor, split, tau, costs, slot, True)}
            for limit in args.limits:  # every cost of the slot scaled by the factor: that is its price ratio
                row[f"limit {limit:g}"] = route(predictor, split, tau, costs, slot, within_price_limit(factor, limit))
            rows.append(row)
            print(f"tau {tau:g} x{factor:g}: " + " | ".join(
                f"{name} acc {r['accuracy']:.4f} ${r['cost_per_1k']:.4f}/1K share {r['slot_share']:.3f}"
                for name, r in row.items() if isinstance(r, dict)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"artifact": args.artifact, "data": args.data, "slot": args.slot, "test_rows": len(split.costs), "rows": rows}
    (out / "repricing.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
