"""A real ``litellm --config`` proxy subprocess on a free loopback port, with a real redis-server.

The plugin is loaded through the config alone (``litellm_settings.callbacks``); keys come from the
bundled static-keys ``custom_auth`` (LiteLLM's virtual keys would need Postgres).  Deployments
answer with LiteLLM's ``mock_response`` and carry their own prices; the artifact is the steerable
test artifact (low tau -> Mixtral, high tau -> GPT-4).  One proxy serves the whole module.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from litellm_proteus.cli import main as proteus_cli
from litellm_proteus.devices import cuda_usable

from ..conftest import free_port

pytestmark = pytest.mark.e2e
STARTUP_TIMEOUT_S = 180
LITELLM = shutil.which("litellm")
CHAT = "/v1/chat/completions"

KEYS = {
    "sk-alice": {"metadata": {"proteus_tier": "premium"}},  # tier from key metadata
    "sk-bob": {"team_id": "research", "team_metadata": {"proteus_tier": "economy"}},  # from team metadata
    "sk-carol": {},  # tier from Redis (set by the test)
    "sk-dave": {},  # nothing anywhere: the default tier
    "sk-frank": {},  # first seen while Redis is down
    "acme-secret-key-123": {},  # not sk-...: a custom_auth key is any string; its tier and log entries use its hash
}


def deployments():
    return [
        {"model_name": "proteus-auto",
         "litellm_params": {"model": "openai/gpt-4-1106-preview", "mock_response": "served by gpt-4", "api_key": "none",
                            "input_cost_per_token": 1.0e-5, "output_cost_per_token": 3.0e-5},
         "model_info": {"proteus_model": "gpt-4-1106-preview"}},
        {"model_name": "proteus-auto",
         "litellm_params": {"model": "openai/mixtral-8x7b", "mock_response": "served by mixtral", "api_key": "none",
                            "input_cost_per_token": 6.0e-7, "output_cost_per_token": 6.0e-7},
         "model_info": {"proteus_model": "mistralai/mixtral-8x7b-chat"}},
        {"model_name": "plain",
         "litellm_params": {"model": "openai/plain", "mock_response": "plain answer", "api_key": "none"}},
    ]


def proxy_config(artifact: Path, redis_url: str, model_list=None) -> dict:
    return {
        "model_list": model_list or deployments(),
        "litellm_settings": {
            "callbacks": ["litellm_proteus.router_strategy.proteus_hook", "prometheus"],
            "require_auth_for_metrics_endpoint": False,
        },
        "general_settings": {"custom_auth": "litellm_proteus.router_strategy.static_keys.user_api_key_auth"},
        "router_settings": {
            "fallbacks": [{"plain": ["proteus-auto"]}],
            "routing_strategy": "proteus",
            "routing_strategy_args": {
                "artifact": str(artifact),
                "tiers": {"premium": 0.9, "standard": 0.85, "economy": 0.7},
                "allow_raise": {"premium": True},
                "redis": {"url": redis_url, "timeout_ms": 200, "cache_ttl_s": 0},
            },
        },
    }


class Proxy:
    def __init__(self, workdir: Path, config: dict, keys: dict = KEYS, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None):
        self.workdir = workdir
        self.master_key = "sk-" + secrets.token_hex(16)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "proxy.log"
        config_path = workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        (workdir / "keys.yaml").write_text(yaml.safe_dump({"keys": keys}))
        env = {
            **os.environ,
            "LITELLM_MASTER_KEY": self.master_key,
            "PROTEUS_KEYS_FILE": str(workdir / "keys.yaml"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [LITELLM, "--config", str(config_path), "--host", "127.0.0.1", "--port", str(self.port), *extra_args],
            cwd=workdir, env=env, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"proxy exited with {self.process.returncode}:\n{self.log()[-4000:]}")
            try:
                if httpx.get(self.base + "/health/liveliness", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"proxy not ready after {STARTUP_TIMEOUT_S}s:\n{self.log()[-4000:]}")

    def wait_exit(self) -> int:
        try:
            return self.process.wait(STARTUP_TIMEOUT_S)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()

    def chat(self, key: str, model: str = "proteus-auto", **metadata) -> httpx.Response:
        body = {"model": model, "messages": [{"role": "user", "content": "What is the capital of France?"}]}
        if metadata:
            body["metadata"] = metadata
        return httpx.post(self.base + CHAT, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, steerable_artifact, module_redis_server):
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    workdir = tmp_path_factory.mktemp("proxy")
    proxy = Proxy(workdir, proxy_config(steerable_artifact, module_redis_server.url))
    proxy.wait_ready()
    yield proxy
    proxy.stop()


def proteus_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("x-proteus-")}


def test_tau_in_metadata_changes_the_served_deployment(proxy):
    low, high = proxy.chat("sk-alice", tau=0.7), proxy.chat("sk-alice", tau=0.9)
    assert low.status_code == high.status_code == 200, low.text + high.text
    assert low.json()["choices"][0]["message"]["content"] == "served by mixtral"
    assert high.json()["choices"][0]["message"]["content"] == "served by gpt-4"
    assert low.headers["x-litellm-model-id"] != high.headers["x-litellm-model-id"]
    assert proteus_headers(low)["x-proteus-model"] == "mistralai/mixtral-8x7b-chat"
    assert (high.headers["x-proteus-tau"], high.headers["x-proteus-tau-source"]) == ("0.9", "request")
    assert float(high.headers["x-proteus-mu"]) > float(low.headers["x-proteus-mu"])
    expected = "cuda" if cuda_usable() else "cpu"  # the device that decided (device: auto)
    assert low.headers["x-proteus-device"] == expected
    point = high.headers["x-proteus-operating-point"]  # which calibrated point decided
    assert point.split("@")[0].split(":")[0] in {"policy", "slot", "quality", "cluster"}, point


def test_key_and_team_metadata_tiers(proxy):
    alice, bob = proxy.chat("sk-alice"), proxy.chat("sk-bob")
    assert (alice.headers["x-proteus-tier"], alice.headers["x-proteus-tau-source"]) == ("premium", "key_metadata")
    assert alice.headers["x-proteus-tau"] == "0.9"
    assert (bob.headers["x-proteus-tier"], bob.headers["x-proteus-tau-source"]) == ("economy", "team_metadata")
    assert bob.json()["choices"][0]["message"]["content"] == "served by mixtral"


def test_redis_tier_applies_and_a_raised_tau_is_capped(proxy, module_redis_server):
    assert proteus_cli(["tiers", "--redis-url", module_redis_server.url, "set", "sk-carol", "economy"]) == 0
    plain = proxy.chat("sk-carol")
    assert (plain.headers["x-proteus-tier"], plain.headers["x-proteus-tau-source"]) == ("economy", "redis")
    assert plain.headers["x-proteus-tau"] == "0.7"
    raised = proxy.chat("sk-carol", tau=0.9)
    assert raised.status_code == 200
    assert raised.headers["x-proteus-tau-capped"] == "true" and raised.headers["x-proteus-tau"] == "0.7"
    assert raised.headers["x-proteus-tau-requested"] == "0.9"
    assert raised.json()["choices"][0]["message"]["content"] == "served by mixtral"
    default = proxy.chat("sk-dave")
    assert (default.headers["x-proteus-tier"], default.headers["x-proteus-tau-source"]) == ("standard", "default")


def test_tau_outside_the_trained_range_is_clamped(proxy):
    response = proxy.chat("sk-alice", tau=0.5)
    assert response.status_code == 200
    headers = proteus_headers(response)
    assert headers["x-proteus-tau-clamped"] == "true" and headers["x-proteus-tau"] == "0.7"
    assert headers["x-proteus-tau-requested"] == "0.5"


@pytest.mark.parametrize("tau", ["abc", "nan", 0, -0.2, 1.5, True, [0.9]])
def test_invalid_tau_is_a_400_naming_tau(proxy, tau):
    response = proxy.chat("sk-alice", tau=tau)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "tau" in message and "(0, 1]" in message


def test_a_misspelt_tau_key_is_a_400_naming_the_key(proxy):
    response = proxy.chat("sk-alice", Tau=0.8)
    assert response.status_code == 400, response.text
    assert "metadata has 'Tau', not 'tau'" in response.json()["error"]["message"]


def test_unmanaged_groups_and_unknown_keys(proxy):
    plain = proxy.chat("sk-alice", model="plain", tau=0.9)
    assert plain.status_code == 200 and plain.json()["choices"][0]["message"]["content"] == "plain answer"
    assert proteus_headers(plain) == {}
    assert proxy.chat("sk-mallory").status_code == 401


def test_streaming_responses_carry_the_decision_headers(proxy):
    body = {"model": "proteus-auto", "stream": True, "metadata": {"tau": 0.7},
            "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    with httpx.stream("POST", proxy.base + CHAT, json=body, headers={"Authorization": "Bearer sk-alice"}, timeout=60) as r:
        text = "".join(r.iter_text())
        assert r.status_code == 200
        assert r.headers["x-proteus-model"] == "mistralai/mixtral-8x7b-chat"
    assert "data:" in text and "[DONE]" in text


def test_openai_sdk_example_client(proxy):
    example = Path(__file__).resolve().parents[3] / "examples" / "client_tau.py"
    result = subprocess.run(
        [sys.executable, str(example), "What is the capital of France?", "--tau", "0.7", "0.9",
         "--base-url", proxy.base, "--api-key", "sk-alice"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    low, high = result.stdout.splitlines()[1:3]
    assert "mistralai/mixtral-8x7b-chat" in low and "served by mixtral" in low
    assert "gpt-4-1106-preview" in high and "key_metadata" not in high and "request" in high
    assert "* clamped" not in result.stdout  # the footnote only explains a marked row
    clamped = subprocess.run(
        [sys.executable, str(example), "What is the capital of France?", "--tau", "0.3",
         "--base-url", proxy.base, "--api-key", "sk-alice"],
        capture_output=True, text=True, timeout=120,
    )
    assert clamped.returncode == 0, clamped.stderr
    assert "0.7*" in clamped.stdout.splitlines()[1] and "* clamped" in clamped.stdout


def post(proxy, path: str, body: dict, key: str = "sk-alice") -> httpx.Response:
    return httpx.post(proxy.base + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.mark.parametrize(
    "path, body",
    [
        (CHAT, {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/completions", {"prompt": "hi"}),
        ("/v1/completions", {"prompt": "hi", "stream": True}),
    ],
)
def test_bad_input_is_a_400_in_openais_error_shape_on_every_endpoint(proxy, path, body):
    # (LiteLLM 1.106 itself replaces a metadata that is not an object before any hook sees it.)
    response = post(proxy, path, {"model": "proteus-auto", **body, "metadata": {"tau": 1.5}})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "tau" and error["type"] == "invalid_request_error", error
    assert "(0, 1]" in error["message"] and "{'error'" not in error["message"]


def test_a_bad_tau_is_refused_where_a_fallback_would_reach_proteus(proxy):
    response = proxy.chat("sk-alice", model="plain", tau="high")  # plain falls back to proteus-auto
    assert response.status_code == 400 and response.json()["error"]["param"] == "tau"


def test_a_client_cannot_pick_its_deployment_around_its_tier(proxy):
    served = proxy.chat("sk-bob")  # economy: mixtral
    assert served.json()["choices"][0]["message"]["content"] == "served by mixtral"
    mixtral_id = served.headers["x-litellm-model-id"]
    gpt4_id = proxy.chat("sk-alice", tau=0.9).headers["x-litellm-model-id"]
    # forged retry breadcrumbs naming mixtral as failed would leave only GPT-4
    forged = proxy.chat("sk-bob", previous_models=[{"deployment_id": mixtral_id}], request_retry_count=1)
    assert forged.status_code == 200 and forged.json()["choices"][0]["message"]["content"] == "served by mixtral"
    assert forged.headers["x-proteus-tier"] == "economy"
    direct = proxy.chat("sk-bob", model=gpt4_id)  # the id every response leaks
    assert direct.status_code == 400 and "one deployment of the PROTEUS group" in direct.json()["error"]["message"]
    by_model = proxy.chat("sk-bob", model="openai/gpt-4-1106-preview")  # the deployment's litellm_params.model
    assert by_model.status_code == 400 and "one deployment of the PROTEUS group" in by_model.json()["error"]["message"]


def test_a_client_cannot_forge_the_decision(proxy):
    forged = proxy.chat("sk-dave", proteus={"model": "forged", "tau": 1.0})
    assert forged.headers["x-proteus-model"] != "forged"
    unmanaged = proxy.chat("sk-dave", model="plain", proteus={"model": "forged", "tau": 1.0})
    assert unmanaged.status_code == 200 and proteus_headers(unmanaged) == {}


def test_decision_log_lines_and_prometheus_metrics(proxy):
    proxy.chat("sk-alice", tau=0.7)
    decisions = [json.loads(line) for line in proxy.log().splitlines() if line.startswith('{"') and "proteus_decision" in line]
    assert decisions and {"tau", "tau_source", "mu", "model", "deployment_id", "latency_ms"} <= set(decisions[-1])
    metrics = httpx.get(proxy.base + "/metrics/", timeout=30, follow_redirects=True).text
    assert 'proteus_decisions_total{model="mistralai/mixtral-8x7b-chat",model_group="proteus-auto",tau_source="request",tier="premium"}' in metrics
    assert "proteus_decision_latency_seconds_bucket" in metrics and "proteus_mu_bucket" in metrics


def test_master_key_works_as_on_a_stock_proxy(proxy, module_redis_server):
    headers = {"Authorization": f"Bearer {proxy.master_key}"}
    models = httpx.get(proxy.base + "/v1/models", headers=headers, timeout=60)
    assert models.status_code == 200 and "proteus-auto" in {m["id"] for m in models.json()["data"]}
    chat = proxy.chat(proxy.master_key)
    assert chat.status_code == 200 and chat.headers["x-proteus-tier"] == "standard"  # no tier of its own: the default
    assert proteus_cli(["tiers", "--redis-url", module_redis_server.url, "set", "litellm_proxy_master_key", "economy"]) == 0
    assert proxy.chat(proxy.master_key).headers["x-proteus-tier"] == "economy"
    assert httpx.get(proxy.base + "/v1/models", headers={"Authorization": "Bearer sk-wrong"}, timeout=60).status_code == 401


@pytest.mark.parametrize("path, body, field", [
    (CHAT, {"messages": 5}, "messages"),
    (CHAT, {"messages": []}, "messages"),
    ("/v1/responses", {"input": {"text": "hi"}}, "input"),
    ("/v1/embeddings", {"input": 5}, "input"),
])
def test_a_body_of_the_wrong_shape_is_a_400_naming_the_field(proxy, path, body, field):
    response = post(proxy, path, {"model": "proteus-auto", **body})
    assert response.status_code == 400, response.text
    assert (response.json()["error"]["param"], response.json()["error"]["type"]) == (field, "invalid_request_error")
    if body.get("messages") == []:
        assert "messages must be a non-empty JSON array" in response.json()["error"]["message"]


@pytest.mark.parametrize("path, field", [(CHAT, "messages"), ("/v1/responses", "input"), ("/v1/embeddings", "input"),
                                         ("/v1/completions", "prompt")])
def test_content_nested_900_deep_is_routed_not_a_500(proxy, path, field):
    deep: object = "What is the capital of France?"
    for _ in range(900):
        deep = [deep]
    value = [{"role": "user", "content": deep}] if field == "messages" else deep
    response = post(proxy, path, {"model": "proteus-auto", field: value})
    assert response.status_code < 500, response.text
    assert "recursion" not in response.text.lower()


def test_redis_stopped_mid_test_keeps_known_keys_tiers(proxy, module_redis_server):
    assert proteus_cli(["tiers", "--redis-url", module_redis_server.url, "set", "sk-carol", "economy"]) == 0
    assert proxy.chat("sk-carol").headers["x-proteus-tau-source"] == "redis"
    module_redis_server.stop()
    known = proxy.chat("sk-carol")  # its last tier read from Redis
    assert known.status_code == 200
    assert (known.headers["x-proteus-tier"], known.headers["x-proteus-tau-source"]) == ("economy", "redis")
    unknown = proxy.chat("sk-frank")  # never read from Redis: the default tier
    assert unknown.status_code == 200
    assert (unknown.headers["x-proteus-tier"], unknown.headers["x-proteus-tau-source"]) == ("standard", "default")
    assert "tier lookup failed, using the key's last known tier" in proxy.log()
    assert "tier lookup failed, using the default tier" in proxy.log()


def test_startup_fails_naming_unmapped_deployments_and_a_corrupt_artifact(tmp_path, steerable_artifact):
    """Both problems in one config: the proxy must exit non-zero and name each of them."""
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    artifact = tmp_path / "artifact"
    shutil.copytree(steerable_artifact, artifact)
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["weights_sha256"] = "0" * 64
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    model_list = deployments()
    model_list[0]["litellm_params"]["model"] = "openai/gpt-4o"  # neither a slot name ...
    model_list[0]["model_info"] = {}  # ... nor mapped to one
    broken = Proxy(tmp_path, proxy_config(artifact, "redis://127.0.0.1:1/0", model_list))
    assert broken.wait_exit() != 0
    log = broken.log()
    assert "PROTEUS routing cannot start" in log
    assert "'openai/gpt-4o'" in log and "maps to no trained slot" in log
    assert "corrupt or replaced" in log
    assert "Traceback" not in log


# uvicorn's lifespan traceback of a refusal runs to ~400 lines; LiteLLM's banner and warnings stay ~30.
REFUSAL_MAX_LINES = 60


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"tiers": {"premium": 1.5, "standard": 0.85, "economy": 0.7}},
         "routing_strategy_args.tiers: tier 'premium': tau must be a number in (0, 1]; got 1.5"),
        ({"redis": {"url": "http://127.0.0.1:6379/0"}},
         "routing_strategy_args.redis.url: must start with one of redis://, rediss://, unix://"),
        ({"allow_direct_deployments": "no"},
         "routing_strategy_args.allow_direct_deployments: Input should be a valid boolean (allowed: true or false)"),
    ],
    ids=["tier-tau", "redis-scheme", "lax-boolean"],
)
def test_a_refused_config_exits_with_one_error_line_and_no_traceback(tmp_path, steerable_artifact, args, fragment):
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    config = proxy_config(steerable_artifact, "redis://127.0.0.1:1/0")
    config["router_settings"]["routing_strategy_args"].update(args)
    refused = Proxy(tmp_path, config)
    assert refused.wait_exit() != 0
    log = refused.log()
    assert f"PROTEUS routing cannot start: invalid PROTEUS config: router_settings.{fragment}" in log
    assert "Application startup failed. Exiting." in log
    assert "Traceback" not in log
    assert len(log.splitlines()) < REFUSAL_MAX_LINES, log


def test_a_start_up_error_that_is_not_a_refusal_keeps_its_traceback(tmp_path, steerable_artifact):
    """The plugin is loaded (litellm_settings.callbacks come first), then LiteLLM fails on its own."""
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    config = proxy_config(steerable_artifact, "redis://127.0.0.1:1/0")
    config["general_settings"]["custom_auth"] = "no_such_module_for_proteus_tests.user_api_key_auth"
    broken = Proxy(tmp_path, config)
    assert broken.wait_exit() != 0
    log = broken.log()
    assert "Traceback (most recent call last)" in log
    assert "No module named 'no_such_module_for_proteus_tests'" in log
