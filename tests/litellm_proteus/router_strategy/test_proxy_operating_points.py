"""An artifact whose calibration routes by an operating-point rule, served by a real ``litellm
--config`` proxy subprocess (the fixtures of ``test_proxy_e2e``)."""

from __future__ import annotations

import json
import shutil

import pytest

from litellm_proteus.operating_points import OperatingPoint

from ..conftest import start_redis
from .test_proxy_e2e import LITELLM, Proxy, proxy_config

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
