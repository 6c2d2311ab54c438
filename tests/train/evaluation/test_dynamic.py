"""Dynamic tau schedules and the rolling-window floor check."""

from __future__ import annotations

import numpy as np
import pytest

from proteus_train.evaluation.baselines import Assignment, Router, Split
from proteus_train.evaluation.dynamic import SCENARIOS, rolling_mean, run_scenario, schedule, window_stats


@pytest.mark.parametrize("name", SCENARIOS)
def test_schedules_stay_inside_the_range(name):
    taus = schedule(name, 1000, (0.85, 0.91))
    assert taus.shape == (1000,)
    assert taus.min() >= 0.85 - 1e-12 and taus.max() <= 0.91 + 1e-12
    assert taus.max() - taus.min() > 0.03  # every scenario actually moves tau


def test_schedule_shapes():
    step = schedule("step", 1000, (0.8, 0.9))
    assert step[0] == pytest.approx(0.82) and step[-1] == pytest.approx(0.88)
    drift = schedule("drift", 1000, (0.8, 0.9))
    assert drift[0] == pytest.approx(0.8) and drift[-1] == pytest.approx(0.9) and np.all(np.diff(drift) > 0)
    with pytest.raises(ValueError, match="scenario must be one of"):
        schedule("sawtooth", 10, (0.8, 0.9))


def test_rolling_mean_and_window_stats():
    assert rolling_mean(np.array([1, 0, 1, 1]), 2).tolist() == [0.5, 0.5, 1.0]
    correct = np.array([1, 1, 0, 1, 0, 0], dtype=float)
    taus = np.full(6, 0.5)
    # windows of 2: 1.0, 0.5, 0.5, 0.5, 0.0 -> 4 of 5 meet 0.5; mean overshoot (0.5 + 0 + 0 + 0 - 0.5) / 5 = 0
    satisfaction, overshoot = window_stats(correct, taus, 2)
    assert satisfaction == pytest.approx(0.8)
    assert overshoot == pytest.approx(0.0)
    with pytest.raises(ValueError, match="window"):
        rolling_mean(correct, 7)


class TauEcho(Router):
    """Routes to model 1 (always correct) when tau > 0.85, else model 0 (never correct)."""

    name = "echo"
    tau_capable = per_query_tau = True

    def route(self, emb, costs, tau=None):
        return Assignment((np.broadcast_to(tau, (len(emb),)) > 0.85).astype(np.int64))


def test_run_scenario_with_a_known_router():
    n = 40
    test = Split(np.zeros((n, 3)), np.tile([0.0, 1.0], (n, 1)), np.tile([1e-4, 1e-3], (n, 1)))
    summary, trace = run_scenario(TauEcho(), test, "step", (0.8, 0.9), n_queries=200, seeds=2, window=10)
    # step: tau = 0.82 for 100 queries (model 0, accuracy 0), then 0.88 (model 1, accuracy 1):
    # windows entirely in the second half meet the floor, and so does the one starting at query 99
    # (accuracy 0.9 >= its mean tau 0.874); every earlier window misses
    n_windows = 200 - 10 + 1
    assert summary["floor_satisfaction"] == pytest.approx((n_windows - 99) / n_windows)
    assert summary["accuracy"] == pytest.approx(0.5)
    assert summary["cost_per_1k"] == pytest.approx((0.1 + 1.0) / 2)
    assert trace["rolling_accuracy"].shape == (n_windows,)


def test_run_scenario_needs_a_per_query_tau_router():
    class Fixed(Router):
        name = "fixed"

    test = Split(np.zeros((4, 2)), np.ones((4, 2)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="cannot take a different tau per query"):
        run_scenario(Fixed(), test, "drift", (0.8, 0.9), n_queries=10, seeds=1, window=5)
