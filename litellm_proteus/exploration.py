"""Safe exploration: on a small share of requests, route to another candidate that is predicted at
least as accurate as the policy's choice, and record the probability of what was chosen.

Distribution (per request, given the candidates' calibrated p and the policy's choice ``c``):

* the eligible set is ``E = {j : p_j >= p_c}`` (always holds ``c``): exploration never lowers the
  predicted accuracy below what the decision for tau accepted, it only spends more;
* with probability ``rate`` the choice is drawn uniformly from ``E``, otherwise it is ``c``;
* so ``P(c) = 1 - rate + rate / |E|`` and ``P(j) = rate / |E|`` for every other ``j`` in ``E``; the
  chosen candidate's probability is its *propensity* (1.0 when ``|E| = 1`` or ``rate = 0``), which the
  decision log records so that training and evaluation can weight the logged outcome by 1 / propensity.

Candidates are models, not deployments (``explore_decision``): several deployments of one slot (replicas
of a model) are one candidate, the policy's own pick for the chosen slot and, for every other slot, its
deployment with the highest p.  So exploration never spends its share switching between copies of the
model the policy chose, and the propensity is the probability of the slot, as training reads it.

The draw is a number in [0, 1) supplied by the caller (a seeded generator offline, ``random`` in the
proxy), so the choice is reproducible in tests.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from .tier_rates import TierRates


class ExplorationSettings(TierRates):
    """``exploration:`` in the strategy config, e.g. ``{rate: 0.02, tiers: {premium: 0.0}}``; off by default."""


@dataclass(frozen=True)
class Explored:
    index: int  # the candidate routed to
    propensity: float  # probability that this candidate was chosen
    explored: bool  # the exploration branch was taken (the index may still be the policy's)


def explore(p: Sequence[float], chosen: int, rate: float, draw_branch: float, draw_pick: float) -> Explored:
    """Apply exploration at ``rate`` to one decision.  ``draw_branch`` / ``draw_pick``: independent uniforms in [0, 1)."""
    if not 0 <= chosen < len(p):
        raise ValueError(f"chosen={chosen} is not an index into {len(p)} candidates")
    eligible = [j for j, pj in enumerate(p) if pj >= p[chosen] or j == chosen]
    if rate <= 0 or len(eligible) == 1:
        return Explored(chosen, 1.0, False)
    share = rate / len(eligible)
    if draw_branch < rate:
        pick = eligible[min(int(draw_pick * len(eligible)), len(eligible) - 1)]
        return Explored(pick, share + (1 - rate if pick == chosen else 0.0), True)
    return Explored(chosen, 1 - rate + share, False)


DecisionT = TypeVar("DecisionT")
_RNG = random.Random()


def slot_representatives(p: Sequence[float], slots: Sequence[int], chosen: int) -> list[int]:
    """One candidate index per slot: ``chosen`` for its own slot, the highest p for every other."""
    best: dict[int, int] = {slots[chosen]: chosen}
    for j, slot in enumerate(slots):
        if slot not in best or (best[slot] != chosen and p[j] > p[best[slot]]):
            best[slot] = j
    return sorted(best.values())


def explore_decision(decision: DecisionT, rate: float, slots: Sequence[int], models: Sequence[str],
                     rng: random.Random = _RNG) -> tuple[DecisionT, float]:
    """``explore`` applied to a predictor ``Decision`` (fields ``index``, ``slot``, ``model``, ``p``)
    over one candidate per slot (``slot_representatives``); ``slots``: each candidate's slot,
    ``models``: the artifact's slot names.  Returns the decision (moved to the explored candidate,
    if any) and its propensity: the probability of its slot."""
    if rate <= 0:
        return decision, 1.0
    d: Any = decision
    reps = slot_representatives(d.p, slots, d.index)
    out = explore([d.p[j] for j in reps], reps.index(d.index), rate, rng.random(), rng.random())
    index = reps[out.index]
    if index != d.index:  # the served model is exploration's: no rule's pick gave way to it
        moved = {"repriced_from": None} if hasattr(d, "repriced_from") else {}
        decision = replace(d, index=index, slot=slots[index], model=models[slots[index]], **moved)
    return decision, out.propensity
