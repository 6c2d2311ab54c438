"""The repricing benchmark on the bundled artifact: past the limit a repriced pick gives way."""

from __future__ import annotations

import json

import pytest

from proteus_train.bench.repricing import main


@pytest.mark.shared_data
def test_past_the_limit_the_repriced_slot_loses_its_rule_traffic_and_costs_fall(shared_data, tmp_path, capsys):
    argv = ["--data", str(shared_data / "routerbench-partial"), "--slot", "zero-one-ai/Yi-34B-Chat",
            "--tiers", "0.79", "--factors", "1.4", "100", "--limits", "1.5", "--out", str(tmp_path)]
    assert main(argv) == 0
    result = json.loads((tmp_path / "repricing.json").read_text())
    within, past = result["rows"]
    assert within["off"] == within["limit 1.5"]  # 1.4x is within the limit: routing unchanged
    assert within["off"]["slot_share"] > 0.5 and past["off"]["slot_share"] > 0.5  # the ladder uses Yi at tau 0.79
    assert past["limit 1.5"]["slot_share"] < 0.05
    assert past["limit 1.5"]["cost_per_1k"] < past["off"]["cost_per_1k"] / 5
    assert past["limit 1.5"]["accuracy"] >= 0.79
    assert "x100" in capsys.readouterr().out
