"""Operating-point rules: the ways of routing a request that the calibration frontier mixes between.

A calibrated artifact reaches a requested tau by routing each request at one of a few operating
points (two adjacent points of the validated cost frontier, picked by the prompt's hash).  A point
is one of these rules, applied to the live candidates after p and mu are computed:

- ``policy``: the trained policy at the calibrated policy tau (eq. 2 with its mu) -- what every
  artifact without rules does;
- ``slot``: always the model in slot ``slot`` (its cheapest live deployment);
- ``quality``: the candidate with the highest predicted quality p + b (the mu = 1 limit of eq. 2,
  ties to the cheaper deployment);
- ``cluster``: the request's nearest cluster centroid of the encoder embedding (``centroids``,
  stored in the artifact) names a slot (``cluster_slots``): a task-level ladder.

A rule whose slot has no live candidate (the deployment was removed or is cooling down) falls back to
the policy at the point's ``policy_tau``, stored next to it in the calibration.  A slot or cluster
rule whose pick is priced far above the training price the rule was chosen at (``priced_as_trained``,
``engine.DecisionEngine.priced_as_trained``) takes the cheapest live candidate whose calibrated p is
at least the pick's: never dearer than the pick, never predicted less accurate; ``rule_picks`` also
returns the pick each such replacement gave way to (the proxy's ``x-proteus-repriced-from``).  The
quality rule ignores price, as the policy's top does.  This module is
numpy only: the proxy (``predictor.py``, ``rule_picks``) and offline evaluation
(``train/routing.route_log``, ``rule_picks``) apply rules through the same
code, so they route identically.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

RuleKind = Literal["policy", "slot", "quality", "cluster"]
NO_CHOICE = -1  # rule_picks: the row routes at the policy (policy rule, or no live candidate for the rule)


class OperatingPoint(BaseModel):
    """One routing rule of the calibration frontier (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: RuleKind = "policy"
    slot: int | None = Field(default=None, description="kind 'slot': the slot index every request goes to")
    cluster_slots: list[int] = Field(default_factory=list, description="kind 'cluster': the slot of each centroid")

    @model_validator(mode="after")
    def _check(self) -> "OperatingPoint":
        if (self.kind == "slot") != (self.slot is not None):
            raise ValueError("an operating point has 'slot' exactly when kind is 'slot'")
        if (self.kind == "cluster") != bool(self.cluster_slots):
            raise ValueError("an operating point has 'cluster_slots' exactly when kind is 'cluster'")
        return self

    def label(self, models: Sequence[str] | None = None) -> str:
        if self.kind == "slot":
            return f"slot:{models[self.slot] if models else self.slot}"
        if self.kind == "cluster":
            names = [models[s] if models else str(s) for s in self.cluster_slots]
            return "cluster:" + ",".join(names)
        return self.kind


POLICY = OperatingPoint()


def nearest_centroid(embeddings: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of each row's nearest centroid by squared Euclidean distance."""
    emb = np.asarray(embeddings, dtype=np.float64)
    cen = np.asarray(centroids, dtype=np.float64)
    distance = (emb**2).sum(1, keepdims=True) - 2.0 * emb @ cen.T + (cen**2).sum(1)[None, :]
    return distance.argmin(axis=1)


def _cheapest(mask: np.ndarray, costs: np.ndarray) -> np.ndarray:
    """Per row: the cheapest candidate where ``mask`` is True (the first on a tie; any index where none is).
    A cost may be infinite (a huge finite price times the tokens): argmin over a row whose masked
    costs are all inf returns index 0, masked or not, so such a row takes its first masked candidate."""
    pick = np.where(mask, costs, np.inf).argmin(axis=1)
    stray = ~mask[np.arange(len(pick)), pick] & mask.any(axis=1)
    pick[stray] = mask[stray].argmax(axis=1)
    return pick


def _cheapest_of_slot(target: np.ndarray, slots: np.ndarray, costs: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per row: the cheapest valid candidate playing slot ``target[row]``, or NO_CHOICE."""
    match = valid & (slots == target[:, None])
    return np.where(match.any(axis=1), _cheapest(match, costs), NO_CHOICE)


def _no_dearer_no_worse(picked: np.ndarray, p_shown: np.ndarray, costs: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per row: the cheapest valid candidate whose calibrated p is at least that of ``picked`` (itself
    included), so the replacement never costs more at live prices nor is predicted less accurate."""
    at = np.arange(len(picked))
    ok = valid & (p_shown >= p_shown[at, picked][:, None] - 1e-12)
    ok[at, picked] = True
    return _cheapest(ok, costs)


class RulePicks(NamedTuple):
    choice: np.ndarray  # per request: the candidate index its rule picks, or NO_CHOICE (route at the policy)
    # per request: the candidate the rule picked where, priced past its training price, it gave way to
    # ``choice`` (another candidate); NO_CHOICE where the rule's pick stands
    repriced_from: np.ndarray


def rule_picks(
    rules: Sequence[OperatingPoint],
    p: np.ndarray,
    boost: np.ndarray,
    slots: np.ndarray,
    costs: np.ndarray,
    valid: np.ndarray,
    embeddings: np.ndarray | None = None,
    centroids: np.ndarray | None = None,
    priced_as_trained: np.ndarray | None = None,
    p_shown: np.ndarray | None = None,
) -> RulePicks:
    """Per request, the candidate index its rule picks, or NO_CHOICE (route at the policy), and the
    pick a repriced one gave way to (``RulePicks``).

    All [B, W] arrays cover each request's candidates (padded; ``valid`` marks the real ones):
    predicted correctness ``p``, boost ``b`` of each candidate's slot, ``slots`` and live ``costs``.
    ``embeddings`` [B, D] and ``centroids`` [C, D] are needed only by cluster rules.  With
    ``priced_as_trained`` and ``p_shown`` (the calibrated p the decision reports), a slot or
    cluster rule whose pick is not priced as trained picks the cheapest candidate predicted at
    least as accurate instead (``_no_dearer_no_worse``)."""
    n = len(rules)
    choice = np.full(n, NO_CHOICE, dtype=np.int64)
    repriced_from = np.full(n, NO_CHOICE, dtype=np.int64)
    if n == 0 or all(r.kind == "policy" for r in rules):
        return RulePicks(choice, repriced_from)
    kinds = np.array([r.kind for r in rules])
    target = np.full(n, -1, dtype=np.int64)
    target[kinds == "slot"] = [r.slot for r in rules if r.kind == "slot"]
    cluster_rows = np.flatnonzero(kinds == "cluster")
    if cluster_rows.size:
        if embeddings is None or centroids is None or len(centroids) == 0:
            raise ValueError("cluster operating points need the request embeddings and the artifact's centroids")
        nearest = nearest_centroid(np.asarray(embeddings)[cluster_rows], centroids)
        target[cluster_rows] = [rules[row].cluster_slots[c] for row, c in zip(cluster_rows, nearest)]
    by_slot = kinds != "quality"
    by_slot &= kinds != "policy"
    if by_slot.any():
        choice[by_slot] = _cheapest_of_slot(target[by_slot], slots[by_slot], costs[by_slot], valid[by_slot])
        if priced_as_trained is not None and p_shown is not None:
            rows = np.flatnonzero(by_slot)
            picked = choice[rows]
            repriced = (picked != NO_CHOICE) & ~priced_as_trained[rows, np.maximum(picked, 0)]
            if repriced.any():
                rows, picked = rows[repriced], picked[repriced]
                choice[rows] = _no_dearer_no_worse(picked, p_shown[rows], costs[rows], valid[rows])
                moved = choice[rows] != picked  # the pick itself may still be the cheapest no worse one
                repriced_from[rows[moved]] = picked[moved]
    quality = np.flatnonzero(kinds == "quality")
    if quality.size:
        value = np.where(valid[quality], p[quality] + boost[quality], -np.inf)
        best = value.max(axis=1, keepdims=True)
        ties = valid[quality] & (value >= best - 1e-12)
        choice[quality] = _cheapest(ties, costs[quality])
    return RulePicks(choice, repriced_from)
