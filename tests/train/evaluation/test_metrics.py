"""Metric functions on hand-made cases with known answers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from proteus_train.evaluation.metrics import (
    Bootstrap,
    accuracy,
    assignment_matrix,
    cost_per_1k,
    floor_compliance,
    json_safe,
    oracle_choice,
    pearson,
    per_query,
    routing_efficiency,
    routing_performance_index,
    tolerance_compliance,
)

SCORES = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
COSTS = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [5.0, 2.0, 3.0]]) / 1000


def test_accuracy_and_cost_of_a_choice_vector():
    choice = np.array([0, 0, 2, 1])
    assert accuracy(choice, SCORES) == pytest.approx(2 / 4)
    assert cost_per_1k(choice, COSTS) == pytest.approx((1 + 1 + 3 + 2) / 4)


def test_assignment_matrix_gives_expected_values_of_random_routing():
    uniform = np.full((4, 3), 1 / 3)
    assert accuracy(uniform, SCORES) == pytest.approx(SCORES.mean())
    one_hot = assignment_matrix(np.array([2, 1, 0, 0]), 3)
    assert one_hot.tolist()[0] == [0.0, 0.0, 1.0]
    assert per_query(one_hot, SCORES).tolist() == per_query(np.array([2, 1, 0, 0]), SCORES).tolist()
    with pytest.raises(ValueError, match="columns"):
        assignment_matrix(np.ones((4, 2)), 3)


def test_oracle_picks_the_cheapest_correct_model():
    # row 0: models 0 and 2 correct -> 0 (cheaper); row 1: 1 and 2 -> 1; row 2: none -> cheapest 0;
    # row 3: models 0 and 1 correct, model 1 is cheaper there
    assert oracle_choice(SCORES, COSTS).tolist() == [0, 1, 0, 1]


def test_floor_and_tolerance_compliance():
    taus = np.array([0.80, 0.85, 0.90, 0.95])
    acc = np.array([0.86, 0.85, 0.89, 0.99])
    assert floor_compliance(acc, taus) == pytest.approx(0.75)  # only 0.89 < 0.90 misses; 0.85 == 0.85 meets
    # |acc - tau| = 0.06, 0, 0.01, 0.04 -> +-2 pp: 2 of 4; +-5 pp: 3 of 4 (overshoot 0.06 is outside)
    assert tolerance_compliance(acc, taus, 0.02) == pytest.approx(0.5)
    assert tolerance_compliance(acc, taus, 0.05) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        floor_compliance(acc, taus[:2])


def test_floor_compliance_is_exact_on_float_grids():
    # 0.1 + 0.7 is 0.7999999999999999 in floating point: it must still meet tau = 0.8
    assert floor_compliance(np.array([0.1 + 0.7]), np.array([0.8])) == 1.0


def test_pearson_known_values():
    x = np.array([0.80, 0.85, 0.90, 0.95])
    assert pearson(x, 2 * x + 1) == pytest.approx(1.0)
    assert pearson(x, -x) == pytest.approx(-1.0)
    assert pearson(x, np.array([1.0, 0.0, 0.0, 1.0])) == pytest.approx(0.0, abs=1e-12)
    assert pearson(x, np.full(4, 0.3)) is None  # undefined, not 0


def test_routing_efficiency():
    # 30 pp over random in 2 ms -> 15 pp/ms
    assert routing_efficiency(0.8, 0.5, 2.0) == pytest.approx(15.0)
    assert routing_efficiency(0.8, 0.5, 0.0) is None  # zero-latency static rule: N/A


def test_routing_performance_index():
    # 0.9/0.9 x (1 - 1/4) x (1 - 0.02 s / 2 s) x 100 = 74.25
    assert routing_performance_index(0.9, 0.9, 1.0, 4.0, 20.0, 2.0) == pytest.approx(74.25)
    # always the most expensive model scores 0
    assert routing_performance_index(0.9, 0.95, 4.0, 4.0, 0.0, 2.0) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        routing_performance_index(0.9, 0.9, 1.0, 0.0, 0.0, 2.0)


def test_bootstrap_interval_contains_the_mean_and_is_reproducible():
    values = (np.arange(200) % 4 == 0).astype(float)  # mean 0.25
    lo, hi = Bootstrap(200, 500, seed=3).interval(values)
    assert lo < 0.25 < hi
    assert hi - lo < 0.2
    lo2, hi2 = Bootstrap(200, 500, seed=3).interval(values)
    assert (lo, hi) == (lo2, hi2)
    flat_lo, flat_hi = Bootstrap(50, 100).interval(np.full(50, 0.7))
    assert flat_lo == pytest.approx(0.7) and flat_hi == pytest.approx(0.7)
    # several columns at once, one interval each
    lo_m, hi_m = Bootstrap(200, 300).interval(np.stack([values, 1 - values], 1))
    assert lo_m.shape == (2,) and lo_m[1] < 0.75 < hi_m[1]


def test_json_safe_makes_valid_json():
    data = {"a": np.float32(0.5), "b": float("nan"), "c": [np.int64(3), np.bool_(True)], "d": np.array([1.0, np.inf])}
    text = json.dumps(json_safe(data), allow_nan=False)
    assert json.loads(text) == {"a": 0.5, "b": None, "c": [3, True], "d": [1.0, None]}
    assert not math.isnan(json_safe(np.float64(1.5)))
