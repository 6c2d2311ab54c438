"""Vectorised PROTEUS routing over a whole routing log (training validation, eval, calibration).

The proxy routes request by request through ``litellm_proteus.predictor``; offline we route
thousands of logged queries at many taus, with each row's *logged* per-call costs as c_i.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from litellm_proteus.artifact import Manifest
from litellm_proteus.model import INFERENCE_LAMBDA, ProteusModel
from litellm_proteus.operating_points import NO_CHOICE, POLICY, OperatingPoint, rule_picks
from litellm_proteus.predictor import TauMapper


@dataclass
class RouteResult:
    choice: np.ndarray  # [N] slot index
    mu: np.ndarray  # [N]
    p: np.ndarray  # [N, K] predicted correctness


def fill_missing_costs(costs_usd: np.ndarray) -> np.ndarray:
    """NaN cost cells -> that model's mean logged cost (a model is never free by omission)."""
    costs = np.array(costs_usd, dtype=np.float64)
    with warnings.catch_warnings():  # a model no row logged a cost for (never served): filled below, not news
        warnings.simplefilter("ignore", RuntimeWarning)
        col_mean = np.nanmean(np.where(np.isfinite(costs), costs, np.nan), axis=0)
        col_mean = np.where(np.isfinite(col_mean), col_mean, np.nanmean(col_mean))
    rows, cols = np.where(~np.isfinite(costs))
    costs[rows, cols] = col_mean[cols]
    return costs


@torch.inference_mode()
def route_log(
    model: ProteusModel,
    manifest: Manifest,
    embeddings: np.ndarray,
    costs_usd: np.ndarray,
    tau: float | np.ndarray,
    *,
    calibrated: bool = True,
    draws: np.ndarray | None = None,
    candidates: np.ndarray | None = None,
    batch_size: int = 4096,
) -> RouteResult:
    """Route every row at ``tau`` (scalar or per-row) exactly as the runtime would (lambda = 1).

    ``draws``: each row's ``mixing_draw`` of its prompt, as the proxy computes it; without them every
    row routes at the single calibrated policy tau that meets its tau alone.  ``candidates``: [N, K]
    booleans, the slots each row may route to (default: every slot, as in a full-information log);
    the policy and every operating-point rule choose among them only, as the proxy does among live
    deployments."""
    n = len(embeddings)
    taus = np.broadcast_to(np.asarray(tau, dtype=np.float64), (n,))
    if draws is not None and len(draws) != n:
        raise ValueError(f"draws has {len(draws)} rows for {n} embeddings")
    mapper = TauMapper(manifest)
    if calibrated:
        points = [mapper.operating_point(mapper.effective(t)[0], None if draws is None else draws[i]) for i, t in enumerate(taus)]
    else:
        points = [(float(t), POLICY) for t in taus]
    return route_at_points(model, manifest, embeddings, costs_usd, points, candidates=candidates, batch_size=batch_size)


@torch.inference_mode()
def route_at_points(
    model: ProteusModel,
    manifest: Manifest,
    embeddings: np.ndarray,
    costs_usd: np.ndarray,
    points: list[tuple[float, OperatingPoint]],
    *,
    candidates: np.ndarray | None = None,
    batch_size: int = 4096,
) -> RouteResult:
    """Route row i at operating point ``points[i]`` = (policy tau, rule), as the runtime does once it
    has mapped the request's tau to that point (``route_log``)."""
    model.eval()
    mapper = TauMapper(manifest)
    n = len(embeddings)
    if len(points) != n:
        raise ValueError(f"points has {len(points)} entries for {n} embeddings")
    tau_norm = np.array([manifest.tau_norm(t) for t, _ in points], dtype=np.float32)
    rules = [rule for _, rule in points]
    filled = fill_missing_costs(costs_usd)
    allowed = np.ones(filled.shape, dtype=bool) if candidates is None else np.asarray(candidates, dtype=bool)
    cost_norm = manifest.cost_normalizer.normalize(filled)
    boost = model.boost.detach().cpu().numpy()
    device = next(model.parameters()).device
    choices, mus, ps = [], [], []
    for start in range(0, n, batch_size):
        sl = slice(start, start + batch_size)
        out = model.route(
            torch.as_tensor(embeddings[sl], dtype=torch.float32, device=device),
            torch.as_tensor(tau_norm[sl], device=device),
            torch.as_tensor(cost_norm[sl], device=device),
            mask=torch.as_tensor(allowed[sl], device=device),
            lam=INFERENCE_LAMBDA,
        )
        # The operating point's rule picks among the allowed slots as the proxy's does among live ones.
        p, width = out.p.cpu().numpy(), filled.shape[1]
        slots = np.broadcast_to(np.arange(width), p.shape)
        picked = rule_picks(
            rules[sl], p, np.broadcast_to(boost, p.shape), slots, filled[sl], allowed[sl], embeddings[sl], mapper.centroids,
        ).choice
        choices.append(np.where(picked != NO_CHOICE, picked, out.choice.cpu().numpy()))
        mus.append(out.mu.cpu().numpy())
        ps.append(p)
    return RouteResult(choice=np.concatenate(choices), mu=np.concatenate(mus), p=np.concatenate(ps))
