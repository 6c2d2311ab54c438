"""Calibration of an artifact trained on a decision log: the operating curve estimated off-policy.

With bandit feedback the accuracy of a policy tau cannot be read off the rows (only the logged
slot's label is known), so each point of the curve is the doubly robust estimate of
``off_policy`` over the validation rows and the out-of-fold training rows, and the tau table is
built on its one-sided lower confidence bound (z = ``calibration_z``): a point counts as meeting a
tau only when the estimate's noise cannot explain it.  The cost of a choice is known exactly (every
candidate's cost is logged), so the cost curve needs no estimate.

The DR estimate leans on the performance head wherever the new policy chooses what the log never
observed, and a head fitted on few labels flatters exactly the choices a policy trained on it
prefers.  So each point's bound is also capped by bounds that do not use the head:

- the head-free bound: clipped IPS over the bandit rows, a choice the log never observed counted
  as failed, and the full-information rows' own scores (``BanditRows.head_free_terms``);
- with full-information rows (shadow rows, drawn at random), the bound of their scores alone, each
  weighed by the probability its row scored it (``BanditRows.full_information_terms``), unbiased for
  the policy; the tighter of the two holds, so it is the one that caps;
- each over every calibration row, validation and out-of-fold training rows alike, with at least
  ``MIN_MATCHED`` validation rows: on a decision log PPO's reward uses no training label (it scores
  every slot with the out-of-fold head), and the training rows are routed with out-of-fold
  predictions.  What reaches a training row's choice from the training labels is the per-model
  boosts b (one number a model) and the projection the policy reads, with no reward for exploiting
  either.  (A policy rewarded with the labels keeps the logged choice where it was right and leaves
  it where it was wrong: then only the validation rows are a fair sample.)
- with ``validation_cap`` (``--init``, or an encoder fine-tuned on the training labels), each also no
  higher than its own bound over the validation rows alone.  An initial artifact may have been
  trained on the log's prompts, validation prompts too, so the cap does not remove that leak: its
  narrower sample widens the bound, a margin measured on simulated logs whose prompts the initial
  artifact trained on with full information (docs/learn-from-traffic.md).

Every bound clusters its standard error by prompt (``BanditRows.groups``): traffic asks some prompts
again and again, and a repeat is not a new sample.  And every bound covers a future sample as large
as the validation split (``lower_bound``'s ``future``), as the full-information calibration's margin
does: the promise is about the traffic to come, not the rows at hand.

Beside the policy grid, the table weighs the points the full-information calibration does (each
single model, quality-greedy, cluster ladders, the policy past its grid: ``rule_candidates``), each
bounded the same way: they give the table a cheap end and a top the policy grid may lack.

``calibration_margin`` is the least margin below the point estimate, as in the full-information
calibration (the bound covers the noise already); with ``validation_cap`` it is added to the bound,
a margin for the initial artifact's leak.  When no supported point's bound reaches the bottom of the
tau range, nothing can be promised from the log: training stops with ``UnsupportedLogError`` (exit 2) instead of writing an
artifact that claims a tau.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from litellm_proteus.artifact import TauCalibration
from litellm_proteus.costs import CostNormalizer
from litellm_proteus.model import ProteusModel

from litellm_proteus.operating_points import POLICY

from .calibration import (
    CandidatePoint, OperatingCurve, calibrate, cluster_ladders, kmeans, monotone_envelope, policy_choices, rule_choice,
    rules_beside_policy,
)
from .config import TrainConfig
from .off_policy import BanditRows, Estimate, Support, lower_bound, tau_intervals

MIN_MATCHED = 20  # labelled rows agreeing with the logged choice below which a point lacks support
MIN_MATCHED_SHARE = 0.5  # ... or this share of rows: elsewhere DR rests on the head alone (no positivity)
MAX_UNSUPPORTED_SHARE = 0.05  # share of rows routed to never-labelled slots above which it does too


def supported(estimate: Estimate) -> bool:
    """Whether the log can vouch for an operating point.  The logging router was (nearly)
    deterministic, so where the new policy disagrees with it the logged propensity of the new choice
    is ~0 and the DR term is the head's prediction alone (docs/learn-from-traffic.md)."""
    return (estimate.n_matched >= MIN_MATCHED and estimate.n_matched >= MIN_MATCHED_SHARE * estimate.n_rows
            and estimate.unsupported_share <= MAX_UNSUPPORTED_SHARE)


class UnsupportedLogError(ValueError):
    """The decision log vouches for no operating point: an artifact trained on it could promise no tau."""


@dataclass
class OffPolicyCalibration:
    calibration: TauCalibration
    declared: tuple[float, float]
    curve: OperatingCurve  # accuracy = DR point estimate
    lower: np.ndarray  # the lower bounds the table was built on (-inf: unsupported point)
    estimates: list[dict]
    support: Support
    candidates: list[CandidatePoint]  # the operating points beside the grid the log vouches for (their bound)


def off_policy_calibration(
    model: ProteusModel,
    emb: torch.Tensor,
    p: torch.Tensor,
    rows: BanditRows,
    costs_usd: np.ndarray,
    normalizer: CostNormalizer,
    policy_taus: np.ndarray,
    tau_range: tuple[float, float],
    models: list[str],
    config: TrainConfig,
    n_val: int,
    validation_cap: bool = False,
) -> OffPolicyCalibration:
    """``emb`` / ``p`` / ``rows`` / ``costs_usd``: the calibration rows, the first ``n_val`` of them
    validation rows (with the head's predictions), the rest training rows (out-of-fold predictions);
    ``validation_cap``: cap each head-free bound by the validation rows' own (``--init``)."""
    choices, mus = policy_choices(model, emb, costs_usd, normalizer, policy_taus, tau_range, p)
    q = p.cpu().numpy().astype(np.float64)
    index = np.arange(len(q))
    estimates, lower, points, costs = [], [], [], []
    full_rows = bool((rows.logged_choice < 0).any()) and bool((rows.logged_choice >= 0).any())
    future = future_sample(rows, n_val)
    checks: list[dict] = []
    for choice in choices:
        est = rows.estimate(choice, q)
        terms, _ = rows.dr_terms(choice, q)
        estimates.append(est)
        points.append(est.dr)
        bound, check = point_bound(rows, choice, terms, n_val, config.calibration_z, full_rows, future, validation_cap)
        checks.append(check)
        lower.append(bound)
        costs.append(float(costs_usd[index, choice].mean()))
    ok = np.array([supported(e) for e in estimates])
    least = least_accuracy(np.asarray(lower), np.asarray(points), config.calibration_margin, validation_cap)
    # an operating point the log cannot vouch for never meets a tau (-inf: the table skips it)
    lower_arr, cost_arr = np.where(ok, least, -np.inf), np.asarray(costs)
    extra, centroids = [], None
    if config.operating_point_rules:
        extra, centroids = rule_candidates(model, emb, q, rows, costs_usd, normalizer, policy_taus, tau_range, config,
                                           n_val, full_rows, future, validation_cap)
    unlabelled, explored_share = log_support(rows, models)
    refuse_unless_supported(least, ok, estimates, policy_taus, 0.0, rows, unlabelled, explored_share,
                            max((c.accuracy for c in extra), default=-np.inf))
    frontier_costs = cost_arr if (config.mix_operating_points or extra) else None
    calibration, declared = calibrate(policy_taus, lower_arr, 0.0, config.calibration_step, frontier_costs, extra,
                                      frontier=config.mix_operating_points, centroids=centroids)
    bad_point = {float(t): not good for t, good in zip(policy_taus, ok)}
    bad_point.update({float(c.policy_tau): False for c in extra if c.rule.kind == "policy"})
    # an entry served by a rule point is vouched for by that point's own bound
    rules_served = calibration.requested_point or [POLICY] * len(calibration.requested)
    bad_requested = [rule.kind == "policy" and bad_point.get(float(t), True)
                     for t, rule in zip(calibration.policy_tau, rules_served)]
    support = Support(unlabelled, tau_intervals(calibration.requested, bad_requested, config.calibration_step),
                      MIN_MATCHED, MAX_UNSUPPORTED_SHARE, explored_share)
    curve = OperatingCurve(np.asarray(points), mus, cost_arr)
    points_out = [{**e.to_dict(), **check} for e, check in zip(estimates, checks)]
    return OffPolicyCalibration(calibration, declared, curve, lower_arr, points_out, support, extra)


def least_accuracy(bound: np.ndarray, dr: np.ndarray, margin: float, validation_cap: bool) -> np.ndarray:
    """The accuracy a tau table may count on at operating points with these lower bounds and DR estimates.

    The bound holds the margin already (z standard errors of the estimate and of a future sample): as in
    the full-information calibration, ``margin`` (calibration_margin) is the least margin below the
    estimate, not one more.  With ``validation_cap`` it is added: an initial artifact may have trained on
    the log's prompts, which no bound over them can see (a margin measured on simulated logs,
    docs/learn-from-traffic.md)."""
    return bound - margin if validation_cap else np.minimum(bound, dr - margin)


def rule_candidates(model: ProteusModel, emb: torch.Tensor, q: np.ndarray, rows: BanditRows, costs_usd: np.ndarray,
                    normalizer: CostNormalizer, policy_taus: np.ndarray, tau_range: tuple[float, float],
                    config: TrainConfig, n_val: int, full_rows: bool, future: int, validation_cap: bool,
                    ) -> tuple[list[CandidatePoint], np.ndarray | None]:
    """The operating points beside the policy grid that the full-information calibration also weighs
    (``calibration.rule_points``: the policy past the grid, each single model, quality-greedy, cluster
    ladders), each bounded as a grid point is; and the ladders' centroids.

    - The policy past the grid is a policy point: it needs the grid's support.
    - A rule's bound is at most a head-free one (``point_bound``), so a model the log rarely observed
      gets a low bound, not a flattering one: no support test is needed.
    - A cluster ladder is fitted on the training rows' DR values (a slot per cluster of the training
      embeddings), so its bound is also capped by the validation rows' own, as the full-information
      calibration caps it by validation accuracy."""
    index = np.arange(len(q))
    emb_np = emb.cpu().numpy().astype(np.float64)
    candidates: list[CandidatePoint] = []

    def bounded(choice: np.ndarray, policy: bool = False, fitted: bool = False) -> float | None:
        """The point's least accuracy, None where the log cannot vouch for it."""
        est = rows.estimate(choice, q)
        terms, _ = rows.dr_terms(choice, q)
        bound, _ = point_bound(rows, choice, terms, n_val, config.calibration_z, full_rows, future, validation_cap or fitted)
        if (policy and not supported(est)) or not np.isfinite(bound):
            return None
        return float(least_accuracy(np.asarray(bound), np.asarray(est.dr), config.calibration_margin, validation_cap))

    if policy_taus[-1] < 1.0:
        beyond = np.round(np.linspace(policy_taus[-1], 1.0, 6)[1:], 6)
        choices, _ = policy_choices(model, emb, costs_usd, normalizer, beyond, tau_range, torch.as_tensor(q))
        for tau, choice in zip(beyond, choices):
            accuracy = bounded(choice, policy=True)
            if accuracy is not None:
                candidates.append(CandidatePoint(POLICY, accuracy, float(costs_usd[index, choice].mean()), float(tau)))
    centroids, ladders = None, None
    train = slice(n_val, None)
    if config.calibration_clusters > 1 and len(q) - n_val >= 10 * config.calibration_clusters:
        centroids = kmeans(emb_np[train], config.calibration_clusters, config.seed)
        ladders = cluster_ladders(emb_np[train], rows.dr_matrix(q)[train], costs_usd[train], centroids)
    boost = model.boost.detach().cpu().numpy()
    for rule in rules_beside_policy(q.shape[1], ladders):
        choice = rule_choice(rule, emb_np, q, boost, centroids)
        accuracy = bounded(choice, fitted=rule.kind == "cluster")
        if accuracy is not None:
            candidates.append(CandidatePoint(rule, accuracy, float(costs_usd[index, choice].mean())))
    return candidates, centroids


def log_support(rows: BanditRows, models: list[str]) -> tuple[list[str], float]:
    """(the models no bandit row labels, the share of bandit rows exploration could have moved)."""
    unlabelled = [m for m, labelled in zip(models, rows.labelled_slots) if not labelled]
    bandit = rows.logged_choice >= 0
    return unlabelled, float(np.mean(rows.propensity[bandit] < 1)) if bandit.any() else 0.0


def require_validation_rows(rows: BanditRows, n_val: int, models: list[str]) -> None:
    """Before the policy is trained: with fewer than ``MIN_MATCHED`` validation rows no operating
    point has a bound (``point_bound``), so whatever the policy learns the log vouches for none:
    raise ``UnsupportedLogError`` (after the support warning) at once."""
    if n_val >= MIN_MATCHED:
        return
    unlabelled, explored_share = log_support(rows, models)
    Support(unlabelled, [], MIN_MATCHED, MAX_UNSUPPORTED_SHARE, explored_share).warn()
    raise UnsupportedLogError(
        f"the decision log vouches for no operating point: its calibration rows hold {n_val} validation rows, fewer "
        f"than the {MIN_MATCHED} a lower bound on accuracy needs" + refusal_tail(rows, unlabelled, explored_share))


def refusal_tail(rows: BanditRows, unlabelled: list[str], explored_share: float) -> str:
    """What a refusal adds after its reason: the rows it had, the gaps in the log, and what to do."""
    n_full = int((rows.logged_choice < 0).sum())
    return (f", from {len(rows.logged_choice) - n_full} labelled decisions and {n_full} shadow rows"
            + (f"; never labelled: {unlabelled}" if unlabelled else "")
            + ("; no exploration" if explored_share == 0 else "")
            + ". No artifact was written: keep serving the current one, and collect more feedback labels, "
            "enable exploration ({rate: 0.02}) or shadow evaluation (shadow: {rate: 0.1, ...}) before training again")


def future_sample(rows: BanditRows, n_val: int) -> int:
    """The size of the future sample every bound covers: the validation split's prompts (its rows
    without ``groups``), so the promise holds on the traffic to come."""
    return n_val if rows.groups is None else len(np.unique(rows.groups[:n_val]))


def point_bound(rows: BanditRows, choice: np.ndarray, dr_terms: np.ndarray, n_val: int, z: float,
                full_rows: bool, future: int | None = None, validation_cap: bool = False) -> tuple[float, dict]:
    """One operating point's lower bound on accuracy (the least of those in the module docstring;
    -inf where any is undefined) and its parts for the manifest's ``off_policy_curve``."""
    def capped(values: np.ndarray, groups: np.ndarray | None, n_first: int) -> float:
        """The bound over all ``values`` (with ``validation_cap``, no higher than the one over their
        first ``n_first``, the validation ones); below MIN_MATCHED validation rows, none."""
        if n_first < MIN_MATCHED:
            return -np.inf
        pooled = lower_bound(values, z, groups, future)
        if not validation_cap:
            return pooled
        first_groups = None if groups is None else groups[:n_first]
        return min(pooled, lower_bound(values[:n_first], z, first_groups, future))

    groups = rows.groups
    future = future_sample(rows, n_val) if future is None else future
    head_free = rows.head_free_terms(choice)
    parts = {"head_free_lower": capped(head_free, groups, n_val)}
    if full_rows:
        full, terms = rows.full_information_terms(choice)
        parts["full_information_lower"] = capped(terms, None if groups is None else groups[full], int((full < n_val).sum()))
        parts["full_information_rows"] = len(rows.observed_rows(choice))
    # both head-free bounds hold; with shadow rows the tighter of the two caps the DR bound
    head_free_bound = max(parts["head_free_lower"], parts.get("full_information_lower", -np.inf))
    bound = min(-np.inf if np.isnan(b) else b for b in (lower_bound(dr_terms, z, groups, future), head_free_bound))
    check = {k: (round(float(v), 5) if np.isfinite(v) else None) if isinstance(v, float) else v for k, v in parts.items()}
    return bound, check


def refuse_unless_supported(lower: np.ndarray, ok: np.ndarray, estimates: list[Estimate], policy_taus: np.ndarray,
                            margin: float, rows: BanditRows, unlabelled: list[str], explored_share: float,
                            best_rule_point: float = -np.inf) -> None:
    """Raise ``UnsupportedLogError`` (after the support warning) when no supported operating point's
    bound, as ``calibrate`` reads it (``monotone_envelope``), nor ``best_rule_point`` (the best bound
    beside the grid) reaches the bottom of the tau range + margin.  The message names the best grid
    point's bound beside its DR estimate: how far the head's optimism would have carried the promise."""
    supported_envelope = monotone_envelope(np.where(ok, lower, -np.inf))
    if max(supported_envelope.max(initial=-np.inf), best_rule_point) >= float(policy_taus[0]) + margin:
        return
    Support(unlabelled, [], MIN_MATCHED, MAX_UNSUPPORTED_SHARE, explored_share).warn()
    if np.isfinite(supported_envelope).any():
        best = int(np.argmax(supported_envelope))
        reading, note = supported_envelope[best], ""
    else:  # no supported point has a bound: name the best point all the same
        envelope = monotone_envelope(np.where(np.isnan(lower), -np.inf, lower))
        best = int(np.argmax(envelope))
        reading = envelope[best]
        note = ", and no supported operating point has a bound" if ok.any() else ", and no operating point is supported"
    point = estimates[best]
    bound_text = f"{reading:.4f}" if np.isfinite(reading) else f"undefined, fewer than {MIN_MATCHED} validation rows"
    raise UnsupportedLogError(
        f"the decision log vouches for no operating point: the best lower bound on accuracy is {bound_text} "
        f"(its DR estimate {point.dr:.4f}; {point.n_matched} of {point.n_rows} labelled rows observe its choices){note}"
        f", under the bottom of the tau range {float(policy_taus[0]):.4f}" + (f" + margin {margin:.4f}" if margin else "")
        + refusal_tail(rows, unlabelled, explored_share)
    )
