"""Off-policy estimation on a synthetic bandit with known truth, IPS weights, weighted masked BCE,
doubly robust head targets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from litellm_proteus.operating_points import nearest_centroid
from proteus_train.heads import doubly_robust_targets, ips_weights, masked_bce, masked_squared_error
from proteus_train.off_policy import (
    BanditRows,
    Estimate,
    OffPolicySupportWarning,
    Support,
    lower_bound,
    standard_error,
    tau_intervals,
)
from proteus_train.off_policy_calibration import (
    UnsupportedLogError,
    point_bound,
    refuse_unless_supported,
    require_validation_rows,
)


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


def test_the_accuracy_interval_stays_within_zero_and_one():
    # 4 of 5 rows right: the normal interval 0.8 +- 0.39 would run to 1.19
    rows = BanditRows(np.array([[1.0], [1.0], [1.0], [1.0], [0.0]]), np.full(5, -1), np.full(5, np.nan))
    est = rows.estimate(np.zeros(5, dtype=int), np.full((5, 1), 0.5))
    assert est.dr == pytest.approx(0.8) and est.ci_high == 1.0 and est.ci_low == pytest.approx(0.8 - 0.392, abs=1e-3)
    assert est.to_dict()["ci95"] == [pytest.approx(0.40799, abs=1e-4), 1.0]
    wrong = BanditRows(np.array([[0.0], [0.0], [0.0], [1.0]]), np.full(4, -1), np.full(4, np.nan))
    assert wrong.estimate(np.zeros(4, dtype=int), np.full((4, 1), 0.5)).ci_low == 0.0  # 0.25 - 0.49 clipped
    one = BanditRows(np.array([[1.0]]), np.full(1, -1), np.full(1, np.nan)).estimate(np.zeros(1, dtype=int), np.ones((1, 1)))
    assert (one.ci_low, one.ci_high) == (0.0, 1.0)  # one row: nothing known beyond [0, 1]
    # a DR mean above 1 (a right answer at propensity 0.2 over a head that said 0.3): 3.8 on every row
    above = BanditRows(np.ones((50, 1)), np.zeros(50, dtype=int), np.full(50, 0.2))
    est = above.estimate(np.zeros(50, dtype=int), np.full((50, 1), 0.3))
    assert est.dr == pytest.approx(3.8) and (est.ci_low, est.ci_high) == (1.0, 1.0)  # never an inverted interval
    empty = BanditRows(np.ones((0, 1)), np.zeros(0, dtype=int), np.ones(0)).estimate(np.zeros(0, dtype=int), np.ones((0, 1)))
    assert np.isnan(empty.ci_low) and np.isnan(empty.ci_high)  # no rows: no interval, as no mean


def test_full_information_rows_observe_the_choice_without_a_propensity():
    # two bandit rows (logged slot 0) and two shadow rows, one of which did not score slot 1
    scores = np.array([[1.0, np.nan], [0.0, np.nan], [1.0, 1.0], [0.0, np.nan]])
    rows = BanditRows(scores, np.array([0, 0, -1, -1]), np.array([1.0, 1.0, np.nan, np.nan]))
    assert rows.estimate(np.array([1, 1, 1, 1]), np.full((4, 2), 0.5)).n_matched == 1  # the shadow row that scored 1
    assert rows.estimate(np.array([0, 0, 0, 0]), np.full((4, 2), 0.5)).n_matched == 4
    assert rows.labelled_slots.tolist() == [True, True]


def test_observed_rows_are_the_full_information_rows_that_scored_the_choice():
    scores = np.array([[1.0, np.nan], [0.0, 1.0], [1.0, np.nan]])
    rows = BanditRows(scores, np.array([0, -1, -1]), np.array([1.0, np.nan, np.nan]))
    assert rows.scores[rows.observed_rows(np.array([0, 0, 0])), 0].tolist() == [0.0, 1.0]  # bandit row 0 is not one
    assert rows.scores[rows.observed_rows(np.array([1, 1, 1])), 1].tolist() == [1.0]  # row 2 did not score slot 1


def test_shadow_rows_weigh_each_score_by_the_probability_their_row_scored_it():
    """A shadow row always scores the served model and each other candidate with its call_share: the
    rows where the policy agrees with the logging router must not stand in for the rest."""
    rng = np.random.default_rng(0)
    n, k, share = 40_000, 4, 1 / 3  # one of the three other candidates called per row
    served = rng.integers(0, k, n)
    # the policy's choice is right 95 % of the time where it agrees with the served model, 50 % elsewhere
    choice = np.where(rng.random(n) < 0.3, served, (served + rng.integers(1, k, n)) % k)
    truth = np.where(choice == served, 0.95, 0.5)
    called = rng.random((n, k)) < share
    called[np.arange(n), served] = True
    scores = np.where(called, 0.0, np.nan)
    scores[np.arange(n), choice] = np.where(called[np.arange(n), choice], rng.random(n) < truth, np.nan)
    inclusion = np.full((n, k), share)
    inclusion[np.arange(n), served] = 1.0
    rows = BanditRows(scores, np.full(n, -1), np.full(n, np.nan), inclusion=inclusion)
    full, terms = rows.full_information_terms(choice)
    assert len(full) == n and terms.mean() == pytest.approx(truth.mean(), abs=0.01)  # 0.635
    observed = rows.observed_rows(choice)  # the scored rows alone: mostly the agreeing ones
    assert rows.scores[observed, choice[observed]].mean() > truth.mean() + 0.1
    # DR on shadow rows weighs the same way: the head's error is corrected, not replaced by the agreeing rows'
    q = np.full((n, k), 0.8)
    assert rows.dr_terms(choice, q)[0].mean() == pytest.approx(truth.mean(), abs=0.01)
    # every slot scored (a full-information log, or inclusion unknown): the plain scores
    plain = BanditRows(np.array([[1.0, 0.0], [0.0, np.nan]]), np.array([-1, -1]), np.full(2, np.nan))
    assert plain.full_information_terms(np.array([0, 1]))[1].tolist() == [1.0, 0.0]  # row 1 did not score slot 1


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
    observed_part = truth[np.arange(len(truth)), 0][target == 0].sum() / len(truth)
    assert abs(rows.head_free_terms(target).mean() - observed_part) < 0.02  # what it left counts as failed
    assert lower_bound(rows.head_free_terms(target), 1.645) < true_value


def test_head_free_terms_are_unbiased_where_the_log_explored_and_low_where_the_clip_binds():
    truth, rows, rng = synthetic(n=40_000)  # logged with propensities 0.8 / 0.1 / 0.1
    target = rng.integers(0, 3, len(truth))
    true_value = truth[np.arange(len(truth)), target].mean()
    assert abs(rows.head_free_terms(target).mean() - true_value) < 0.015  # weights 1.25 and 10 < clip 20
    rows.clip = 2.0  # slots 1 and 2 weigh 2 instead of 10: a fifth of their share
    assert rows.head_free_terms(target).mean() < true_value - 0.1


def test_a_point_is_bounded_over_every_calibration_row_and_with_init_also_by_its_validation_rows():
    # 20 validation rows where the policy's choice was right 6 times, 80 training rows where it was
    # always right (with --init, an initial artifact that trained on those prompts may flatter them)
    scores = np.full((100, 2), np.nan)
    scores[:, 0] = np.r_[np.ones(6), np.zeros(14), np.ones(80)]
    rows = BanditRows(scores, np.zeros(100, dtype=int), np.ones(100))
    choice = np.zeros(100, dtype=int)
    dr = np.r_[scores[:20, 0], np.ones(80)]
    pooled = lower_bound(scores[:, 0], 1.645, future=20)  # every row; the future sample is the validation split's
    bound, check = point_bound(rows, choice, dr, n_val=20, z=1.645, full_rows=False)
    assert 0.7 < pooled < 0.86 and bound == pytest.approx(pooled) and check["head_free_lower"] == pytest.approx(pooled, abs=1e-5)
    bound, check = point_bound(rows, choice, dr, n_val=20, z=1.645, full_rows=False, validation_cap=True)
    validation = lower_bound(scores[:20, 0], 1.645, future=20)  # 0.3 less its noise and a future sample's
    assert validation < 0.3 and bound == pytest.approx(validation) and check["head_free_lower"] == pytest.approx(validation, abs=1e-5)
    for cap in (False, True):  # too few validation rows to vouch, however many training rows
        assert point_bound(rows, choice, dr, n_val=19, z=1.645, full_rows=False, validation_cap=cap)[0] == -np.inf
    # with shadow rows their own scores bound it too (with --init, capped by the validation shadow rows' bound)
    full = np.array([[0.0, 1.0]] * 8 + [[1.0, 1.0]] * 12)
    mixed = BanditRows(np.r_[full, scores[20:]], np.r_[np.full(20, -1), np.zeros(80, dtype=int)],
                       np.r_[np.full(20, np.nan), np.ones(80)])
    bound, check = point_bound(mixed, choice, np.ones(100), n_val=20, z=1.645, full_rows=True, validation_cap=True)
    expected = lower_bound(full[:, 0], 1.645, future=20)  # the validation shadow rows are all of them here
    assert check["full_information_rows"] == 20 and check["full_information_lower"] == pytest.approx(expected, abs=1e-5)
    assert bound == pytest.approx(max(expected, check["head_free_lower"]), abs=1e-5)  # the tighter head-free bound


def test_bounds_count_a_prompt_asked_again_as_one_sample():
    rng = np.random.default_rng(0)
    once = rng.integers(0, 2, 200).astype(float)
    repeated = np.repeat(once, 10)  # each prompt asked 10 times, its outcome the same each time
    prompts = np.repeat(np.arange(200), 10)
    assert standard_error(once, np.arange(200)) == pytest.approx(standard_error(once))  # one row per prompt: plain
    # the rows alone read 10x the samples (SE / sqrt(10)); clustered, the 200 prompts are what there is
    assert standard_error(repeated) == pytest.approx(standard_error(once) / math.sqrt(10), rel=0.01)
    assert standard_error(repeated, prompts) == pytest.approx(standard_error(once), rel=0.01)
    assert lower_bound(repeated, 1.645, prompts) == pytest.approx(lower_bound(once, 1.645), rel=0.01)
    # a future sample of 200 prompts adds its own noise: m (1 - m) / 200 to the variance
    m, c = once.mean(), (once.sum() + 1.645 ** 2 / 2) / (200 + 1.645 ** 2)  # the mean, its Agresti-Coull centre
    assert lower_bound(once, 1.645, future=200) == pytest.approx(
        m - 1.645 * math.sqrt(standard_error(once) ** 2 + c * (1 - c) / 200))
    rows = BanditRows(repeated[:, None], np.full(2000, -1), np.full(2000, np.nan), groups=prompts)
    half = rows.estimate(np.zeros(2000, dtype=int), np.full((2000, 1), 0.5)).to_dict()["ci95"]
    assert half[1] - half[0] == pytest.approx(2 * 1.959964 * standard_error(once), rel=0.02)


def test_propensities_outside_zero_one_are_refused_by_name():
    with pytest.raises(ValueError, match=r"propensity must be in \(0, 1\].*1 rows"):
        BanditRows(np.array([[1.0, np.nan], [0.0, np.nan]]), np.array([0, 0]), np.array([1.0, 0.0]))


def test_a_log_that_reaches_no_tau_is_refused_with_what_it_lacks():
    rows = BanditRows(np.array([[1.0, np.nan], [0.0, np.nan]]), np.array([0, 0]), np.array([1.0, 1.0]))
    taus = np.array([0.80, 0.81, 0.82])
    points = [Estimate(dr, dr - 0.01, dr + 0.01, dr, 100, k, 0.0) for dr, k in ((0.97, 60), (0.93, 70), (0.9, 80))]
    every = np.array([True, True, True])
    refuse_unless_supported(np.array([0.9, 0.86, 0.85]), every, points, taus, 0.01, rows, [], 0.1)  # 0.85 >= 0.81
    # 0.95 at the lowest tau does not count: calibrate reads a point by its higher taus too
    with pytest.warns(OffPolicySupportWarning, match="no exploration"), pytest.raises(
        UnsupportedLogError, match=r"best lower bound on accuracy is 0\.7800 \(its DR estimate 0\.9700; 60 of 100 "
        r"labelled rows observe its choices\), under the bottom of the tau range 0\.8000 \+ margin 0\.0100, from 2 "
        r"labelled decisions and 0 shadow rows; never labelled: \['b'\]; no exploration"):
        refuse_unless_supported(np.array([0.95, 0.79, 0.78]), every, points, taus, 0.01, rows, ["b"], 0.0)
    # an unsupported point neither counts nor pulls the points below it down
    some = np.array([True, False, False])
    refuse_unless_supported(np.array([0.85, 0.5, 0.5]), some, points, taus, 0.01, rows, [], 0.1)
    with pytest.raises(UnsupportedLogError, match=r"is 0\.8000 \(its DR estimate 0\.9700"):
        refuse_unless_supported(np.array([0.80, 0.95, 0.95]), some, points, taus, 0.01, rows, [], 0.1)
    with pytest.raises(UnsupportedLogError, match=r"is 0\.9300 \(its DR estimate 0\.9700.*\), and no operating point is supported"):
        refuse_unless_supported(np.array([0.95, 0.94, 0.93]), ~every, points, taus, 0.01, rows, [], 0.1)
    with pytest.raises(UnsupportedLogError, match="undefined, fewer than 20 validation rows.*, and no supported operating point has a bound"):
        refuse_unless_supported(np.full(3, -np.inf), every, points, taus, 0.01, rows, [], 0.1)  # too few rows


def test_too_few_validation_rows_are_refused_before_the_policy_is_trained():
    """Below MIN_MATCHED validation rows no point can have a bound (point_bound): nothing to train for."""
    rows = BanditRows(np.array([[1.0, np.nan], [np.nan, 0.0], [1.0, 1.0]]), np.array([0, 1, -1]), np.array([0.5, 1.0, np.nan]))
    require_validation_rows(rows, 20, ["a", "b"])
    with pytest.raises(UnsupportedLogError, match=r"its calibration rows hold 19 validation rows, fewer than the 20 a lower "
                                                  r"bound on accuracy needs, from 2 labelled decisions and 1 shadow rows\. No artifact"):
        require_validation_rows(rows, 19, ["a", "b"])
    greedy = BanditRows(np.array([[1.0, np.nan]]), np.array([0]), np.array([1.0]))
    with pytest.warns(OffPolicySupportWarning), pytest.raises(UnsupportedLogError, match=r"never labelled: \['b'\]; no exploration"):
        require_validation_rows(greedy, 0, ["a", "b"])


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


def test_doubly_robust_targets_correct_the_chosen_cell_and_keep_full_information_rows():
    q = np.array([[0.6, 0.8], [0.6, 0.8], [0.5, 0.5], [0.6, 0.8]])
    nan = np.nan
    scores = np.array([[1.0, nan], [nan, 0.0], [1.0, 0.0], [nan, nan]])
    choice, propensity = np.array([0, 1, -1, 0]), np.array([0.5, 0.01, nan, 1.0])
    t = doubly_robust_targets(q, scores, choice, propensity, clip=20.0)
    assert t[0].tolist() == pytest.approx([0.6 + 2 * 0.4, 0.8])  # 1/pi = 2
    assert t[1].tolist() == pytest.approx([0.6, 0.8 - 20 * 0.8])  # 1/pi = 100, clipped at 20
    assert t[2].tolist() == [1.0, 0.0]  # a full-information (shadow) row keeps its outcomes
    assert t[3].tolist() == pytest.approx([0.6, 0.8])  # an unlabelled choice: q everywhere


def test_doubly_robust_targets_average_to_the_truth_where_the_head_is_wrong():
    """With known propensities, a biased q still gives unbiased per-slot means (the DR property)."""
    rng = np.random.default_rng(0)
    n, truth = 200_000, np.array([0.3, 0.9])
    propensity_of_1 = rng.uniform(0.2, 0.8, n)
    choice = (rng.random(n) < propensity_of_1).astype(int)
    propensity = np.where(choice == 1, propensity_of_1, 1 - propensity_of_1)
    scores = np.full((n, 2), np.nan)
    scores[np.arange(n), choice] = (rng.random(n) < truth[choice]).astype(float)
    q = np.tile([0.6, 0.6], (n, 1))  # wrong for both slots
    means = doubly_robust_targets(q, scores, choice, propensity, clip=1e9).mean(axis=0)
    assert means == pytest.approx(truth, abs=0.01)
    assert np.abs(q.mean(axis=0) - truth).min() > 0.25  # the head alone is far off


def test_masked_squared_error_ignores_unobserved_cells_and_takes_targets_outside_0_1():
    logits = torch.zeros(2, 2)  # p = 0.5 everywhere
    targets = torch.tensor([[1.5, float("nan")], [-0.5, 0.5]])
    assert float(masked_squared_error(logits, targets)) == pytest.approx((1.0 + 1.0 + 0.0) / 3)


def test_an_operating_point_needs_half_the_rows_agreeing_with_the_log():
    from proteus_train.off_policy import Estimate
    from proteus_train.off_policy_calibration import supported

    def est(matched, unsupported=0.0, n=100):
        return Estimate(0.9, 0.85, 0.95, 0.9, n, matched, unsupported)

    assert supported(est(50)) and supported(est(20, n=40))
    assert not supported(est(49)) and not supported(est(19, n=30)) and not supported(est(80, unsupported=0.06))


def test_a_sample_of_all_ones_still_bounds_below_one():
    """25 shadow rows, every one right: the sample has no spread, and a normal bound would say 1.0
    (and, as the tighter head-free bound, would lift the point's cap).  The Bernoulli floor keeps it
    near the exact (Clopper-Pearson) 95 % bound, 0.887."""
    bound = lower_bound(np.ones(25), 1.645)
    assert 0.85 < bound < 0.95
    assert lower_bound(np.ones(25), 1.645, future=25) < bound
    spread = np.r_[np.ones(700), np.zeros(300)]  # a sample with its own spread: the floor does not bind
    assert lower_bound(spread, 1.645) == pytest.approx(0.7 - 1.645 * spread.std(ddof=1) / math.sqrt(1000))


def test_single_models_and_ladders_join_the_off_policy_table_where_the_log_vouches_for_them():
    """The off-policy calibration weighs the points the full-information one does (a single model,
    quality-greedy, cluster ladders), each bounded as a grid point is: a ladder of a cheap model where
    it is good and the dear one elsewhere serves the bottom of the range; a single model is no better
    than its shadow rows' bound, and a model the log never observed counts as failed, whatever the head says."""
    from litellm_proteus.costs import CostNormalizer
    from litellm_proteus.model import ProteusModel
    from litellm_proteus.model_config import ModelConfig
    from proteus_train.config import TrainConfig
    from proteus_train.off_policy_calibration import off_policy_calibration

    rng = np.random.default_rng(0)
    n, n_val = 1200, 480
    easy = rng.random(n) < 0.5  # two kinds of prompt, far apart in the embedding
    emb_np = rng.normal(size=(n, 4))
    emb_np[:, 0] += np.where(easy, 4.0, -4.0)
    # slot 0 cheap, good on easy prompts only; slot 1 middling; slot 2 dear and best
    truth = np.stack([np.where(easy, 0.97, 0.6), np.full(n, 0.8), np.full(n, 0.97)], axis=1)
    full = (rng.random((n, 3)) < truth).astype(float)
    costs = np.tile([1e-4, 1e-3, 1e-2], (n, 1))
    shadow = rng.random(n) < 0.5  # half the rows are shadow rows scoring slots 0 and 2; the rest log slot 2
    scores = np.full((n, 3), np.nan)
    scores[shadow, 0], scores[shadow, 2] = full[shadow, 0], full[shadow, 2]
    scores[~shadow, 2] = full[~shadow, 2]
    rows = BanditRows(scores, np.where(shadow, -1, 2), np.where(shadow, np.nan, 1.0))
    torch.manual_seed(0)
    model = ProteusModel(ModelConfig(embed_dim=4, n_models=3, hidden_dim=8))
    emb = torch.as_tensor(emb_np, dtype=torch.float32)
    p = torch.as_tensor(np.tile(truth.mean(0), (n, 1)), dtype=torch.float32)  # a head that cannot tell the prompts apart
    normalizer = CostNormalizer(low=1e-4, high=1e-2)
    taus = np.round(np.arange(0.80, 0.9601, 0.01), 6)

    def calibrated(**options):
        config = TrainConfig(calibration_step=0.01, calibration_clusters=4, **options)
        return off_policy_calibration(model, emb, p, rows, costs, normalizer, taus, (0.80, 0.95), ["a", "b", "c"],
                                      config, n_val=n_val)

    result = calibrated()
    by_rule = {c.rule.label(): c for c in result.candidates}
    single = full[shadow, 0]
    assert by_rule["slot:0"].accuracy <= min(lower_bound(single, 1.645, future=n_val), single.mean() - 0.005) + 1e-9
    assert by_rule["slot:1"].accuracy < 0.05  # never observed: counted as failed (its head says 0.8)
    ladders = [c for c in result.candidates if c.rule.kind == "cluster"]
    assert ladders and all(c.accuracy < 0.6 for c in ladders if 1 in c.rule.cluster_slots)
    served = dict(zip(result.calibration.requested, result.calibration.requested_point))
    assert served[0.8].kind == "cluster" and set(served[0.8].cluster_slots) == {0, 2} and result.calibration.centroids  # the runtime needs the centroids
    ladder = next(c for c in ladders if c.rule == served[0.8])
    assert ladder.cost_usd < 0.6e-2 and ladder.accuracy >= 0.8  # about half the dear model's price
    # a ladder is fitted on the training rows' labels: its bound is capped by the validation rows' own
    choice = np.asarray(ladder.rule.cluster_slots)[nearest_centroid(emb_np, np.asarray(result.calibration.centroids))]
    observed = np.flatnonzero(shadow[:n_val])
    assert ladder.accuracy <= lower_bound(full[observed, choice[observed]], 1.645, future=n_val) + 1e-9
    assert result.support.unsupported_tau == []
    # without the rules the table is the policy grid's alone
    assert calibrated(operating_point_rules=False).calibration.requested_point == []
