"""Calibration of an artifact trained on a decision log: the operating curve estimated off-policy.

With bandit feedback the accuracy of a policy tau cannot be read off the rows (only the logged
slot's label is known), so each point of the curve is the doubly robust estimate of
``off_policy`` over the validation rows and the out-of-fold training rows, and the tau table is
built on its one-sided lower confidence bound (z = ``calibration_z``): a point counts as meeting a
tau only when the estimate's noise cannot explain it.  The cost of a choice is known exactly (every
candidate's cost is logged), so the cost curve needs no estimate.

With full-information rows among them (shadow rows), each point's lower bound is the smaller of the
DR bound and the bound of the full-information rows' own scores of the point's choices: those rows
measure the policy without the head, so a head that flatters the choices the log never observed
cannot carry a point past what the shadow rows saw.  (Measured on RouterBench-partial, 1 % shadow
rows: with the DR bound alone every tau routed to a point whose test accuracy was 0.748,
docs/learn-from-traffic.md.)
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
    is ~0 and the DR term is the head's prediction alone: measured on a simulated RouterBench-partial
    log, such points read up to 0.94 off-policy and at most 0.856 on the test split
    (docs/learn-from-traffic.md)."""
    return (estimate.n_matched >= MIN_MATCHED and estimate.n_matched >= MIN_MATCHED_SHARE * estimate.n_rows
            and estimate.unsupported_share <= MAX_UNSUPPORTED_SHARE)


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
        lower.append(bound)
        costs.append(float(costs_usd[index, choice].mean()))
    ok = np.array([supported(e) for e in estimates])
    # an operating point the log cannot vouch for never meets a tau (the table skips it; with none
    # supported every tau maps to the top operating point)
    lower_arr, cost_arr = np.where(ok, np.asarray(lower), -np.inf), np.asarray(costs)
    frontier_costs = cost_arr if config.mix_operating_points else None
    calibration, declared = calibrate(policy_taus, lower_arr, config.calibration_margin, config.calibration_step,
                                      frontier_costs)
    bad_point = {float(t): not good for t, good in zip(policy_taus, ok)}
    bad_requested = [bad_point.get(float(t), True) for t in calibration.policy_tau]
    support = Support(
        unlabelled_models=[m for m, ok in zip(models, rows.labelled_slots) if not ok],
        unsupported_tau=tau_intervals(calibration.requested, bad_requested, config.calibration_step),
        min_matched=MIN_MATCHED,
        max_unsupported_share=MAX_UNSUPPORTED_SHARE,
        explored_share=float(np.mean(rows.propensity[rows.logged_choice >= 0] < 1)) if (rows.logged_choice >= 0).any() else 0.0,
    )
    curve = OperatingCurve(np.asarray(points), mus, cost_arr)
    points_out = [{**e.to_dict(), **(checks[i] if checks else {})} for i, e in enumerate(estimates)]
    return OffPolicyCalibration(calibration, declared, curve, lower_arr, points_out, support)
