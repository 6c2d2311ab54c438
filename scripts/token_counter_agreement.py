"""How much the prompt-token counter matters: ``prompt_tokens: chars`` (the default, training's
ceil(characters / 4)) against ``prompt_tokens: litellm`` (``litellm.token_counter``), on real prompts
through ``DecisionEngine`` with the bench's deployments and taus.  Prints one JSON line: the ratio
of the two counts (median, 5th and 95th percentile) and the share of identical decisions.

    python scripts/token_counter_agreement.py --data ../shared/data --prompts 400 [--artifact DIR]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from litellm_proteus.config import ProteusConfig
from litellm_proteus.engine import DecisionEngine, DecisionRequest
from litellm_proteus.predictor import ProteusPredictor
from litellm_proteus.token_count import count_prompt_tokens, estimate_prompt_tokens
from proteus_train.bench.concurrency import bench_model_list
from proteus_train.bench.measure import BENCH_TAUS
from proteus_train.bench.prompts import load_prompts


def agreement(artifact: str | None, data: str | None, n_prompts: int) -> dict:
    prompts, source = load_prompts(data, seed=0)
    prompts = prompts[:n_prompts]
    predictor = ProteusPredictor(artifact, device="cpu")
    engines = [DecisionEngine(predictor.manifest, ProteusConfig(prompt_tokens=name), predictor)
               for name in ("litellm", "chars")]
    scored, problems = engines[0].score_all(bench_model_list(engines[0].slots))
    if problems:
        raise SystemExit("error: " + "; ".join(problems))
    ratios = [estimate_prompt_tokens(None, p) / count_prompt_tokens([{"role": "user", "content": p}], p) for p in prompts]
    same = total = 0
    for tau in BENCH_TAUS:
        requests = [DecisionRequest(p, [{"role": "user", "content": p}], tau, scored) for p in prompts]
        litellm_slots, chars_slots = ([r.decision.slot for r in engine.decide(requests)] for engine in engines)
        same += sum(a == b for a, b in zip(litellm_slots, chars_slots))
        total += len(requests)
    return {
        "artifact": str(predictor.artifact_dir), "prompts": len(prompts), "source": source, "taus": list(BENCH_TAUS),
        "chars_over_litellm_tokens": {q: round(float(np.percentile(ratios, p)), 3) for q, p in
                                        (("p5", 5), ("median", 50), ("p95", 95))},
        "decisions": total, "same_decision": round(same / total, 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", default=None, help="artifact directory (default: the bundled one)")
    parser.add_argument("--data", default=None, help="shared data dir holding routerbench-partial/ (default: bundled prompts)")
    parser.add_argument("--prompts", type=int, default=400, help="prompts to compare (default 400)")
    args = parser.parse_args(argv)
    if args.prompts < 1:
        parser.error(f"--prompts must be >= 1; got {args.prompts}")
    print(json.dumps(agreement(args.artifact, args.data, args.prompts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
