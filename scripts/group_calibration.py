"""Would cluster-conditional calibration let the label-free controller see a mix shift?  A measurement,
not part of the product.

The compliance controller at 0 % labels steers by the calibrated p of the chosen deployments, so a
task the head overrates stays invisible to it.  Per-slot calibration is fitted on the whole mix; this
script adds a per-(cluster, slot) offset on top: k-means clusters of the validation embeddings, each
offset the cluster's mean residual (outcome - calibrated p) shrunk toward 0 by ``n0`` pseudo-rows.  It
reports, per slot, realised minus predicted accuracy on the test split's hardest and easiest task
pools (``proteus replay``'s pools) and on the whole split, without and with the offsets.

    python scripts/group_calibration.py --artifact runs/art/mmlu --min-group-rows 700 --out runs/group-cal-mmlu.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from litellm_proteus.operating_points import nearest_centroid
from proteus_train.calibration import kmeans
from proteus_train.evaluation.inputs import load_inputs
from proteus_train.p_calibration import raw_p
from proteus_train.replay import task_pools


def cluster_offsets(clusters: np.ndarray, n_clusters: int, p: np.ndarray, scores: np.ndarray, n0: float) -> np.ndarray:
    """[C, K] mean residual per cluster and slot, shrunk: sum(y - p) / (count + n0)."""
    residual = np.where(np.isfinite(scores), scores - p, 0.0)
    seen = np.isfinite(scores)
    sums = np.stack([residual[clusters == c].sum(0) for c in range(n_clusters)])
    counts = np.stack([seen[clusters == c].sum(0) for c in range(n_clusters)])
    return sums / (counts + n0)


def gaps(p: np.ndarray, scores: np.ndarray, rows: np.ndarray) -> list[float]:
    """Per slot: mean outcome - mean predicted p over ``rows`` (observed cells)."""
    s, q = scores[rows], np.where(np.isfinite(scores[rows]), p[rows], np.nan)
    return [round(float(np.nanmean(s[:, k]) - np.nanmean(q[:, k])), 4) for k in range(p.shape[1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", required=True)
    parser.add_argument("--min-group-rows", type=int, default=100, help="as proteus replay's")
    parser.add_argument("--clusters", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--n0", type=float, nargs="+", default=[20.0, 50.0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    inputs = load_inputs(args.artifact, progress=False)
    cal = inputs.manifest.p_calibration
    p_val = cal.apply(raw_p(inputs.model, inputs.val.emb))
    p_test = cal.apply(raw_p(inputs.model, inputs.test.emb))
    task, split = np.asarray(inputs.log.task), np.asarray(inputs.log.split)
    known = np.flatnonzero(np.isin(split, ["train", "val"]))
    pools = task_pools(list(task[inputs.test_rows]), list(task[known]), inputs.log.scores[known], args.min_group_rows)
    everything = np.arange(len(p_test))

    def report(p: np.ndarray) -> dict:
        return {"hardest": gaps(p, inputs.test.scores, pools.hardest), "easiest": gaps(p, inputs.test.scores, pools.easiest),
                "all": gaps(p, inputs.test.scores, everything)}

    result = {"artifact": args.artifact, "models": inputs.manifest.models, "hardest_tasks": pools.hardest_tasks,
              "easiest_tasks": pools.easiest_tasks, "per_slot_calibration": report(p_test), "cluster_offsets": []}
    for k in args.clusters:
        centroids = kmeans(inputs.val.emb, k, seed=0)
        val_clusters = nearest_centroid(np.asarray(inputs.val.emb, dtype=np.float64), centroids)
        test_clusters = nearest_centroid(np.asarray(inputs.test.emb, dtype=np.float64), centroids)
        for n0 in args.n0:
            offsets = cluster_offsets(val_clusters, k, p_val, inputs.val.scores, n0)
            shifted = np.clip(p_test + offsets[test_clusters], 0.0, 1.0)
            result["cluster_offsets"].append({"clusters": k, "n0": n0, **report(shifted)})
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
