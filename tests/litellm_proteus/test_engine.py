"""The decision engine without a proxy: tau precedence and caps, slots, prices, retries, costs."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from litellm_proteus.config import ProteusConfig
from litellm_proteus.costs import DeploymentMappingError, deployment_prices
from litellm_proteus.engine import DecisionEngine, DecisionRequest, deployment_slot, exclude_failed, resolve_tau
from litellm_proteus.request import (
    TauError,
    TierChoice,
    failed_deployment_ids,
    parse_tau,
    request_tau,
    tier_from_metadata,
)
from litellm_proteus.predictor import Decision

SLOTS = ["gpt-4-1106-preview", "mistralai/mixtral-8x7b-chat", "mistralai/mistral-7b-chat"]
CONFIG = ProteusConfig.parse(
    {"tiers": {"premium": 0.9, "standard": 0.85, "economy": 0.75}, "allow_raise": {"premium": True}}
)


def deployment(dep_id: str, model: str, *, slot: str | None = None, prices=(1e-6, 2e-6), group="proteus-auto"):
    params = {"model": model}
    if prices is not None:
        params.update(input_cost_per_token=prices[0], output_cost_per_token=prices[1])
    info = {"id": dep_id}
    if slot is not None:
        info["proteus_model"] = slot
    return {"model_name": group, "litellm_params": params, "model_info": info}


def manifest_double(avg_output_tokens=None, avg_input_tokens=None, training_costs=None):
    """The manifest fields the engine reads: slots, average tokens, training prices per slot."""
    from litellm_proteus.artifact import TauCalibration

    return SimpleNamespace(models=SLOTS, avg_output_tokens=avg_output_tokens or {}, calibration=TauCalibration(),
                           avg_input_tokens=avg_input_tokens or {}, avg_cost_usd=dict(training_costs or {}))


# -- tau ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [(0.9, 0.9), (1, 1.0), ("0.8", 0.8), (1e-3, 1e-3)])
def test_parse_tau_accepts_numbers_in_range(value, expected):
    assert parse_tau(value) == expected


@pytest.mark.parametrize("value", ["abc", "nan", math.nan, math.inf, 0, 0.0, -0.1, 1.0001, True, None, [0.9], {}])
def test_parse_tau_rejects_with_the_field_and_range(value):
    with pytest.raises(TauError) as info:
        parse_tau(value)
    assert "tau" in str(info.value) and "(0, 1]" in str(info.value)


def test_parse_tau_rejects_an_integer_too_large_for_a_float_with_a_short_message():
    with pytest.raises(TauError) as info:
        parse_tau(10**400)
    assert "(0, 1]" in str(info.value) and len(str(info.value)) < 200


def test_request_tau_reads_metadata_then_litellm_metadata():
    assert request_tau({"tau": 0.8}, {"tau": 0.7}) == 0.8
    assert request_tau({"other": 1}, {"tau": 0.7}) == 0.7
    assert request_tau(None, {}) is None
    with pytest.raises(TauError):
        request_tau({"tau": "high"})


def test_tier_precedence_key_then_team_and_unknown_tiers_are_ignored(caplog):
    assert tier_from_metadata({"proteus_tier": "premium"}, {"proteus_tier": "economy"}, CONFIG) == TierChoice(
        "premium", "key_metadata"
    )
    assert tier_from_metadata({}, {"proteus_tier": "economy"}, CONFIG) == TierChoice("economy", "team_metadata")
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.engine"):
        assert tier_from_metadata({"proteus_tier": "gold-engine-test"}, None, CONFIG) is None
    assert "not a configured tier" in caplog.text and "gold-engine-test" in caplog.text


@pytest.mark.parametrize("tier", [["premium"], {"name": "premium"}, 3, True])
def test_a_tier_that_is_not_a_name_is_ignored_not_an_error(tier):
    assert tier_from_metadata({"proteus_tier": tier}, {"proteus_tier": "economy"}, CONFIG) == TierChoice(
        "economy", "team_metadata"
    )


def test_unknown_tier_warnings_are_rate_limited(caplog):
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.engine"):
        for _ in range(5):
            assert tier_from_metadata(None, {"proteus_tier": "platinum-rate-test"}, CONFIG) is None
    assert caplog.text.count("platinum-rate-test") == 1


@pytest.mark.parametrize(
    "requested, tier, expected",
    [
        # (tau, source, tier, capped)
        (None, None, (0.85, "default", "standard", False)),
        (None, TierChoice("economy", "redis"), (0.75, "redis", "economy", False)),
        (None, TierChoice("premium", "key_metadata"), (0.9, "key_metadata", "premium", False)),
        (0.7, TierChoice("economy", "team_metadata"), (0.7, "request", "economy", False)),  # lowering: allowed
        (0.95, TierChoice("economy", "redis"), (0.75, "redis", "economy", True)),  # raising: capped
        (0.95, None, (0.85, "default", "standard", True)),
        (0.95, TierChoice("premium", "key_metadata"), (0.95, "request", "premium", False)),  # allow_raise
    ],
)
def test_resolve_tau_precedence_and_caps(requested, tier, expected):
    got = resolve_tau(CONFIG, requested, tier)
    assert (got.tau, got.source, got.tier, got.capped) == expected
    assert got.requested == requested


# -- slots and prices --------------------------------------------------------------------------
def test_slot_from_model_info_model_name_or_provider_prefix():
    assert deployment_slot(deployment("a", "openai/whatever", slot="mistralai/mistral-7b-chat"), SLOTS) == 2
    assert deployment_slot(deployment("b", "gpt-4-1106-preview"), SLOTS) == 0
    assert deployment_slot(deployment("c", "openai/gpt-4-1106-preview"), SLOTS) == 0
    assert deployment_slot(deployment("d", "together_ai/mistralai/mixtral-8x7b-chat"), SLOTS) == 1


def test_unmapped_and_unknown_slots_name_the_deployment_and_the_slots():
    with pytest.raises(DeploymentMappingError) as info:
        deployment_slot(deployment("x1", "openai/gpt-4o"), SLOTS)
    assert "openai/gpt-4o" in str(info.value) and "model_info.proteus_model" in str(info.value)
    with pytest.raises(DeploymentMappingError) as info:
        deployment_slot(deployment("x2", "openai/gpt-4o", slot="gpt-5"), SLOTS)
    assert "'gpt-5' is not a slot" in str(info.value) and "gpt-4-1106-preview" in str(info.value)


def test_prices_deployment_first_then_model_info_then_cost_map():
    cost_map = {"known-model": {"input_cost_per_token": 3e-6, "output_cost_per_token": 4e-6}}
    assert deployment_prices(deployment("a", "x", prices=(1e-6, 2e-6)), cost_map).source == "litellm_params"
    info_priced = deployment("b", "x", prices=None)
    info_priced["model_info"].update(input_cost_per_token=5e-6, output_cost_per_token=6e-6)
    assert deployment_prices(info_priced, cost_map).input_per_token == 5e-6
    by_map = deployment_prices(deployment("c", "openai/known-model", prices=None), cost_map)
    assert (by_map.input_per_token, by_map.output_per_token, by_map.source) == (3e-6, 4e-6, "cost_map:known-model")
    assert deployment_prices(deployment("d", "unknown", prices=None), cost_map) is None


def test_prices_merge_field_by_field_with_the_cost_map():
    cost_map = {"known-model": {"input_cost_per_token": 3e-6, "output_cost_per_token": 4e-6}}
    only_output = deployment("a", "openai/known-model", prices=None)
    only_output["litellm_params"]["output_cost_per_token"] = 5e-5
    prices = deployment_prices(only_output, cost_map)
    assert (prices.input_per_token, prices.output_per_token) == (3e-6, 5e-5)
    assert prices.source == "cost_map:known-model+litellm_params"
    split = deployment("b", "x", prices=None)
    split["litellm_params"]["input_cost_per_token"] = 1e-6
    split["model_info"]["output_cost_per_token"] = 7e-6
    prices = deployment_prices(split, cost_map)
    assert (prices.input_per_token, prices.output_per_token, prices.source) == (1e-6, 7e-6, "litellm_params+model_info")
    # an output price alone, for a model the cost map does not know: still no price
    unknown = deployment("c", "unknown", prices=None)
    unknown["litellm_params"]["output_cost_per_token"] = 1e-6
    assert deployment_prices(unknown, cost_map) is None


@pytest.mark.parametrize("value", [-1e-6, "nan", "cheap", float("inf"), True])
def test_an_invalid_price_override_is_an_error_naming_it(value):
    bad = deployment("a", "openai/known-model", prices=(1e-6, 2e-6))
    bad["litellm_params"]["output_cost_per_token"] = value
    with pytest.raises(DeploymentMappingError) as info:
        deployment_prices(bad, {"known-model": {"input_cost_per_token": 3e-6}})
    assert "litellm_params.output_cost_per_token" in str(info.value) and ">= 0" in str(info.value)
    assert "deployment 'a' (group 'proteus-auto', model 'openai/known-model')" in str(info.value)  # which of the group's
    engine = DecisionEngine(manifest_double(), CONFIG, cost_map={})
    bad["model_info"]["proteus_model"] = SLOTS[0]
    with pytest.raises(DeploymentMappingError, match="output_cost_per_token"):
        engine.check_model_list([bad])


def test_prices_from_litellms_own_cost_map():
    prices = deployment_prices(deployment("a", "openai/gpt-3.5-turbo-1106", prices=None))
    assert prices is not None and prices.input_per_token == pytest.approx(1e-6)


def test_check_model_list_lists_every_problem():
    engine = DecisionEngine(manifest_double(), CONFIG, cost_map={})
    model_list = [
        deployment("ok", "gpt-4-1106-preview"),
        deployment("unmapped", "openai/gpt-4o"),
        deployment("unpriced", "openai/mistralai/mistral-7b-chat", prices=None),
        deployment("elsewhere", "openai/gpt-4o", group="plain"),  # not a PROTEUS group: not checked
    ]
    with pytest.raises(DeploymentMappingError) as info:
        engine.check_model_list(model_list)
    message = str(info.value)
    assert "'openai/gpt-4o', id unmapped" in message and "id unpriced" in message and "has no price" in message
    assert "elsewhere" not in message
    engine.check_model_list(model_list[:1])
    with pytest.raises(DeploymentMappingError, match="group 'proteus-auto' has no deployments"):
        engine.check_model_list([])


# -- retries -------------------------------------------------------------------------------------
def test_failed_deployments_are_left_out_of_a_retry():
    pool = [deployment(i, "gpt-4-1106-preview") for i in ("a", "b", "c")]
    metadata = {"previous_models": [{"deployment_id": "a"}, {"model_info": {"id": "b"}}]}  # new and old formats
    assert failed_deployment_ids(metadata) == ["a", "b"]
    assert [d["model_info"]["id"] for d in exclude_failed(pool, ["a", "b"])] == ["c"]
    # all failed: only the one that failed last is excluded
    assert [d["model_info"]["id"] for d in exclude_failed(pool, ["c", "a", "b"])] == ["a", "c"]
    assert exclude_failed(pool, []) == pool


def test_a_retry_with_no_other_candidate_tries_the_deployment_that_failed():
    """As LiteLLM's own strategies do: an empty pool would be a 429 about cooldowns that do not exist."""
    only = [deployment("a", "gpt-4-1106-preview")]
    assert exclude_failed(only, ["a"]) == only
    assert exclude_failed(only, ["a", "a"]) == only
    pair = [deployment(i, "gpt-4-1106-preview") for i in ("a", "b")]  # both failed: the one that failed first
    assert [d["model_info"]["id"] for d in exclude_failed(pair, ["a", "b"])] == ["a"]


@pytest.mark.parametrize("records", [5, True, 1.5, "abc", {"deployment_id": "a"}, [{"model_info": "abc"}],
                                     [{"deployment_id": 7}], ["a"], [None]])
def test_malformed_retry_breadcrumbs_are_skipped(records):
    assert failed_deployment_ids({"previous_models": records}) == []


# -- the decision --------------------------------------------------------------------------------
class RecordingPredictor:
    def __init__(self):
        self.calls = []

    def decide(self, texts, taus, candidates, deltas=None):
        self.calls.append((list(texts), list(taus), candidates, deltas))
        return [
            Decision(0, c[0].slot, SLOTS[c[0].slot], 0.5, t, t, False, (0.5,) * len(c), (0.0,) * len(c))
            for t, c in zip(taus, candidates)
        ]


def test_decide_estimates_costs_from_prompt_tokens_and_average_outputs():
    manifest = manifest_double({SLOTS[0]: 100.0, SLOTS[1]: 300.0})
    predictor = RecordingPredictor()
    engine = DecisionEngine(manifest, CONFIG, predictor, token_counter=lambda messages, text: 50)
    cands = [engine.score(deployment("a", "gpt-4-1106-preview", prices=(1e-5, 3e-5))),
             engine.score(deployment("b", "x", slot=SLOTS[1], prices=(1e-6, 2e-6)))]
    routed = engine.decide([DecisionRequest("q", None, 0.8, cands, delta=0.03)])
    (_, taus, candidates, deltas), = predictor.calls
    assert taus == [0.8] and deltas == [0.03]  # the controller's offset reaches the predictor
    assert [c.cost_usd for c in candidates[0]] == pytest.approx([50 * 1e-5 + 100 * 3e-5, 50 * 1e-6 + 300 * 2e-6])
    assert routed[0].prompt_tokens == 50 and routed[0].cost_usd == pytest.approx(50 * 1e-5 + 100 * 3e-5)


def test_prompt_tokens_default_to_trainings_estimate_and_litellm_counts_on_request():
    import litellm

    manifest = manifest_double()
    messages = [{"role": "user", "content": "Summarise the French Revolution in one sentence, please."}]
    request = [DecisionRequest("Summarise the French Revolution in one sentence, please.", messages, 0.8,
                               [DecisionEngine(manifest, CONFIG).score(deployment("a", "gpt-4-1106-preview"))])]
    by_chars = DecisionEngine(manifest, CONFIG, RecordingPredictor()).decide(request)[0]
    assert by_chars.prompt_tokens == math.ceil(len(request[0].text) / 4) == 14  # as training estimated logged prompts
    config = ProteusConfig.parse({"prompt_tokens": "litellm"})
    by_litellm = DecisionEngine(manifest, config, RecordingPredictor()).decide(request)[0]
    assert by_litellm.prompt_tokens == litellm.token_counter(messages=messages) != by_chars.prompt_tokens


def test_prompt_tokens_names_the_allowed_counters():
    from litellm_proteus.config import ProteusConfigError

    with pytest.raises(ProteusConfigError) as info:
        ProteusConfig.parse({"prompt_tokens": "tiktoken"})
    assert "prompt_tokens" in str(info.value) and "'chars'" in str(info.value) and "'litellm'" in str(info.value)


@pytest.fixture(scope="module")
def steerable_engine(steerable_artifact):
    from litellm_proteus.predictor import ProteusPredictor

    predictor = ProteusPredictor(steerable_artifact, device="cpu")
    return DecisionEngine(predictor.manifest, CONFIG, predictor)


def candidates_for(engine, prices):
    return [
        engine.score(deployment(slot, "openai/x", slot=slot, prices=prices[slot]))
        for slot in ("gpt-4-1106-preview", "mistralai/mixtral-8x7b-chat", "mistralai/mistral-7b-chat")
    ]


QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def test_real_predictor_tau_is_clamped_to_the_trained_range(steerable_engine):
    prices = {"gpt-4-1106-preview": (1e-5, 3e-5), "mistralai/mixtral-8x7b-chat": (6e-7, 6e-7),
              "mistralai/mistral-7b-chat": (2e-7, 2e-7)}
    cands = candidates_for(steerable_engine, prices)
    low, inside, high = steerable_engine.decide([DecisionRequest("q", QUESTION, t, cands) for t in (0.3, 0.8, 0.99)])
    assert (low.decision.clamped, low.decision.tau_effective) == (True, 0.7)
    assert (high.decision.clamped, high.decision.tau_effective) == (True, 0.9)
    assert (inside.decision.clamped, inside.decision.tau_effective) == (False, 0.8)


def test_real_predictor_price_change_moves_the_decision_without_retraining(steerable_engine):
    list_prices = {"gpt-4-1106-preview": (1e-5, 3e-5), "mistralai/mixtral-8x7b-chat": (6e-7, 6e-7),
                   "mistralai/mistral-7b-chat": (2e-7, 2e-7)}
    request = lambda prices: DecisionRequest("q", QUESTION, 0.7, candidates_for(steerable_engine, prices))
    before = steerable_engine.decide([request(list_prices)])[0].decision
    assert before.model == "mistralai/mixtral-8x7b-chat"  # low tau: the cheap, decent model
    cheaper_gpt4 = dict(list_prices, **{"gpt-4-1106-preview": (1e-8, 1e-8)})
    after = steerable_engine.decide([request(cheaper_gpt4)])[0].decision
    assert after.model == "gpt-4-1106-preview"  # GPT-4 at a near-zero price wins even at low tau
    pricier_mixtral = dict(list_prices, **{"mistralai/mixtral-8x7b-chat": (1e-5, 3e-5)})
    assert steerable_engine.decide([request(pricier_mixtral)])[0].decision.model == "mistralai/mistral-7b-chat"
    high = steerable_engine.decide([DecisionRequest("q", QUESTION, 0.9, candidates_for(steerable_engine, list_prices))])
    assert high[0].decision.model == "gpt-4-1106-preview"


def test_exploration_moves_only_to_candidates_at_least_as_accurate_and_records_the_propensity(steerable_engine):
    prices = {"gpt-4-1106-preview": (1e-5, 3e-5), "mistralai/mixtral-8x7b-chat": (6e-7, 6e-7),
              "mistralai/mistral-7b-chat": (2e-7, 2e-7)}
    cands = candidates_for(steerable_engine, prices)
    policy = steerable_engine.decide([DecisionRequest("q", QUESTION, 0.7, cands)])[0]
    assert policy.propensity == 1.0 and policy.decision.model == "mistralai/mixtral-8x7b-chat"  # off by default
    explored = steerable_engine.decide([DecisionRequest("q", QUESTION, 0.7, cands, exploration_rate=1.0)] * 64)
    eligible = {i for i, p in enumerate(policy.decision.p) if p >= policy.decision.p[policy.decision.index]}
    assert len(eligible) >= 2  # the test needs somewhere to explore
    assert {r.decision.index for r in explored} <= eligible and len({r.decision.index for r in explored}) >= 2
    assert all(r.propensity == pytest.approx(1 / len(eligible)) for r in explored)
    for r in explored:
        assert r.decision.slot == cands[r.decision.index].slot and r.decision.model == SLOTS[r.decision.slot]
        assert r.cost_usd == r.costs_usd[r.decision.index]


# -- live prices against the training prices of the fixed operating points -------------------------
def test_price_ratio_compares_the_slots_average_request_at_live_and_training_prices():
    manifest = manifest_double({SLOTS[0]: 10.0, SLOTS[1]: 10.0}, {SLOTS[0]: 100.0, SLOTS[1]: 100.0},
                               {SLOTS[0]: 100 * 1e-5 + 10 * 3e-5, SLOTS[1]: 1.2e-4})
    engine = DecisionEngine(manifest, CONFIG)
    as_trained = engine.score(deployment("a", "gpt-4-1106-preview", prices=(1e-5, 3e-5)))
    assert as_trained.price_ratio == pytest.approx(1.0) and engine.priced_as_trained(as_trained)
    within = engine.score(deployment("b", "x", slot=SLOTS[1], prices=(1.68e-6, 0.0)))
    assert within.price_ratio == pytest.approx(1.4) and engine.priced_as_trained(within)  # within the default 1.5x
    dearer = engine.score(deployment("b", "x", slot=SLOTS[1], prices=(3.6e-6, 0.0)))
    assert dearer.price_ratio == pytest.approx(3.0) and not engine.priced_as_trained(dearer)
    unknown = engine.score(deployment("c", "x", slot=SLOTS[2], prices=(1.0, 1.0)))  # no training cost: no limit
    assert unknown.price_ratio is None and engine.priced_as_trained(unknown)
    at_limit = engine.score(deployment("b", "x", slot=SLOTS[1], prices=(1.8e-6, 0.0)))
    assert at_limit.price_ratio == pytest.approx(1.5) and engine.priced_as_trained(at_limit)  # up to the limit itself
    free = DecisionEngine(manifest_double({SLOTS[1]: 10.0}, {SLOTS[1]: 100.0}, {SLOTS[1]: 0.0}), CONFIG)
    assert free.score(deployment("b", "x", slot=SLOTS[1], prices=(1e-9, 0.0))).price_ratio == math.inf
    assert free.score(deployment("b", "x", slot=SLOTS[1], prices=(0.0, 0.0))).price_ratio is None
    broken = DecisionEngine(manifest_double({SLOTS[1]: 10.0}, {SLOTS[1]: 100.0}, {SLOTS[1]: math.nan}), CONFIG)
    assert broken.score(deployment("b", "x", slot=SLOTS[1], prices=(1e-6, 0.0))).price_ratio is None
    unlimited = DecisionEngine(manifest, ProteusConfig.parse({"rule_price_limit": None}))
    assert unlimited.priced_as_trained(unlimited.score(deployment("b", "x", slot=SLOTS[1], prices=(3.6e-6, 0.0))))
    lax = DecisionEngine(manifest, ProteusConfig.parse({"rule_price_limit": 4}))
    assert lax.priced_as_trained(lax.score(deployment("b", "x", slot=SLOTS[1], prices=(3.6e-6, 0.0))))


@pytest.mark.parametrize("value, says", [
    (1.0, "Input should be greater than 1"), (0.5, "Input should be greater than 1"), (-2, "Input should be greater than 1"),
    ("high", "Input should be a valid number, unable to parse string as a number"),
    (True, "Input should be a valid number"),  # a YAML true would otherwise pass as 1.0
])
def test_rule_price_limit_must_be_a_number_above_one_or_null(value, says):
    """Out of bounds or of the wrong type, the error has the form of every other field's: the field,
    pydantic's reason, and the values allowed."""
    from litellm_proteus.config import CONFIG_PATH, ProteusConfigError

    with pytest.raises(ProteusConfigError) as info:
        ProteusConfig.parse({"rule_price_limit": value})
    assert str(info.value) == (f"invalid PROTEUS config: {CONFIG_PATH}.rule_price_limit: {says} "
                               "(allowed: a number > 1, or null to turn the price check off)")
    assert ProteusConfig.parse({"rule_price_limit": None}).rule_price_limit is None
    assert ProteusConfig.parse({"rule_price_limit": 4}).rule_price_limit == 4.0


def test_bundled_artifact_fixed_points_trade_a_repriced_slot_for_a_no_dearer_no_worse_one():
    """The bundled artifact routes tau 0.84 partly by the cluster ladder gpt-4 / Yi / claude-v2 /
    gpt-3.5: with gpt-3.5 at 100x its training price, each ladder pick of gpt-3.5 becomes the
    cheapest candidate whose calibrated p is at least gpt-3.5's; with the limit off it stays."""
    import yaml

    from litellm_proteus.predictor import ProteusPredictor

    example = yaml.safe_load((Path(__file__).parents[2] / "config.example.yaml").read_text())
    group = [d for d in example["model_list"] if d["model_name"] == "proteus-auto"]
    predictor = ProteusPredictor(device="cpu")
    gpt35 = predictor.models.index("gpt-3.5-turbo-1106")
    dearer = [dict(d, litellm_params=dict(d["litellm_params"], input_cost_per_token=1e-4, output_cost_per_token=2e-4))
              if d["litellm_params"]["model"] == "openai/gpt-3.5-turbo-1106" else d for d in group]
    texts = [f"Question {i}: what is {i} * {i + 7}, and why does {['ice', 'iron', 'air'][i % 3]} expand?" for i in range(60)]

    def route(model_list, limit):
        engine = DecisionEngine(predictor.manifest, ProteusConfig.parse({"rule_price_limit": limit}), predictor)
        return engine, engine.decide([DecisionRequest(t, None, 0.84, engine.score_all(model_list)[0]) for t in texts])

    engine, _ = route(group, 1.5)
    assert engine.has_fixed_points and engine.price_drift(engine.score_all(group)[0]).ratios == {}  # training prices
    engine, guarded = route(dearer, 1.5)
    drift = engine.price_drift(engine.score_all(dearer)[0])
    assert list(drift.ratios) == drift.past_limit and "gpt-3.5-turbo-1106" in drift.past_limit[0]
    assert min(drift.ratios.values()) > 50
    message = drift.warning(1.5)
    assert "take the cheapest candidate predicted at least as accurate" in message and "retrain" in message
    cheaper = [dict(d, litellm_params=dict(d["litellm_params"], input_cost_per_token=1e-7, output_cost_per_token=1e-7))
               if d["litellm_params"]["model"] == "openai/yi-34b-chat" else d for d in group]
    down = engine.price_drift(engine.score_all(cheaper)[0])  # a price drop is said too, and is past no limit
    assert [name.split(" ")[0] for name in down.ratios] == ["proteus-auto/zero-one-ai/Yi-34B-Chat"] and not down.past_limit
    assert "rule_price_limit: null" in down.warning(None)
    tiny = [dict(d, litellm_params=dict(d["litellm_params"], input_cost_per_token=1e-9, output_cost_per_token=1e-9))
            if d["litellm_params"]["model"] == "openai/gpt-4-1106-preview" else d for d in group]
    tiny_drift = engine.price_drift(engine.score_all(tiny)[0])  # a ratio ~1e-4: said in significant digits, never 0
    (ratio,) = tiny_drift.ratios.values()
    assert 0 < ratio < 1e-3 and ratio == float(f"{ratio:.3g}") and f"{ratio:.3g}" in tiny_drift.warning(None)
    yi_up = [dict(d, litellm_params=dict(d["litellm_params"], input_cost_per_token=1.1e-6, output_cost_per_token=1.1e-6))
             if d["litellm_params"]["model"] == "openai/yi-34b-chat" else d for d in group]
    strict = DecisionEngine(predictor.manifest, ProteusConfig.parse({"rule_price_limit": 1.2}), predictor)
    assert list(strict.price_drift(strict.score_all(yi_up)[0]).past_limit)  # 1.37x: past 1.2, inside 1.5
    assert not engine.price_drift(engine.score_all(yi_up)[0]).ratios  # at the default limit: nothing to say
    _, unguarded = route(dearer, None)
    traded = [(g, u) for g, u in zip(guarded, unguarded) if u.decision.rule.startswith("cluster") and u.decision.slot == gpt35]
    assert traded, "the ladder sends some of these prompts to gpt-3.5"
    for g, u in traded:
        assert g.decision.slot != gpt35 and g.cost_usd < u.cost_usd
        assert g.decision.p[g.decision.index] >= u.decision.p[u.decision.index] - 1e-12
        assert g.decision.rule == u.decision.rule and g.decision.repriced_from == "gpt-3.5-turbo-1106"
    assert {g.decision.repriced_from for g, u in zip(guarded, unguarded) if (g, u) not in traded} == {None}
    assert {u.decision.repriced_from for u in unguarded} == {None}  # no limit: every pick stands
    assert [(g.decision.slot, g.cost_usd) for g, u in zip(guarded, unguarded) if (g, u) not in traded] == [
        (u.decision.slot, u.cost_usd) for g, u in zip(guarded, unguarded) if (g, u) not in traded]


def test_replicas_of_the_chosen_model_share_its_requests(steerable_engine):
    prices = {"gpt-4-1106-preview": (1e-5, 3e-5), "mistralai/mixtral-8x7b-chat": (6e-7, 6e-7),
              "mistralai/mistral-7b-chat": (2e-7, 2e-7)}
    cands = candidates_for(steerable_engine, prices)
    twin = steerable_engine.score(deployment("gpt-4-eu", "openai/x", slot="gpt-4-1106-preview",
                                             prices=prices["gpt-4-1106-preview"]))
    dearer = steerable_engine.score(deployment("gpt-4-dear", "openai/x", slot="gpt-4-1106-preview", prices=(2e-5, 6e-5)))
    routed = steerable_engine.decide([DecisionRequest("q", QUESTION, 0.9, [cands[0], dearer, *cands[1:], twin])] * 200)
    picks = [r.decision.index for r in routed]
    assert {r.decision.model for r in routed} == {"gpt-4-1106-preview"} and set(picks) == {0, 4}  # never the dearer one
    assert min(picks.count(0), picks.count(4)) > 60  # spread over both replicas (200 draws of a fair coin)
    assert all(r.propensity == 1.0 and r.cost_usd == r.costs_usd[r.decision.index] for r in routed)


def test_replicas_are_the_same_slot_at_the_same_price_and_p():
    from litellm_proteus.replicas import replicas_of

    assert replicas_of(0, [0, 0, 1, 0], [1.0, 1.0, 1.0, 1.0], [0.9, 0.9, 0.9, 0.9]) == [0, 1, 3]
    assert replicas_of(0, [0, 0, 0], [1.0, 1.0 + 1e-6, 1.0], [0.9, 0.9, 0.85]) == [0]  # dearer; corrected lower
