"""Off-policy estimation on a synthetic bandit with known truth, IPS weights, weighted masked BCE."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from proteus_train.heads import ips_weights, masked_bce
from proteus_train.off_policy import BanditRows, Estimate, OffPolicySupportWarning, Support, lower_bound, tau_intervals
from proteus_train.off_policy_calibration import UnsupportedLogError, refuse_unless_supported


def synthetic(n=20_000, k=3, seed=0, explore=True):
    """True accuracies per (row, slot); a logging policy choosing slot 0 with prob 0.8, others 0.1 each."""
    rng = np.random.default_rng(seed)
    truth = rng.uniform(0.2, 0.95, size=(n, k))
    probs = np.array([0.8, 0.1, 0.1]) if explore else np.array([1.0, 0.0, 0.0])
    logged = rng.choice(k, size=n, p=probs)
    y = (rng.random(n) < truth[np.arange(n), logged]).astype(float)
    scores = np.full((n, k), np.nan)
    scores[np.arange(n), logged] = y
    return truth, BanditRows(scores, logged, probs[logged]), rng


def test_dr_estimate_covers_the_true_value_with_a_biased_model():
    truth, rows, rng = synthetic()
    target = rng.integers(0, 3, len(truth))  # a policy unlike the logging one
    q = np.clip(truth + 0.15, 0, 1)  # the head is off by 15 pp: DR corrects it, the direct method does not
    est = rows.estimate(target, q)
    true_value = truth[np.arange(len(truth)), target].mean()
    assert est.ci_low <= true_value <= est.ci_high
    assert abs(q[np.arange(len(q)), target].mean() - true_value) > 0.1
    assert abs(est.snips - true_value) < 0.03 and est.unsupported_share == 0.0


def test_no_exploration_leaves_other_slots_unsupported():
    truth, rows, _ = synthetic(n=2_000, explore=False)
    est = rows.estimate(np.full(len(truth), 2), truth)
    assert rows.labelled_slots.tolist() == [True, False, False]
    assert est.n_matched == 0 and est.unsupported_share == 1.0 and np.isnan(est.snips)


def test_full_information_rows_count_their_exact_score():
    scores = np.array([[1.0, 0.0], [0.0, 1.0]])
    rows = BanditRows(scores, np.array([-1, -1]), np.array([np.nan, np.nan]))
    est = rows.estimate(np.array([0, 1]), np.full((2, 2), 0.3))
    assert est.dr == 1.0 and rows.labelled_slots.tolist() == [True, True]


def test_full_information_rows_observe_the_choice_without_a_propensity():
    # two bandit rows (logged slot 0) and two shadow rows, one of which did not score slot 1
    scores = np.array([[1.0, np.nan], [0.0, np.nan], [1.0, 1.0], [0.0, np.nan]])
    rows = BanditRows(scores, np.array([0, 0, -1, -1]), np.array([1.0, 1.0, np.nan, np.nan]))
    assert rows.estimate(np.array([1, 1, 1, 1]), np.full((4, 2), 0.5)).n_matched == 1  # the shadow row that scored 1
    assert rows.estimate(np.array([0, 0, 0, 0]), np.full((4, 2), 0.5)).n_matched == 4
    assert rows.labelled_slots.tolist() == [True, True]


def test_observed_scores_are_the_full_information_rows_that_scored_the_choice():
    scores = np.array([[1.0, np.nan], [0.0, 1.0], [1.0, np.nan]])
    rows = BanditRows(scores, np.array([0, -1, -1]), np.array([1.0, np.nan, np.nan]))
    assert rows.observed_scores(np.array([0, 0, 0])).tolist() == [0.0, 1.0]  # bandit row 0 is not one
    assert rows.observed_scores(np.array([1, 1, 1])).tolist() == [1.0]  # row 2 did not score slot 1


def test_head_free_terms_count_unobserved_choices_as_failed_and_weigh_explored_ones():
    # rows: logged slot 0 (pi 0.9, right), logged slot 1 explored (pi 0.1, right), logged 0 (wrong),
    # a shadow row that scored slot 1 right and slot 0 wrong
    scores = np.array([[1.0, np.nan], [np.nan, 1.0], [0.0, np.nan], [0.0, 1.0]])
    rows = BanditRows(scores, np.array([0, 1, 0, -1]), np.array([0.9, 0.1, 0.9, np.nan]), clip=5.0)
    assert rows.head_free_terms(np.array([1, 1, 1, 1])).tolist() == [0.0, 5.0, 0.0, 1.0]  # 1 / 0.1 clipped at 5
    assert np.allclose(rows.head_free_terms(np.array([0, 0, 0, 0])), [1 / 0.9, 0.0, 0.0, 0.0])


def test_head_free_bound_stays_under_the_truth_where_the_head_flatters_the_policy():
    truth, rows, rng = synthetic(n=4_000, explore=False)  # the log only ever observed slot 0
    target = np.where(rng.random(len(truth)) < 0.5, 0, 2)  # half the rows leave the logged choice
    q = np.clip(truth + 0.3, 0, 1)  # a head 30 pp too optimistic
    true_value = truth[np.arange(len(truth)), target].mean()
    assert rows.estimate(target, q).ci_low > true_value  # DR rests on the head where it left the log
    assert lower_bound(rows.head_free_terms(target), 1.645) < true_value


def test_a_log_that_reaches_no_tau_is_refused_with_what_it_lacks():
    rows = BanditRows(np.array([[1.0, np.nan], [0.0, np.nan]]), np.array([0, 0]), np.array([1.0, 1.0]))
    taus = np.array([0.80, 0.81, 0.82])
    points = [Estimate(dr, dr - 0.01, dr + 0.01, dr, 100, 60, 0.0) for dr in (0.97, 0.93, 0.9)]
    supported = np.array([True, True, True])
    refuse_unless_supported(np.array([0.9, 0.86, 0.85]), supported, points, taus, 0.01, rows, [], 0.1)  # 0.85 >= 0.81
    # 0.95 at the lowest tau does not count: calibrate reads a point by its higher taus too
    low = np.array([0.95, 0.79, 0.78])
    with pytest.warns(OffPolicySupportWarning, match="no exploration"):
        with pytest.raises(UnsupportedLogError, match=r"best lower bound on accuracy is 0\.7800 \(its DR estimate 0\.9700; "
                           r"60 of 100 labelled rows observe its choices\), under the bottom of the tau range 0\.8000 "
                           r"\+ margin 0\.0100, from 2 labelled decisions and 0 shadow rows; never labelled: \['b'\]; no exploration"):
            refuse_unless_supported(low, supported, points, taus, 0.01, rows, ["b"], 0.0)
    with pytest.warns(OffPolicySupportWarning), pytest.raises(UnsupportedLogError, match="and no operating point is supported"):
        refuse_unless_supported(np.array([0.95, 0.94, 0.93]), ~supported, points, taus, 0.01, rows, ["b"], 0.0)


def test_support_warning_names_models_and_tau_ranges():
    support = Support(["mid"], tau_intervals([0.8, 0.81, 0.82, 0.85], [True, True, False, True], 0.01), 20, 0.05, 0.0)
    assert support.unsupported_tau == [[0.8, 0.81], [0.85, 0.85]]
    with pytest.warns(OffPolicySupportWarning, match=r"never chosen.*\['mid'\].*\[\[0.8, 0.81\], \[0.85, 0.85\]\].*no exploration"):
        support.warn()


def test_ips_weights_are_clipped_and_absent_without_exploration():
    assert ips_weights(None, 20) is None and ips_weights(np.ones(4), 20) is None
    assert ips_weights(np.array([1.0, 0.5, 0.01, np.nan]), 20).tolist() == [1.0, 2.0, 20.0, 1.0]


def test_weighted_masked_bce_reduces_to_the_plain_loss_and_follows_the_weights():
    torch.manual_seed(0)
    logits = torch.randn(6, 3)
    targets = torch.tensor([[1.0, float("nan"), 0.0]] * 6)
    plain = masked_bce(logits, targets)
    assert torch.allclose(masked_bce(logits, targets, torch.ones(6)), plain)
    heavy_first = masked_bce(logits, targets, torch.tensor([100.0, 1, 1, 1, 1, 1]))
    first_row = masked_bce(logits[:1], targets[:1])
    assert abs(float(heavy_first - first_row)) < abs(float(plain - first_row))


def test_an_operating_point_needs_half_the_rows_agreeing_with_the_log():
    from proteus_train.off_policy import Estimate
    from proteus_train.off_policy_calibration import supported

    def est(matched, unsupported=0.0, n=100):
        return Estimate(0.9, 0.85, 0.95, 0.9, n, matched, unsupported)

    assert supported(est(50)) and supported(est(20, n=40))
    assert not supported(est(49)) and not supported(est(19, n=30)) and not supported(est(80, unsupported=0.06))
