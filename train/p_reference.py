"""The predicted quality that static calibration validated, stored for the compliance controller.

Per entry of the tau table and per point of the cost frontier: the mean calibrated p of the
deployments chosen when the validation split is routed at it (``TauCalibration.requested_p_ref``
and ``frontier_p_ref``).  Without labels the controller steers the live mean calibrated p to
min(tau + margin, reference), so it moves only once live traffic is predicted worse than what the
tau table was validated on -- not because the table met tau with a mean p below tau + margin.
``proteus train`` and ``proteus calibrate-p`` store it; an artifact without it keeps the margin.
"""

from __future__ import annotations

import numpy as np

from litellm_proteus.artifact import Manifest, TauCalibration
from litellm_proteus.model import ProteusModel
from litellm_proteus.operating_points import POLICY, OperatingPoint

from .routing import route_at_points


def mean_chosen_p(model: ProteusModel, manifest: Manifest, embeddings: np.ndarray, costs_usd: np.ndarray,
                  points: list[tuple[float, OperatingPoint]]) -> list[float]:
    """For each (policy tau, rule): the mean calibrated p of the chosen slot over every row."""
    n = len(embeddings)
    cache: dict[tuple[float, str], float] = {}
    out = []
    for tau, rule in points:
        key = (float(tau), rule.model_dump_json())
        if key not in cache:
            routed = route_at_points(model, manifest, embeddings, costs_usd, [(tau, rule)] * n)
            calibrated = manifest.calibrated_p(routed.p)
            cache[key] = round(float(calibrated[np.arange(n), routed.choice].mean()), 6)
        out.append(cache[key])
    return out


def with_reference_p(model: ProteusModel, manifest: Manifest, embeddings: np.ndarray, costs_usd: np.ndarray) -> TauCalibration:
    """``manifest.calibration`` with ``requested_p_ref`` and ``frontier_p_ref`` measured on the rows
    given (the validation split)."""
    cal = manifest.calibration
    if len(embeddings) == 0:
        return cal
    requested_rules = cal.requested_point or [POLICY] * len(cal.requested)
    frontier_rules = cal.frontier_point or [POLICY] * len(cal.frontier_policy_tau)
    return cal.model_copy(update={
        "requested_p_ref": mean_chosen_p(model, manifest, embeddings, costs_usd, list(zip(cal.policy_tau, requested_rules))),
        "frontier_p_ref": mean_chosen_p(model, manifest, embeddings, costs_usd,
                                        list(zip(cal.frontier_policy_tau, frontier_rules))),
    })
