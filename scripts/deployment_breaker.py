"""Would a per-deployment quality breaker recover a silently degraded model sooner?  A measurement,
not part of the product.

In ``proteus replay``'s ``degrade`` scenario one model's success rate drops while its predictions
stay.  The compliance controller can only raise the tier's offset, and where the top operating
point's choice is the degraded model itself, that buys nothing.  This script replays the same
streams (same rows, degradation, labels and delay as ``proteus replay --scenarios degrade``) with the
controller plus a breaker: each model's feedback residuals (label - calibrated p) over its last
``--label-window`` labels; once their 95 % upper bound lies below ``-threshold``, that model is
left out of the candidates (the policy and the rules route among the others).

    python scripts/deployment_breaker.py --artifact runs/art/X --out runs/breaker-X.json
"""

from __future__ import annotations

import argparse
import json
import math
from collections import deque

import numpy as np

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
from litellm_proteus.compliance import ComplianceController, ComplianceSettings, state_key_for
from litellm_proteus.predictor import Candidate, ProteusPredictor
from proteus_train.evaluation.inputs import load_inputs
from proteus_train.replay import (
    Degradation,
    Trace,
    build_stream,
    default_tiers,
    degradation_for,
    replay_stream,
    summarize,
    task_pools,
)


class Breaker:
    """Per slot, the last ``window`` residuals; a slot is out while their upper 95 % bound < -threshold."""

    def __init__(self, k: int, window: int, threshold: float, min_labels: int):
        self.residuals = [deque(maxlen=window) for _ in range(k)]
        self.threshold, self.min_labels = threshold, min_labels

    def add(self, slot: int, residual: float) -> None:
        self.residuals[slot].append(residual)

    def open_slots(self) -> set[int]:
        out = set()
        for slot, values in enumerate(self.residuals):
            if len(values) >= self.min_labels:
                r = np.asarray(values)
                upper = r.mean() + 1.96 * r.std(ddof=1) / math.sqrt(len(r))
                if upper < -self.threshold:
                    out.add(slot)
        return out


def breaker_stream(predictor, controller, breaker: Breaker, rows, split, tau, tier, label_fraction, label_delay, batch,
                   seed, degradation: Degradation) -> Trace:
    """``replay_stream`` with the breaker: labels also feed it, and open slots are no candidates."""
    n, k = len(rows), split.scores.shape[1]
    labelled = np.random.default_rng(seed).random(n) < label_fraction
    key = state_key_for(tier, "default", tau, 0.01)
    out = Trace(np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n), np.zeros(n, dtype=np.int64))
    kept = degradation.keep(n)
    delivered = 0
    p_ref = predictor.taus.reference_p(predictor.taus.effective(tau)[0], predictor.mix_operating_points)
    for start in range(0, n, batch):
        while delivered < n and delivered + label_delay <= start:
            if labelled[delivered]:
                controller.record_feedback(key, tau, out.p_chosen[delivered], out.correct[delivered])
                breaker.add(int(out.slot[delivered]), out.correct[delivered] - out.p_chosen[delivered])
            delivered += 1
        control = controller.control(key, tau)
        out_slots = breaker.open_slots()
        allowed = [s for s in range(k) if s not in out_slots] or list(range(k))
        idx = rows[start : start + batch]
        decisions = predictor.decide_embeddings(
            split.emb[idx], [tau] * len(idx), [[Candidate(s, float(split.costs[r, s])) for s in allowed] for r in idx],
            split.draws[idx] if predictor.mix_operating_points else None, [control.delta] * len(idx),
        )
        for j, (r, d) in enumerate(zip(idx, decisions)):
            i = start + j
            out.correct[i] = split.scores[r, d.slot] * (kept[i] if d.slot == degradation.slot else 1.0)
            out.slot[i], out.cost[i] = d.slot, split.costs[r, d.slot]
            out.delta[i], out.infeasible[i] = control.delta, control.infeasible
            out.p_chosen[i] = d.p[d.index]
            controller.record_decision(key, d.tau_effective, d.p[d.index], max(d.p), p_ref)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", default=str(DEFAULT_ARTIFACT_DIR))
    parser.add_argument("--out", required=True)
    parser.add_argument("--labels", type=float, nargs="+", default=[0.05, 1.0])
    parser.add_argument("--threshold", type=float, default=0.05, help="residual a model must be proven below")
    parser.add_argument("--label-window", type=int, default=500)
    parser.add_argument("--min-labels", type=int, default=20)
    # proteus replay's defaults, so the streams are the same
    parser.add_argument("--length", type=int, default=4000)
    parser.add_argument("--shift-at", type=int, default=1000)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument("--label-delay", type=int, default=200)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--degrade-drop", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    inputs = load_inputs(args.artifact, progress=False)
    predictor = ProteusPredictor(args.artifact)
    task, split = np.asarray(inputs.log.task), np.asarray(inputs.log.split)
    known = np.flatnonzero(np.isin(split, ["train", "val"]))
    pools = task_pools(list(task[inputs.test_rows]), list(task[known]), inputs.log.scores[known], 100)
    rows, shift = build_stream("degrade", pools, args.length, args.shift_at, args.seed)
    settings, test, k = ComplianceSettings(), inputs.test, inputs.test.scores.shape[1]
    result = {"artifact": args.artifact, "settings": vars(args), "tiers": {}}
    for tier, tau in default_tiers(tuple(inputs.manifest.tau_range)).items():
        static = replay_stream(predictor, None, rows, test, tau, tier, 0.0, args.label_delay, args.batch, args.seed)
        degradation = degradation_for(static, test, rows, shift, args.degrade_drop, args.seed + 2)
        static.correct *= np.where(static.slot == degradation.slot, degradation.keep(len(rows)), 1.0)
        static_cost = float(static.cost.mean() * 1000)
        report = {"tau": tau, "degraded": inputs.manifest.models[degradation.slot],
                  "static": summarize(static, tau, shift, args.window, None)}
        for share in args.labels:
            for name in ("controller", "controller+breaker"):
                controller = ComplianceController(settings, artifact_margin=inputs.manifest.calibration.margin)
                if name == "controller":
                    trace = replay_stream(predictor, controller, rows, test, tau, tier, share, args.label_delay,
                                          args.batch, args.seed + 1, degradation=degradation)
                else:
                    breaker = Breaker(k, args.label_window, args.threshold, args.min_labels)
                    trace = breaker_stream(predictor, controller, breaker, rows, test, tau, tier, share, args.label_delay,
                                           args.batch, args.seed + 1, degradation)
                s = summarize(trace, tau, shift, args.window, static_cost)
                s["degraded_share_after_shift"] = round(float(np.mean(trace.slot[shift:] == degradation.slot)), 4)
                report[f"labels {share:g}, {name}"] = s
        result["tiers"][tier] = report
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    for tier, r in result["tiers"].items():
        print(tier, r["tau"], r["degraded"], "static", r["static"]["accuracy_after_shift"])
        for label, s in r.items():
            if label.startswith("labels"):
                print(f"  {label}: after {s['accuracy_after_shift']} settled {s['accuracy_settled']} "
                      f"to-compliance {s['requests_to_compliance']} cost {s['cost_vs_static']} "
                      f"degraded-share {s['degraded_share_after_shift']}")


if __name__ == "__main__":
    main()
