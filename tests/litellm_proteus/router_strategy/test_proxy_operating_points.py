"""An artifact whose calibration routes by an operating-point rule, served by a real ``litellm
--config`` proxy subprocess (the fixtures of ``test_proxy_e2e``)."""

from __future__ import annotations

import json
import shutil

import pytest

from litellm_proteus.operating_points import OperatingPoint

from ..conftest import start_redis
from .test_proxy_e2e import LITELLM, Proxy, deployments, proxy_config

pytestmark = pytest.mark.e2e


def test_a_single_model_rule_serves_its_slot_where_the_policy_would_not(tmp_path, steerable_artifact):
    """At tau 0.7 the steerable policy serves Mixtral (test_proxy_e2e); a calibration whose entries
    are the rule "slot 0" (GPT-4) must serve GPT-4 there."""
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    artifact = tmp_path / "artifact"
    shutil.copytree(steerable_artifact, artifact)
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["calibration"] = {
        "requested": [0.7, 0.9],
        "policy_tau": [0.7, 0.9],
        "requested_point": [OperatingPoint(kind="slot", slot=0).model_dump()] * 2,
    }
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    redis = start_redis()
    proxy = Proxy(tmp_path, proxy_config(artifact, redis.url))
    try:
        proxy.wait_ready()
        response = proxy.chat("sk-alice", tau=0.7)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["content"] == "served by gpt-4"
        assert response.headers["x-proteus-model"] == "gpt-4-1106-preview"
    finally:
        proxy.stop()
        redis.stop()


@pytest.mark.parametrize("limit, served, repriced_from", [(None, "served by mixtral", None),
                                                           (1.5, "served by gpt-4", "mistralai/mixtral-8x7b-chat")])
def test_a_rule_whose_model_is_priced_far_above_training_gives_way_to_a_no_dearer_no_worse_one(
    tmp_path, steerable_artifact, limit, served, repriced_from
):
    """The rule "slot 1" (Mixtral, p 0.70) at a Mixtral priced 100x its training price: past the
    limit the request goes to the cheapest candidate predicted at least as accurate, GPT-4 (p 0.92,
    now the cheaper of the two), and the headers say which rule's pick gave way; without a limit the
    rule keeps paying for Mixtral."""
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    artifact = tmp_path / "artifact"
    shutil.copytree(steerable_artifact, artifact)
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["calibration"] = {"requested": [0.7, 0.9], "policy_tau": [0.7, 0.9],
                               "requested_point": [OperatingPoint(kind="slot", slot=1).model_dump()] * 2}
    mixtral = "mistralai/mixtral-8x7b-chat"  # trained at its list price, 6e-7 per token
    manifest["avg_cost_usd"] = {mixtral: (manifest["avg_input_tokens"][mixtral] + manifest["avg_output_tokens"][mixtral]) * 6e-7}
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    model_list = deployments()
    model_list[1]["litellm_params"].update(input_cost_per_token=6e-5, output_cost_per_token=6e-5)  # 100x
    config = proxy_config(artifact, "redis://unused", model_list)
    config["router_settings"]["routing_strategy_args"].pop("redis")
    config["router_settings"]["routing_strategy_args"]["rule_price_limit"] = limit
    proxy = Proxy(tmp_path, config)
    try:
        proxy.wait_ready()
        response = proxy.chat("sk-alice", tau=0.7)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["content"] == served
        assert response.headers["x-proteus-operating-point"] == "slot:mistralai/mixtral-8x7b-chat"
        assert response.headers.get("x-proteus-repriced-from") == repriced_from
        assert "live prices differ" in proxy.log() and "mistralai/mixtral-8x7b-chat" in proxy.log()
    finally:
        proxy.stop()
