"""How an artifact routes on logs it was not trained on (accuracy and cost per tau).

    python examples/transfer_check.py --artifact litellm_proteus/default_artifact \
        --data ../shared/data/routellm-evals/mmlu \
        --slot mistralai/Mixtral-8x7B-Instruct-v0.1=mistralai/mixtral-8x7b-chat \
        --slot gpt-4-1106-preview=gpt-4-1106-preview

Each ``--slot LOG_MODEL=ARTIFACT_SLOT`` makes one model of the log a candidate deployment playing
that trained slot, priced at the log's own per-query cost.  Rows of the log's test split are routed
at taus spread over the artifact's declared range; the table shows what the log says those choices
scored and cost, next to always-that-model.
"""

from __future__ import annotations

import argparse

import numpy as np

from litellm_proteus.predictor import Candidate, ProteusPredictor, mixing_draw
from proteus_train.config import TrainConfig
from proteus_train.pipeline import load_training_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--artifact", nargs="+", required=True)
    parser.add_argument("--data", nargs="+", required=True)
    parser.add_argument("--slot", action="append", required=True, metavar="LOG_MODEL=ARTIFACT_SLOT")
    parser.add_argument("--taus", type=int, default=5, help="taus spread over the declared range")
    args = parser.parse_args()
    log = load_training_data(TrainConfig(data=args.data))
    rows = np.flatnonzero(log.split == "test")
    pairs = [s.split("=", 1) for s in args.slot]
    columns = [log.models.index(model) for model, _ in pairs]
    scores, costs = log.scores[np.ix_(rows, columns)], log.costs[np.ix_(rows, columns)]
    keep = np.isfinite(scores).all(axis=1) & np.isfinite(costs).all(axis=1)
    rows, scores, costs = rows[keep], scores[keep], costs[keep]
    prompts = [log.prompts[i] for i in rows]
    draws = [mixing_draw(p) for p in prompts]  # operating-point mixing, as the proxy draws it
    for model, column in zip(pairs, range(len(pairs))):
        print(f"always {model[0]}: accuracy {scores[:, column].mean():.3f}, ${costs[:, column].mean() * 1000:.2f}/1K")
    for artifact in args.artifact:
        predictor = ProteusPredictor(artifact, device="cpu", memory_cache=0)
        slots = [predictor.models.index(slot) for _, slot in pairs]
        candidates = [[Candidate(s, float(c)) for s, c in zip(slots, row)] for row in costs]
        embeddings = predictor.encoder.encode(prompts)
        lo, hi = predictor.manifest.tau_range
        print(f"{artifact} ({len(rows)} test rows)")
        for tau in np.linspace(lo, hi, args.taus):
            decisions = predictor.decide_embeddings(embeddings, [tau] * len(rows), candidates, draws)  # as the proxy
            picks = np.array([d.index for d in decisions])
            taken = np.arange(len(rows)), picks
            print(f"  tau {tau:.3f}: accuracy {scores[taken].mean():.3f}, ${costs[taken].mean() * 1000:.2f}/1K")


if __name__ == "__main__":
    main()
