"""Safe exploration: eligible set, propensities, rate 0 = off."""

from __future__ import annotations

import numpy as np
import pytest

from litellm_proteus.exploration import ExplorationSettings, explore

P = [0.9, 0.6, 0.75, 0.6, 0.5]


def test_off_by_default_and_without_alternatives():
    assert explore(P, 1, ExplorationSettings().rate_for("premium"), 0.0, 0.0).propensity == 1.0
    only = explore(P, 0, 0.5, 0.0, 0.9)  # nothing is at least as accurate as 0.9
    assert (only.index, only.propensity, only.explored) == (0, 1.0, False)


def test_never_routes_below_the_policy_choices_p_and_propensities_sum_to_one():
    seen: dict[int, float] = {}
    for branch in (0.1, 0.5):  # explore / exploit
        for pick in np.linspace(0, 0.999, 40):
            out = explore(P, 1, 0.2, branch, float(pick))
            assert P[out.index] >= P[1]
            seen[out.index] = out.propensity
    assert sorted(seen) == [0, 1, 2, 3]  # p >= 0.6; slot 4 (0.5) never
    assert seen[1] == pytest.approx(0.8 + 0.2 / 4) and seen[0] == pytest.approx(0.05)
    assert sum(seen.values()) == pytest.approx(1.0)


def test_empirical_frequencies_match_the_recorded_propensities():
    rng = np.random.default_rng(0)
    picks = [explore(P, 2, 0.3, rng.random(), rng.random()) for _ in range(20_000)]
    counts = np.bincount([e.index for e in picks], minlength=len(P)) / len(picks)
    for e in picks[:50]:
        assert counts[e.index] == pytest.approx(e.propensity, abs=0.015)


def test_per_tier_rates_override_the_default():
    settings = ExplorationSettings(rate=0.02, tiers={"premium": 0.0})
    assert (settings.rate_for("premium"), settings.rate_for("economy"), settings.rate_for(None)) == (0.0, 0.02, 0.02)


@pytest.mark.parametrize("raw", [{"rate": -0.1}, {"rate": 1.5}, {"tiers": {"premium": 2.0}}, {"ratio": 0.1}])
def test_bad_settings_are_refused(raw):
    with pytest.raises(ValueError, match="rate|ratio"):
        ExplorationSettings(**raw)


def test_strategy_config_names_unknown_exploration_tiers():
    from litellm_proteus.config import ProteusConfig, ProteusConfigError

    config = ProteusConfig.parse({"tiers": {"premium": 0.9, "economy": 0.7}, "default_tier": "economy",
                                  "exploration": {"rate": 0.02, "tiers": {"premium": 0.0}}})
    assert config.exploration.rate_for("economy") == 0.02 and ProteusConfig.parse({}).exploration.rate == 0.0
    with pytest.raises(ProteusConfigError, match=r"exploration.tiers names unknown tiers \['gold'\]; allowed: \['economy', 'premium'\]"):
        ProteusConfig.parse({"tiers": {"premium": 0.9, "economy": 0.7}, "default_tier": "economy",
                             "exploration": {"tiers": {"gold": 0.1}}})


def test_an_explored_request_names_no_repriced_pick():
    import random

    from litellm_proteus.exploration import explore_decision
    from litellm_proteus.predictor import Decision

    picked = Decision(index=1, slot=1, model="cheap", mu=0.5, tau_requested=0.8, tau_effective=0.8, clamped=False,
                      p=(0.9, 0.8), scores=(0.0, 0.0), repriced_from="dear")
    moved = kept = 0
    for seed in range(200):
        decision, _ = explore_decision(picked, 1.0, [0, 1], ["dear", "cheap"], random.Random(seed))
        if decision.index == 0:  # exploration served "dear": no rule's pick gave way to it
            moved += 1
            assert (decision.model, decision.repriced_from) == ("dear", None)
        else:
            kept += 1
            assert decision.repriced_from == "dear"
    assert moved and kept


def test_replicas_of_one_model_are_one_candidate_and_the_propensity_is_the_slots():
    import random

    from litellm_proteus.exploration import explore_decision, slot_representatives
    from litellm_proteus.predictor import Decision

    # candidates 0 and 1 are two deployments of slot 0 (the policy chose 0); 2 is slot 1, more accurate
    picked = Decision(index=0, slot=0, model="gpt-4", mu=0.5, tau_requested=0.8, tau_effective=0.8, clamped=False,
                      p=(0.9, 0.9, 0.95), scores=(0.0, 0.0, 0.0))
    assert slot_representatives(picked.p, [0, 0, 1], 0) == [0, 2]
    assert slot_representatives((0.9, 0.92, 0.95, 0.97), [0, 1, 1, 0], 0) == [0, 2]  # the best of another slot
    seen = {}
    for seed in range(400):
        decision, propensity = explore_decision(picked, 0.3, [0, 0, 1], ["gpt-4", "gpt-4-turbo"], random.Random(seed))
        seen.setdefault(decision.index, set()).add(round(propensity, 9))
    # exploration moves between models (E = {slot 0, slot 1}), never to the replica of the chosen one
    assert seen == {0: {0.85}, 2: {0.15}}
