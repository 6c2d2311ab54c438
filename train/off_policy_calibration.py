"""Calibration of an artifact trained on a decision log: the operating curve estimated off-policy.

With bandit feedback the accuracy of a policy tau cannot be read off the rows (only the logged
slot's label is known), so each point of the curve is the doubly robust estimate of
``off_policy`` over the validation rows and the out-of-fold training rows, and the tau table is
built on its one-sided lower confidence bound (z = ``calibration_z``): a point counts as meeting a
tau only when the estimate's noise cannot explain it.  The cost of a choice is known exactly (every
candidate's cost is logged), so the cost curve needs no estimate.

The DR estimate leans on the performance head wherever the new policy chooses what the log never
observed, and a head fitted on few labels flatters exactly the choices a policy trained on it
prefers.  So each point's lower bound is also capped by a bound that does not use the head:

- with full-information rows among them (shadow rows), the bound of those rows' own scores of the
  point's choices (shadow rows are drawn at random, so they measure the policy without the head);
- without them, the head-free bound: clipped IPS, which counts a choice the log never observed as
  failed (``BanditRows.head_free_terms``): tight where the policy agrees with the logged choices or
  the log explored them, the worst case where it did neither.

Measured on simulated logs (docs/learn-from-traffic.md): with the DR bound alone, artifacts trained
from 5 % labels declared taus up to 0.89 whose test accuracy was 0.68-0.79.  When no operating
point's bound reaches the bottom of the tau range, nothing can be promised from the log: training
stops with ``UnsupportedLogError`` (exit 2) instead of writing an artifact that claims a tau.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from litellm_proteus.artifact import TauCalibration
from litellm_proteus.costs import CostNormalizer
from litellm_proteus.model import ProteusModel

from .calibration import OperatingCurve, calibrate, policy_choices
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
) -> OffPolicyCalibration:
    """``emb`` / ``p`` / ``rows`` / ``costs_usd``: the calibration rows (validation with the head's
    predictions, training rows with out-of-fold predictions)."""
    choices, mus = policy_choices(model, emb, costs_usd, normalizer, policy_taus, tau_range, p)
    q = p.cpu().numpy().astype(np.float64)
    index = np.arange(len(q))
    estimates, lower, points, costs = [], [], [], []
    full_rows = bool((rows.logged_choice < 0).any()) and bool((rows.logged_choice >= 0).any())
    checks: list[dict] = []
    for choice in choices:
        est = rows.estimate(choice, q)
        terms, _ = rows.dr_terms(choice, q)
        estimates.append(est)
        points.append(est.dr)
        bound = lower_bound(terms, config.calibration_z)
        if full_rows:  # a bandit log with shadow rows: they must agree (fewer than 2 scored: -inf)
            observed = rows.observed_scores(choice)
            full_bound = lower_bound(observed, config.calibration_z)
            bound = min(bound, full_bound)
            checks.append({"full_information_rows": int(observed.size),
                           "full_information_mean": round(float(observed.mean()), 5) if observed.size else None,
                           "full_information_lower": round(full_bound, 5) if np.isfinite(full_bound) else None})
        else:  # bandit rows alone: clipped IPS, a choice the log never observed counted as failed
            head_free = lower_bound(rows.head_free_terms(choice), config.calibration_z)
            bound = min(bound, head_free)
            checks.append({"head_free_lower": round(head_free, 5) if np.isfinite(head_free) else None})
        lower.append(bound)
        costs.append(float(costs_usd[index, choice].mean()))
    ok = np.array([supported(e) for e in estimates])
    # an operating point the log cannot vouch for never meets a tau (the table skips it; with none
    # supported every tau maps to the top operating point)
    lower_arr, cost_arr = np.where(ok, np.asarray(lower), -np.inf), np.asarray(costs)
    unlabelled = [m for m, labelled in zip(models, rows.labelled_slots) if not labelled]
    bandit = rows.logged_choice >= 0
    explored_share = float(np.mean(rows.propensity[bandit] < 1)) if bandit.any() else 0.0
    refuse_unless_supported(np.asarray(lower), ok, estimates, policy_taus, config.calibration_margin, rows, unlabelled,
                            explored_share)
    frontier_costs = cost_arr if config.mix_operating_points else None
    calibration, declared = calibrate(policy_taus, lower_arr, config.calibration_margin, config.calibration_step,
                                      frontier_costs)
    bad_point = {float(t): not good for t, good in zip(policy_taus, ok)}
    bad_requested = [bad_point.get(float(t), True) for t in calibration.policy_tau]
    support = Support(unlabelled, tau_intervals(calibration.requested, bad_requested, config.calibration_step),
                      MIN_MATCHED, MAX_UNSUPPORTED_SHARE, explored_share)
    curve = OperatingCurve(np.asarray(points), mus, cost_arr)
    points_out = [{**e.to_dict(), **(checks[i] if checks else {})} for i, e in enumerate(estimates)]
    return OffPolicyCalibration(calibration, declared, curve, lower_arr, points_out, support)


def refuse_unless_supported(lower: np.ndarray, ok: np.ndarray, estimates: list[Estimate], policy_taus: np.ndarray,
                            margin: float, rows: BanditRows, unlabelled: list[str], explored_share: float) -> None:
    """Raise ``UnsupportedLogError`` (after the support warning) when no supported operating point's
    bound, as ``calibrate`` reads it (the least over the point and every higher policy tau), reaches
    the bottom of the tau range + margin.  The message names the best point's bound beside its DR
    estimate: how far the head's optimism would have carried the promise."""
    envelope = lambda bounds: np.minimum.accumulate(bounds[::-1])[::-1]  # noqa: E731
    if envelope(np.where(ok, lower, -np.inf)).max(initial=-np.inf) >= float(policy_taus[0]) + margin:
        return
    Support(unlabelled, [], MIN_MATCHED, MAX_UNSUPPORTED_SHARE, explored_share).warn()
    best = int(np.argmax(envelope(lower)))
    point, n_full = estimates[best], int((rows.logged_choice < 0).sum())
    raise UnsupportedLogError(
        f"the decision log vouches for no operating point: the best lower bound on accuracy is "
        f"{envelope(lower)[best]:.4f} (its DR estimate {point.dr:.4f}; {point.n_matched} of {point.n_rows} labelled rows "
        f"observe its choices)" + ("" if ok.any() else ", and no operating point is supported")
        + f", under the bottom of the tau range {float(policy_taus[0]):.4f} + margin {margin:.4f}, from "
        f"{len(rows.logged_choice) - n_full} labelled decisions and {n_full} shadow rows"
        + (f"; never labelled: {unlabelled}" if unlabelled else "")
        + ("; no exploration" if explored_share == 0 else "")
        + ". No artifact was written: keep serving the current one, and collect more feedback labels, "
        "enable exploration ({rate: 0.02}) or shadow evaluation (shadow: {rate: 0.1, ...}) before training again"
    )
