"""Replicas: deployments of one model that a decision cannot tell apart, load-balanced.

Eq. 2 and the operating points' rules score candidates by slot, live price and calibrated p, so
several deployments of one model at one price (two regions, two keys) score the same and an argmax
would send every request to the first of them.  LiteLLM's own strategies spread a group's requests
over its deployments; PROTEUS chooses the model and the price, then spreads its choice uniformly
over that model's replicas: the chosen candidate's slot, a live price equal to its within
``REL_TOL``, and the same p (a deployment the correction rates lower is not a replica).  Which
replica serves changes neither the decision's slot nor its propensity (``exploration``: a slot's)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

REL_TOL = 1e-9

DecisionT = TypeVar("DecisionT")
_RNG = random.Random()


def replicas_of(chosen: int, slots: Sequence[int], costs: Sequence[float], p: Sequence[float]) -> list[int]:
    """The candidates the ``chosen`` one cannot be told apart from, itself included, in order (itself
    alone when its p or cost is NaN, which is close to nothing, not even itself)."""
    return [j for j in range(len(slots)) if j == chosen or (
            slots[j] == slots[chosen]
            and math.isclose(costs[j], costs[chosen], rel_tol=REL_TOL, abs_tol=0.0)
            and math.isclose(p[j], p[chosen], rel_tol=0.0, abs_tol=1e-12))]


def balance(decision: DecisionT, slots: Sequence[int], costs: Sequence[float], rng: random.Random = _RNG) -> DecisionT:
    """The ``decision`` (fields ``index``, ``p``) moved to a uniformly drawn replica of its candidate."""
    d: Any = decision
    twins = replicas_of(d.index, slots, costs, d.p)
    if len(twins) == 1:
        return decision
    return replace(d, index=twins[min(int(rng.random() * len(twins)), len(twins) - 1)])
