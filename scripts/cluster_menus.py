"""Would per-cluster conditioning of the policy pay?  A measurement, not part of the product.

The frontier's cluster ladders give each k-means cluster of the embedding one model.  A richer
"menu" lets each cluster take any operating point instead -- a model, quality-greedy, or the policy at
its own tau (the policy conditioned on the cluster) -- chosen per price of accuracy on the training
rows (each cluster maximises accuracy - price x cost).  This script fits both families on an artifact's
training rows and compares their lower (cost, accuracy) hulls on the test split, each with the
artifact's single models, quality-greedy and policy grid: the cost at equal test accuracy.

    python scripts/cluster_menus.py --artifact runs/art/zeroeval-s0 --out runs/cluster-menus-zeroeval.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from litellm_proteus.operating_points import POLICY, OperatingPoint, nearest_centroid
from proteus_train.calibration import cost_frontier, price_ladders
from proteus_train.evaluation.inputs import load_inputs
from proteus_train.routing import route_at_points


def option_choices(inputs, split, taus: np.ndarray) -> np.ndarray:
    """[O, N] slot chosen per option: each single model, quality-greedy, the policy at each tau."""
    n, k = split.scores.shape
    route = lambda tau, rule: route_at_points(inputs.model, inputs.manifest, split.emb, split.costs, [(float(tau), rule)] * n).choice  # noqa: E731
    options = [np.full(n, slot) for slot in range(k)] + [route(taus[-1], OperatingPoint(kind="quality"))]
    return np.stack(options + [route(tau, POLICY) for tau in taus])


def per_cluster_means(split, choices: np.ndarray, clusters: np.ndarray, n_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean accuracy and cost [C, O] of each option within each cluster (an empty cluster: all rows)."""
    observed, at = np.nan_to_num(split.scores, nan=0.0), np.arange(len(split.scores))
    acc, cost = np.zeros((n_clusters, len(choices))), np.zeros((n_clusters, len(choices)))
    for c in range(n_clusters):
        rows = at[clusters == c] if (clusters == c).any() else at
        acc[c] = observed[rows[None, :], choices[:, rows]].mean(1)
        cost[c] = split.costs[rows[None, :], choices[:, rows]].mean(1)
    return acc, cost


def measure(split, choices: np.ndarray, clusters: np.ndarray, menu: list[int]) -> tuple[float, float]:
    at = np.arange(len(split.scores))
    choice = choices[np.asarray(menu)[clusters], at]
    return float(np.nan_to_num(split.scores, nan=0.0)[at, choice].mean()), float(split.costs[at, choice].mean())


def hull_cost(points: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Cost of the cheapest mix of ``points`` ([P, 2]: accuracy, cost) reaching each target accuracy."""
    hull = cost_frontier(points[:, 1], points[:, 0])
    acc, cost = points[hull, 0], points[hull, 1]
    return np.interp(targets, acc, cost, left=cost[0], right=np.nan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", required=True)
    parser.add_argument("--out", required=True, help="JSON file for the figures")
    args = parser.parse_args()
    inputs = load_inputs(args.artifact, progress=False)
    manifest = inputs.manifest
    if not manifest.calibration.centroids:
        raise SystemExit("error: --artifact stores no cluster centroids (its frontier uses no cluster rule)")
    centroids = np.asarray(manifest.calibration.centroids)
    lo, hi = manifest.tau_train_range
    taus = np.round(np.concatenate([np.arange(lo, hi + 1e-9, 0.0025), np.linspace(hi, 1.0, 6)[1:]]), 4)
    k = inputs.train.scores.shape[1]
    train_choices, test_choices = option_choices(inputs, inputs.train, taus), option_choices(inputs, inputs.test, taus)
    train_clusters = nearest_centroid(inputs.train.emb, centroids)
    test_clusters = nearest_centroid(inputs.test.emb, centroids)
    acc, cost = per_cluster_means(inputs.train, train_choices, train_clusters, len(centroids))
    slots_only = np.arange(len(train_choices)) < k
    ladders = price_ladders(np.where(slots_only[None, :], acc, -np.inf), cost, n_prices=60, lowest_price=1e-4)
    cluster_menus = price_ladders(acc, cost, n_prices=60, lowest_price=1e-4)
    observed, at = np.nan_to_num(inputs.test.scores, nan=0.0), np.arange(len(inputs.test.scores))
    single = np.array([[observed[at, c].mean(), inputs.test.costs[at, c].mean()] for c in test_choices])
    ladder_points = np.array([measure(inputs.test, test_choices, test_clusters, m) for m in ladders])
    menu_points = np.array([measure(inputs.test, test_choices, test_clusters, m) for m in cluster_menus])
    frontier_points = np.concatenate([single, ladder_points])
    targets = np.round(np.arange(manifest.tau_range[0], manifest.tau_range[1] + 0.005, 0.01), 3)
    ladders_cost = hull_cost(frontier_points, targets)
    with_menus = hull_cost(np.concatenate([frontier_points, menu_points]), targets)
    rows = [
        {"test_accuracy": float(t), "cost_per_1k_ladders": float(a * 1000), "cost_per_1k_with_menus": float(b * 1000),
         "ratio": float(b / a)}
        for t, a, b in zip(targets, ladders_cost, with_menus) if np.isfinite(a) and np.isfinite(b)
    ]
    result = {"artifact": args.artifact, "clusters": len(centroids), "ladders": len(ladders), "menus": len(cluster_menus),
              "menus_using_the_policy": sum(any(o > k for o in m) for m in cluster_menus), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"{args.artifact}: {len(ladders)} ladders, {len(cluster_menus)} menus "
          f"({result['menus_using_the_policy']} give some cluster the policy)")
    print("test accuracy | $/1K: models + ladders + policy grid | + per-cluster menus | ratio")
    for r in rows:
        print(f"{r['test_accuracy']:.3f} | {r['cost_per_1k_ladders']:.3f} | {r['cost_per_1k_with_menus']:.3f} | {r['ratio']:.2f}")


if __name__ == "__main__":
    main()
