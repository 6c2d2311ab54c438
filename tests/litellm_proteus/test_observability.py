"""The decision record's operating-point header (``litellm_proteus/observability.py``)."""

from __future__ import annotations

from litellm_proteus.observability import DecisionRecord, operating_point_label

MODELS = ["gpt-4", "mixtral"]
FIELDS = dict(model_group="g", deployment_id="d", model="m", tau=0.8, tau_requested=0.8, tau_source="default",
              tier="standard", tier_source="default", mu=0.5, clamped=False, capped=False, candidates=2, excluded=0,
              prompt_tokens=3, cost_usd=0.001, latency_ms=1.0)


def test_each_rule_has_a_short_header_form():
    assert operating_point_label("policy", 0.812345, MODELS) == "policy@0.8123"
    assert operating_point_label("policy", None, MODELS) == "policy"
    assert operating_point_label("slot:1", None, MODELS) == "slot:mixtral"
    assert operating_point_label("quality", 0.9, MODELS) == "quality"
    assert operating_point_label("cluster:0,1,1", 0.9, MODELS) == "cluster"  # x-proteus-model names its model


def test_the_operating_point_is_a_header_and_survives_the_metadata_round_trip():
    record = DecisionRecord(**FIELDS, operating_point="slot:mixtral")
    assert record.headers()["x-proteus-operating-point"] == "slot:mixtral"
    assert DecisionRecord.from_dict(record.to_dict()) == record
    assert "x-proteus-operating-point" not in DecisionRecord(**FIELDS).headers()  # a record written without it


def test_a_repriced_pick_names_the_model_it_gave_way_to_beside_its_operating_point():
    record = DecisionRecord(**{**FIELDS, "model": "gpt-4"}, operating_point="slot:mixtral", repriced_from="mixtral")
    headers = record.headers()
    assert (headers["x-proteus-operating-point"], headers["x-proteus-repriced-from"], headers["x-proteus-model"]) == (
        "slot:mixtral", "mixtral", "gpt-4")
    assert DecisionRecord.from_dict(record.to_dict()) == record
    assert "x-proteus-repriced-from" not in DecisionRecord(**FIELDS, operating_point="slot:mixtral").headers()
