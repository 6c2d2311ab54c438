"""Replica balancing (``litellm_proteus.replicas``) on candidates a NaN makes incomparable."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from litellm_proteus.replicas import balance, replicas_of

NAN = math.nan


@dataclass(frozen=True)
class Decision:
    index: int
    p: tuple


@pytest.mark.parametrize("p, costs", [
    ((NAN, NAN, 0.9), (1.0, 1.0, 1.0)),  # the chosen p is NaN, so is its twin's
    ((0.9, 0.9, 0.9), (NAN, NAN, 1.0)),  # its live cost is NaN
])
def test_a_chosen_candidate_a_nan_makes_incomparable_is_its_own_only_replica(p, costs):
    slots = [0, 0, 1]
    assert replicas_of(0, slots, costs, p) == [0]
    rng = random.Random(0)
    assert all(balance(Decision(0, p), slots, costs, rng) == Decision(0, p) for _ in range(50))  # never raises


def test_replicas_with_numbers_are_still_balanced():
    slots, costs, p = [0, 0, 1], [1.0, 1.0, 1.0], (0.8, 0.8, 0.8)
    rng = random.Random(0)
    assert {balance(Decision(0, p), slots, costs, rng).index for _ in range(200)} == {0, 1}
