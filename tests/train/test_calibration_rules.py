"""Calibration over operating-point rules: the hull over every point, the declared range, and
offline routing (``route_log``) reproducing the proxy's rule choices."""

from __future__ import annotations

import numpy as np
import pytest

from litellm_proteus.artifact import TauCalibration, load_artifact
from litellm_proteus.operating_points import POLICY, OperatingPoint
from litellm_proteus.predictor import Candidate, ProteusPredictor
from proteus_train.calibration import (
    CalibrationRows,
    CandidatePoint,
    calibrate,
    cluster_ladders,
    kmeans,
    monotone_envelope,
    rule_points,
)
from proteus_train.routing import route_log

SLOT0 = OperatingPoint(kind="slot", slot=0)
QUALITY = OperatingPoint(kind="quality")


def test_rule_points_join_the_table_frontier_and_declared_range():
    taus = np.array([0.70, 0.71, 0.72])
    acc, cost = np.array([0.70, 0.72, 0.74]), np.array([1.0, 2.0, 3.0])
    extra = [CandidatePoint(SLOT0, 0.73, 0.5), CandidatePoint(QUALITY, 0.80, 5.0)]
    table, declared = calibrate(taus, acc, margin=0.01, step=0.01, costs_usd=cost, extra=extra)
    assert declared == (0.70, 0.79)  # the quality point's accuracy minus the margin
    points = dict(zip(table.requested, table.requested_point))
    assert points[0.7] == points[0.72] == SLOT0  # cheaper than any policy point meeting it
    assert points[0.73] == POLICY and points[0.74] == points[0.79] == QUALITY
    # (3, 0.74) lies under the chord from the slot point to the quality point: mixing those two beats it
    assert table.frontier_point == [SLOT0, QUALITY] and table.frontier_accuracy == [0.73, 0.80]
    # a rule's fallback: the cheapest policy point at least as accurate
    assert table.policy_tau[0] == 0.72
    assert not table.centroids


def test_without_useful_rules_the_table_is_the_policy_grid():
    taus = np.array([0.70, 0.71, 0.72])
    acc, cost = np.array([0.70, 0.72, 0.74]), np.array([1.0, 2.0, 3.0])
    plain, _ = calibrate(taus, acc, 0.01, 0.01, cost)
    dominated, _ = calibrate(taus, acc, 0.01, 0.01, cost, extra=[CandidatePoint(SLOT0, 0.71, 9.0)])
    assert dominated.requested_point == [] and dominated.frontier_point == []
    assert dominated.model_dump(exclude={"requested_point", "frontier_point"}) == plain.model_dump(
        exclude={"requested_point", "frontier_point"}
    )


def test_a_point_without_an_estimate_neither_meets_a_tau_nor_pulls_the_points_below_it_down():
    acc = np.array([0.83, 0.85, 0.87, -np.inf, 0.90])
    assert monotone_envelope(acc).tolist() == [0.83, 0.85, 0.87, -np.inf, 0.90]
    assert monotone_envelope(np.array([0.86, 0.85, 0.90])).tolist() == [0.85, 0.85, 0.90]  # higher taus bound a point
    taus = np.array([0.80, 0.81, 0.82, 0.83, 0.84])
    table, declared = calibrate(taus, acc, 0.01, 0.01, costs_usd=np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert declared == (0.8, 0.89)
    assert dict(zip(table.requested, table.policy_tau))[0.85] == 0.82  # 0.87 >= 0.85 + 0.01, the -inf point skipped
    assert dict(zip(table.requested, table.policy_tau))[0.87] == 0.84
    assert 0.83 not in table.frontier_policy_tau  # nor is it on the cost frontier


def test_cluster_ladders_find_the_task_structure():
    rng = np.random.default_rng(0)
    emb = np.r_[rng.normal(5, 0.1, (60, 4)), rng.normal(-5, 0.1, (60, 4))]
    scores = np.zeros((120, 2))
    scores[:60, 0] = 1  # model 0 right on the first task only, model 1 on the second
    scores[60:, 1] = 1
    costs = np.ones((120, 2))
    centroids = kmeans(emb, 2, seed=0)
    ladders = cluster_ladders(emb, scores, costs, centroids)
    assert len(ladders) == 1 and sorted(ladders[0]) == [0, 1]
    rows = CalibrationRows(emb, scores, costs, np.full((120, 2), 0.5))
    points = {p.rule.label(): p for p in rule_points([rows], np.zeros(2), centroids, ladders)}
    assert points["slot:0"].accuracy == 0.5 and points[f"cluster:{ladders[0][0]},{ladders[0][1]}"].accuracy == 1.0


def test_route_log_reproduces_the_proxy_with_rules(make_artifact):
    cal = TauCalibration(
        requested=[0.7, 0.8, 0.9], policy_tau=[0.7, 0.8, 0.9], margin=0.0,
        requested_point=[SLOT0, POLICY, OperatingPoint(kind="cluster", cluster_slots=[1, 2])],
        frontier_policy_tau=[0.7, 0.8, 0.9], frontier_accuracy=[0.7, 0.8, 0.9], frontier_cost_usd=[1e-4, 1e-3, 1e-2],
        frontier_point=[SLOT0, QUALITY, OperatingPoint(kind="cluster", cluster_slots=[1, 2])],
        centroids=[[1.0] * 384, [-1.0] * 384],
    )
    directory = make_artifact(["a", "b", "c"], calibration=cal)
    model, manifest = load_artifact(directory)
    predictor = ProteusPredictor(directory, device="cpu")
    rng = np.random.default_rng(3)
    n = 300
    emb = rng.normal(size=(n, 384)).astype(np.float32)
    costs = rng.uniform(1e-5, 1e-2, size=(n, 3))
    taus, draws = rng.uniform(0.7, 0.9, size=n), rng.uniform(size=n)
    cands = [[Candidate(s, float(costs[i, s])) for s in range(3)] for i in range(n)]
    for d in (draws, None):
        offline = route_log(model, manifest, emb, costs, taus, draws=d).choice
        online = predictor.decide_embeddings(emb, taus, cands, None if d is None else list(d))
        assert offline.tolist() == [x.slot for x in online]
        # the rules did route (without draws, the step table reaches slot 0 only at tau 0.7 exactly)
        assert len({x.rule for x in online}) == (3 if d is not None else 2)


def test_a_range_whose_bottom_no_point_reaches_is_refused_with_the_best_accuracy():
    from proteus_train.calibration import UnreachableTauRange

    taus = np.array([0.95, 0.96, 0.97, 0.98])
    acc = np.array([0.85, 0.86, 0.87, 0.86])
    # the envelope trusts 0.86 at most (0.97's 0.87 is not: 0.98 gives 0.86)
    with pytest.raises(UnreachableTauRange, match="the best accuracy an operating point reaches is 0.8600") as caught:
        calibrate(taus, acc, 0.01, 0.0025, costs_usd=np.array([1.0, 2.0, 3.0, 4.0]))
    assert caught.value.best == pytest.approx(0.86) and caught.value.reachable == pytest.approx(0.85)
    # a rule point that reaches the bottom + margin gives the range its bottom
    table, declared = calibrate(taus, acc, 0.01, 0.0025, np.array([1.0, 2.0, 3.0, 4.0]),
                                extra=[CandidatePoint(SLOT0, 0.965, 5.0)])
    assert declared == (0.95, 0.955)
    with pytest.raises(UnreachableTauRange, match="reaches is 0.0000"):  # every score 0
        calibrate(np.array([0.01, 0.02]), np.zeros(2), 0.005, 0.0025)


def test_a_rule_falls_back_to_the_most_accurate_grid_point_with_an_estimate():
    """The runtime routes a rule point's taus at its fallback policy tau when the rule's model has no
    live candidate: a grid point without an estimate (-inf, off-policy: unsupported) is never it."""
    taus = np.array([0.80, 0.81, 0.82, 0.83, 0.84, 0.85])
    acc = np.array([0.82, 0.83, 0.83, -np.inf, -np.inf, -np.inf])
    cost = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    table, _ = calibrate(taus, acc, 0.0, 0.01, cost, extra=[CandidatePoint(SLOT0, 0.86, 0.5)])
    assert table.policy_tau[-1] == 0.82 and table.requested_point[-1] == SLOT0  # not 0.85, which has no estimate
    # a full-information grid (every point measured): the top, as before
    table, _ = calibrate(taus, np.linspace(0.80, 0.85, 6), 0.0, 0.01, cost, extra=[CandidatePoint(SLOT0, 0.86, 0.5)])
    assert table.policy_tau[-1] == 0.85
