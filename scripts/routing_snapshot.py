"""Every decision an artifact makes on a routing log's test prompts over a tau grid, through the
serving path (``ProteusPredictor.decide``: encoder, calibration, mixing, eq. 2), as one JSON file.

Two snapshots of the same artifact taken before and after a code change must be identical:

    python scripts/routing_snapshot.py --out /tmp/before.json
    ... change the code ...
    python scripts/routing_snapshot.py --out /tmp/after.json --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from litellm_proteus.predictor import Candidate, ProteusPredictor
from proteus_train.data import assign_splits, load_logs
from proteus_train.routing import fill_missing_costs


def snapshot(artifact: str | None, data: str, steps: int) -> dict:
    predictor = ProteusPredictor(artifact, device="cpu")
    log = assign_splits(load_logs([data]), seed=0)
    test = np.flatnonzero(log.split == "test")
    slots = [predictor.models.index(m) for m in log.models]
    costs = fill_missing_costs(log.costs)[test]
    prompts = [log.prompts[i] for i in test]
    candidates = [[Candidate(slot, float(c)) for slot, c in zip(slots, row)] for row in costs]
    lo, hi = predictor.manifest.tau_range
    decisions = {}
    for tau in np.round(np.linspace(lo, hi, steps), 6):
        chosen = predictor.decide(prompts, [float(tau)] * len(prompts), candidates)
        decisions[f"{tau:.6f}"] = [d.slot for d in chosen]
    digest = hashlib.sha256(json.dumps(decisions, sort_keys=True).encode()).hexdigest()
    return {"artifact": str(predictor.artifact_dir), "data": data, "n_prompts": len(prompts), "sha256": digest,
            "decisions": decisions}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", default=None, help="artifact directory (default: the bundled one)")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/routerbench-partial"))
    parser.add_argument("--steps", type=int, default=15, help="taus across the declared range")
    parser.add_argument("--out", required=True)
    parser.add_argument("--compare", help="an earlier snapshot: exit 1 if any decision differs")
    args = parser.parse_args()
    snap = snapshot(args.artifact, args.data, args.steps)
    Path(args.out).write_text(json.dumps(snap))
    print(f"{snap['n_prompts']} prompts x {len(snap['decisions'])} taus, sha256 {snap['sha256']}")
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        differ = sum(a != b for tau in before["decisions"] for a, b in zip(before["decisions"][tau], snap["decisions"].get(tau, [])))
        same_taus = before["decisions"].keys() == snap["decisions"].keys()
        print(f"compared with {args.compare}: {differ} decisions differ; same tau grid: {same_taus}")
        return 0 if differ == 0 and same_taus else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
