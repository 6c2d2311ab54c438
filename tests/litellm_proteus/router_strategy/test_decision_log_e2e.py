"""The serving loop through a real ``litellm --config`` proxy with ``--num_workers 2`` and a real
redis-server: every answered request lands in the decision log with its outcome, feedback over
HTTP (authenticated) is logged and moves the realised-accuracy gauge, Redis dying fails nothing.
Retries and fallbacks through a one-worker proxy in front of a loopback upstream whose deployments
fail on demand: every failed attempt has its outcome, a fallback group's answer is no pick's.
"""

from __future__ import annotations

import os
import re
import stat
import time

import httpx
import pytest

from litellm_proteus.cli import main as proteus_cli
from litellm_proteus.decision_log import SCHEMA, iter_records, join_log
from litellm_proteus.feedback import FEEDBACK_ROUTE, FeedbackError, send_feedback

from ..conftest import FlakyUpstream, redis_holds
from .test_proxy_e2e import LITELLM, Proxy, proxy_config

pytestmark = pytest.mark.e2e
KEYS_BY_TIER = {"premium": "sk-alice", "economy": "sk-bob", "standard": "sk-dave"}
TIER_TAU = {"premium": 0.9, "standard": 0.85, "economy": 0.7}  # proxy_config's tiers


def two_worker_proxy(tmp_path_factory, artifact, redis_url: str, name: str, **strategy_args):
    """A proxy with ``--num_workers 2``, the decision log in its workdir, and ``strategy_args`` added."""
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    workdir = tmp_path_factory.mktemp(name)
    config = proxy_config(artifact, redis_url)
    args = config["router_settings"]["routing_strategy_args"]
    args.update(strategy_args)
    args["decision_log"] = {"dir": str(workdir / "log"), **args.get("decision_log", {})}
    return Proxy(
        workdir, config, extra_args=("--num_workers", "2", "--timeout_worker_healthcheck", "120"),  # torch loads slowly on a busy machine
        env={"PROMETHEUS_MULTIPROC_DIR": str(workdir / "prometheus")},  # not the shared /tmp default
    )


@pytest.fixture(scope="module")
def logged_proxy(tmp_path_factory, steerable_artifact, module_redis_server):
    before = os.umask(0o022)  # the proxy starts under the common umask (a file made without a mode: 0644)
    try:
        proxy = two_worker_proxy(tmp_path_factory, steerable_artifact, module_redis_server.url, "logged-proxy",
                                 decision_log={"redis_stream": "proteus:decisions", "log_responses": True})
    finally:
        os.umask(before)
    proxy.wait_ready()
    yield proxy
    proxy.stop()


def log_dir(proxy: Proxy):
    return proxy.workdir / "log"


def wait_for_log(proxy: Proxy, call_ids: list[str], timeout_s: float = 30.0) -> dict:
    """The joined rows of ``call_ids`` once each has its outcome (the writer thread is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = {row.call_id: row for row in join_log(log_dir(proxy))} if log_dir(proxy).is_dir() else {}
        if all(c in rows and rows[c].outcome is not None for c in call_ids) or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def gauge(metrics: str, name: str, state_key: str) -> float | None:
    match = re.search(rf'^{name}\{{[^}}]*state_key="{re.escape(state_key)}"[^}}]*\}} (\S+)$', metrics, re.M)
    return float(match.group(1)) if match else None


def metrics(proxy: Proxy) -> str:
    return httpx.get(proxy.base + "/metrics/", timeout=30, follow_redirects=True).text


def test_every_answered_request_is_in_the_log_with_its_outcome(logged_proxy):
    answered = {}
    for i in range(12):
        tier = list(KEYS_BY_TIER)[i % 3]
        response = logged_proxy.chat(KEYS_BY_TIER[tier])
        assert response.status_code == 200
        answered[response.headers["x-litellm-call-id"]] = (tier, response)
    rows = wait_for_log(logged_proxy, list(answered))
    for call_id, (tier, response) in answered.items():
        row = rows[call_id]
        decision = row.decision
        assert decision["schema"] == SCHEMA and decision["tier"] == tier and decision["state_key"] == f"tier:{tier}@{TIER_TAU[tier]:.4g}"
        assert decision["tau"] == TIER_TAU[tier] and decision["tau_requested"] is None
        assert decision["candidates"][decision["chosen"]]["model"] == response.headers["x-proteus-model"]
        assert decision["propensity"] == 1.0 and "prompt" not in decision and len(decision["prompt_sha256"]) == 64
        assert row.outcome["success"] is True and row.outcome["response_cost"] > 0 and row.outcome["latency_ms"] >= 0
        assert row.outcome["deployment_id"] == decision["candidates"][decision["chosen"]]["deployment_id"] \
            == response.headers["x-litellm-model-id"]
        assert row.outcome["response"] == response.json()["choices"][0]["message"]["content"]
    unmanaged = logged_proxy.chat("sk-dave", model="plain")  # not routed by PROTEUS: not logged
    assert unmanaged.status_code == 200
    assert unmanaged.headers["x-litellm-call-id"] not in wait_for_log(logged_proxy, [], 0)


def test_feedback_over_http_is_authenticated_validated_logged_and_moves_the_realised_gauge(logged_proxy, monkeypatch,
                                                                                          capsys):
    monkeypatch.delenv("LITELLM_API_KEY", raising=False)
    monkeypatch.delenv("LITELLM_MASTER_KEY", raising=False)
    response = logged_proxy.chat("sk-alice")
    call_id = response.headers["x-litellm-call-id"]
    wait_for_log(logged_proxy, [call_id])
    url = logged_proxy.base + FEEDBACK_ROUTE

    def post(body, key="sk-bob"):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(url, json=body, headers=headers, timeout=30)

    assert post({"call_id": call_id, "score": 1.0}, key=None).status_code == 401
    assert post({"call_id": call_id, "score": 1.0}, key="sk-unknown").status_code == 401
    bad = post({"call_id": call_id, "score": 2})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "score"
    assert post({"call_id": "no-such-call", "score": 1}).status_code == 404
    assert post(["not", "an", "object"]).status_code == 400
    PREMIUM = f"tier:premium@{TIER_TAU['premium']:.4g}"  # the state key: tier and tau
    before = gauge(metrics(logged_proxy), "proteus_realised_labels", PREMIUM) or 0.0
    for _ in range(4):  # whichever worker answers, another key may not score Alice's call
        foreign = post({"call_id": call_id, "score": 0.0})
        assert foreign.status_code == 403 and "feedback_from is 'owner'" in foreign.json()["error"]["message"]
    assert (gauge(metrics(logged_proxy), "proteus_realised_labels", PREMIUM) or 0.0) == before
    accepted = post({"call_id": call_id, "score": 0.25, "source": "judge"}, key="sk-alice")
    assert accepted.status_code == 200, accepted.text
    assert accepted.json() == {"call_id": call_id, "state_key": PREMIUM, "score": 0.25}
    for _ in range(4):  # whichever worker answers, the second score for this call is refused
        assert post({"call_id": call_id, "score": 1.0}, key="sk-alice").status_code == 409
    text = metrics(logged_proxy)
    assert gauge(text, "proteus_realised_labels", PREMIUM) == before + 1
    assert gauge(text, "proteus_realised_accuracy", PREMIUM) is not None
    assert gauge(text, "proteus_predicted_accuracy", PREMIUM) is not None
    assert gauge(text, "proteus_delta", PREMIUM) == 0.0
    assert gauge(text, "proteus_infeasible", PREMIUM) == 0.0

    second = logged_proxy.chat("sk-bob").headers["x-litellm-call-id"]
    wait_for_log(logged_proxy, [second])
    assert send_feedback(second, 1.0, url=logged_proxy.base, api_key="sk-bob")["state_key"] == f"tier:economy@{TIER_TAU['economy']:.4g}"
    with pytest.raises(FeedbackError, match="HTTP 409"):
        send_feedback(second, 1.0, url=logged_proxy.base, api_key="sk-bob")
    third = logged_proxy.chat("sk-dave").headers["x-litellm-call-id"]
    wait_for_log(logged_proxy, [third])
    assert proteus_cli(["feedback", third, "0", "--url", logged_proxy.base, "--api-key", "sk-dave"]) == 0
    assert proteus_cli(["feedback", third, "0", "--url", logged_proxy.base, "--api-key", "sk-dave"]) == 2  # duplicate
    capsys.readouterr()
    assert proteus_cli(["feedback", third, "0", "--url", logged_proxy.base]) == 2  # no key: refused before any call
    assert "error: --url needs a proxy key: --api-key, $LITELLM_API_KEY or $LITELLM_MASTER_KEY" in capsys.readouterr().err
    monkeypatch.setenv("LITELLM_MASTER_KEY", "sk-not-a-key")
    assert proteus_cli(["feedback", third, "0", "--url", logged_proxy.base]) == 2  # the master key is tried: refused
    assert "proxy refused the feedback (HTTP 4" in capsys.readouterr().err
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = {row.call_id: row for row in join_log(log_dir(logged_proxy))}
        if all(rows[c].feedback is not None for c in (call_id, second, third)):
            break
        time.sleep(0.2)
    assert (rows[call_id].feedback, rows[second].feedback, rows[third].feedback) == (0.25, 1.0, 0.0)
    sources = [r["source"] for r in iter_records(log_dir(logged_proxy)) if r["type"] == "feedback"]
    assert sorted(sources) == ["cli", "judge", "python"]


def chat_as(proxy: Proxy, key: str, call_id: str) -> httpx.Response:
    """A chat request whose call id the client chooses (LiteLLM takes an ``x-litellm-call-id`` header)."""
    body = {"model": "proteus-auto", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    response = httpx.post(proxy.base + "/v1/chat/completions", json=body, timeout=60,
                          headers={"Authorization": f"Bearer {key}", "x-litellm-call-id": call_id})
    assert response.status_code == 200 and response.headers["x-litellm-call-id"] == call_id, response.text
    return response


def test_feedback_comes_from_the_requesting_key_or_the_master_key_and_a_client_chosen_id_stays_its_first_keys(
        logged_proxy):
    url = logged_proxy.base + FEEDBACK_ROUTE

    def post(call_id, key, score=1.0):
        return httpx.post(url, json={"call_id": call_id, "score": score}, timeout=30,
                          headers={"Authorization": f"Bearer {key}"})

    mine = logged_proxy.chat("sk-dave").headers["x-litellm-call-id"]
    wait_for_log(logged_proxy, [mine])
    assert post(mine, "sk-bob").status_code == 403
    assert post(mine, logged_proxy.master_key).status_code == 200  # a proxy admin
    assert post(mine, "sk-dave").status_code == 409
    tag = str(time.time_ns())
    # an id that looks like the index's own keys: a call id of its own, marking nothing
    chat_as(logged_proxy, "sk-alice", f"order-{tag}:feedback")
    chat_as(logged_proxy, "sk-alice", f"order-{tag}")
    wait_for_log(logged_proxy, [f"order-{tag}", f"order-{tag}:feedback"])
    assert post(f"order-{tag}", "sk-alice").status_code == 200
    for suffix in (":outcome", ":decision", ":owner", ":x"):
        answer = post(f"order-{tag}{suffix}", "sk-alice")
        assert answer.status_code == 404 and answer.json()["error"]["param"] == "call_id", answer.text
    assert post(f"order-{tag}:feedback", "sk-alice").status_code == 200
    # Bob's request reuses Alice's call id, on either worker: the id stays Alice's
    chat_as(logged_proxy, "sk-alice", f"shared-{tag}")
    wait_for_log(logged_proxy, [f"shared-{tag}"])
    for _ in range(3):
        chat_as(logged_proxy, "sk-bob", f"shared-{tag}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(r["type"] == "decision" and r["call_id"] == f"shared-{tag}"
                                              for r in iter_records(log_dir(logged_proxy))) < 4:
        time.sleep(0.2)
    time.sleep(0.5)  # the index writes follow the file writes
    for _ in range(4):
        assert post(f"shared-{tag}", "sk-bob").status_code == 403
    answer = post(f"shared-{tag}", "sk-alice")
    assert answer.status_code == 200 and answer.json()["state_key"] == f"tier:premium@{TIER_TAU['premium']:.4g}"
    conflicts = re.search(r"^proteus_call_id_conflicts_total (\S+)$", metrics(logged_proxy), re.M)
    assert conflicts and float(conflicts.group(1)) >= 3  # each of Bob's decisions: logged, not indexed, counted


def test_malformed_feedback_bodies_are_400s_that_say_what_is_wrong(logged_proxy):
    call_id = logged_proxy.chat("sk-alice").headers["x-litellm-call-id"]
    wait_for_log(logged_proxy, [call_id])
    url = logged_proxy.base + FEEDBACK_ROUTE
    headers = {"Authorization": "Bearer sk-alice", "Content-Type": "application/json"}

    def post(content: str) -> httpx.Response:
        return httpx.post(url, content=content, headers=headers, timeout=30)

    huge = post('{"call_id":"%s","score":1%s}' % (call_id, "0" * 400))
    assert huge.status_code == 400 and huge.json()["error"]["param"] == "score" and "[0, 1]" in huge.json()["error"]["message"]
    deep = post('{"call_id":' + "[" * 100_000 + "]" * 100_000 + ',"score":1}')
    assert deep.status_code == 400 and "JSON object" in deep.json()["error"]["message"]
    misspelt = post('{"call_id":"%s","score":1,"scor":2}' % call_id)
    assert misspelt.status_code == 400 and "'scor'" in misspelt.json()["error"]["message"]
    renamed = post('{"id":"%s","rating":1}' % call_id)
    message = renamed.json()["error"]["message"]
    assert renamed.status_code == 400 and "'id'" in message and "'rating'" in message and "call_id, score" in message
    long_source = post('{"call_id":"%s","score":1,"source":"%s"}' % (call_id, "s" * 65))
    assert long_source.status_code == 400 and "at most 64 characters" in long_source.json()["error"]["message"]
    with pytest.raises(FeedbackError, match="without /v1"):
        send_feedback(call_id, 1.0, url=logged_proxy.base + "/v1", api_key="sk-alice")
    accepted = post('{"call_id":"%s","score":1,"source":"api"}' % call_id)  # nothing above counted as feedback
    assert accepted.status_code == 200, accepted.text


def test_the_compliance_report_reads_the_proxys_log(logged_proxy, tmp_path, capsys):
    assert proteus_cli(["compliance", "--log", str(log_dir(logged_proxy)), "--png", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^tier:premium@\S+\s+\d+", out, re.M) and re.search(r"^tier:economy@\S+\s+\d+", out, re.M)
    assert (tmp_path / "c.png").stat().st_size > 0


def test_a_key_that_is_not_sk_is_stored_nowhere_raw_and_meets_its_cli_tier(logged_proxy, module_redis_server, capsys):
    import redis

    from litellm_proteus.tiers import hash_key

    secret = "acme-secret-key-123"
    assert proteus_cli(["tiers", "--redis-url", module_redis_server.url, "set", secret, "economy"]) == 0
    response = logged_proxy.chat(secret)
    assert (response.headers["x-proteus-tier"], response.headers["x-proteus-tau-source"]) == ("economy", "redis")
    call_id = response.headers["x-litellm-call-id"]
    assert wait_for_log(logged_proxy, [call_id])[call_id].decision["key_hash"] == hash_key(secret)
    for path in log_dir(logged_proxy).iterdir():
        assert secret.encode() not in path.read_bytes(), path
    client = redis.Redis.from_url(module_redis_server.url)
    assert client.exists(f"proteus:decision:{call_id}")  # the decision index entry
    assert redis_holds(client, secret) == []
    capsys.readouterr()
    assert proteus_cli(["tiers", "--redis-url", module_redis_server.url, "list"]) == 0
    assert secret not in capsys.readouterr().out


def test_the_log_folder_and_its_files_are_the_proxy_users_only(logged_proxy):
    call_id = logged_proxy.chat("sk-alice").headers["x-litellm-call-id"]
    wait_for_log(logged_proxy, [call_id])  # its response is in the file (log_responses)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in log_dir(logged_proxy).iterdir()}
    assert stat.S_IMODE(log_dir(logged_proxy).stat().st_mode) == 0o700
    assert modes and set(modes.values()) == {0o600}, modes  # every worker's files


def test_redis_killed_mid_run_fails_no_request_and_the_files_keep_every_request(logged_proxy, module_redis_server):
    module_redis_server.stop()
    call_ids = []
    for i in range(8):
        response = logged_proxy.chat(list(KEYS_BY_TIER.values())[i % 3])
        assert response.status_code == 200
        call_ids.append(response.headers["x-litellm-call-id"])
    rows = wait_for_log(logged_proxy, call_ids)
    assert all(rows[c].outcome is not None and rows[c].outcome["success"] for c in call_ids)


def feedback_proxy(tmp_path_factory, artifact, redis_url: str, name: str, compliance: dict):
    """A two-worker proxy with per-deployment feedback on, keys of its own in a Redis of its own
    (another test here kills the module's)."""
    proxy = two_worker_proxy(
        tmp_path_factory, artifact, redis_url, name,
        decision_log={"redis_key_prefix": f"proteus:{name}:decision:"},
        compliance={"key_prefix": f"proteus:{name}:", **compliance},
    )
    proxy.wait_ready()
    return proxy


def wrong_answers_from_gpt4(proxy, redis_url: str, window_key: str) -> tuple[str, list[str]]:
    """Six premium requests (tau 0.9: the artifact sends them to gpt-4), each labelled wrong over
    HTTP, all in the one Redis window ``window_key`` (``{id}``: gpt-4's deployment id) that every
    worker reads; returns gpt-4's deployment id and the call ids."""
    import redis

    first = [proxy.chat("sk-alice") for _ in range(6)]
    assert {r.json()["choices"][0]["message"]["content"] for r in first} == {"served by gpt-4"}
    call_ids = [r.headers["x-litellm-call-id"] for r in first]
    wait_for_log(proxy, call_ids)
    for call_id in call_ids:  # 6 labels far below gpt-4's predicted p
        send_feedback(call_id, 0.0, url=proxy.base, api_key="sk-alice")
    gpt4_id = first[0].headers["x-litellm-model-id"]
    assert redis.Redis.from_url(redis_url).llen(window_key.format(id=gpt4_id)) == 6
    return gpt4_id, call_ids


def served_after(proxy) -> list:
    """Eight more requests (the proxy runs 2 workers), all answered, all by mixtral, all logged."""
    after = [proxy.chat("sk-alice") for _ in range(8)]
    assert all(r.status_code == 200 for r in after)
    assert {r.json()["choices"][0]["message"]["content"] for r in after} == {"served by mixtral"}
    wait_for_log(proxy, [r.headers["x-litellm-call-id"] for r in after])
    return after


@pytest.fixture
def breaker_proxy(tmp_path_factory, steerable_artifact, redis_server):
    proxy = feedback_proxy(tmp_path_factory, steerable_artifact, redis_server.url, "breaker-test",
                           {"breaker": {"enabled": True, "min_labels": 5, "refresh_s": 0}})
    yield proxy
    proxy.stop()


def test_feedback_that_proves_a_deployment_worse_takes_it_out_on_every_worker(breaker_proxy, redis_server):
    gpt4_id, _ = wrong_answers_from_gpt4(breaker_proxy, redis_server.url, "proteus:breaker-test:deployment:breaker:{id}:residuals")
    after = served_after(breaker_proxy)
    logged = {row.call_id: row.decision for row in join_log(log_dir(breaker_proxy))}
    assert all(len(logged[r.headers["x-litellm-call-id"]]["candidates"]) == 1 for r in after)  # gpt-4 not offered
    assert '"breaker_excluded": 1' in breaker_proxy.log()  # the per-decision log line says the breaker acted
    assert f"quality breaker: deployment {gpt4_id} is left out" in breaker_proxy.log()
    assert re.search(rf'^proteus_breaker_open\{{deployment="{gpt4_id}"\}} 1\.0$', metrics(breaker_proxy), re.M)


@pytest.fixture
def correction_proxy(tmp_path_factory, steerable_artifact, redis_server):
    """The deployment correction with a small prior: a few labels weigh."""
    proxy = feedback_proxy(tmp_path_factory, steerable_artifact, redis_server.url, "correction-test",
                           {"correction": {"enabled": True, "min_labels": 5, "prior": 1, "refresh_s": 0}})
    yield proxy
    proxy.stop()


def test_feedback_lowers_a_deployments_p_on_every_worker_and_the_log_says_by_how_much(correction_proxy, redis_server):
    gpt4_id, call_ids = wrong_answers_from_gpt4(
        correction_proxy, redis_server.url, "proteus:correction-test:deployment:correction:{id}:residuals"
    )
    after = served_after(correction_proxy)
    logged = {row.call_id: row.decision for row in join_log(log_dir(correction_proxy))}
    assert all(c["p_correction"] == 0.0 for c in logged[call_ids[0]]["candidates"])
    for r in after:  # gpt-4 still offered, at its p less 6/7 of its residual
        candidates = {c["deployment_id"]: c for c in logged[r.headers["x-litellm-call-id"]]["candidates"]}
        assert len(candidates) == 2 and candidates[gpt4_id]["p_correction"] < -0.5
        assert all(c["p_correction"] == 0.0 for d, c in candidates.items() if d != gpt4_id)
    value = re.search(rf'^proteus_deployment_correction\{{deployment="{gpt4_id}"\}} (\S+)$', metrics(correction_proxy), re.M)
    assert value and float(value.group(1)) < -0.5


# -- retries and fallbacks -------------------------------------------------------------------------
FAILOVER_DEPLOYMENTS = {  # deployment id: (model group, upstream model, trained slot, prices)
    "gpt4": ("proteus-auto", "gpt-4-1106-preview", "gpt-4-1106-preview", (1e-5, 3e-5)),
    "mixtral": ("proteus-auto", "mixtral-8x7b", "mistralai/mixtral-8x7b-chat", (6e-7, 6e-7)),
    "mistral": ("proteus-auto", "mistral-7b", "mistralai/mistral-7b-chat", (2e-7, 2e-7)),
    "solo": ("proteus-solo", "solo-gpt-4", "gpt-4-1106-preview", (1e-5, 3e-5)),  # a group of one deployment
}


@pytest.fixture(scope="module")
def failover_upstream():
    server = FlakyUpstream({})
    yield server
    server.close()


@pytest.fixture(scope="module")
def failover_proxy(tmp_path_factory, steerable_artifact, failover_upstream):
    """One worker, no Redis; num_retries 2 and proteus-auto falling back to the unmanaged group plain;
    no cooldowns, so each test finds every deployment a candidate."""
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    workdir = tmp_path_factory.mktemp("failover-proxy")
    model_list = [
        {"model_name": group, "model_info": {"id": dep_id, "proteus_model": slot},
         "litellm_params": {"model": f"openai/{model}", "api_base": failover_upstream.base, "api_key": "none",
                            "max_retries": 0, "input_cost_per_token": prices[0], "output_cost_per_token": prices[1]}}
        for dep_id, (group, model, slot, prices) in FAILOVER_DEPLOYMENTS.items()
    ] + [{"model_name": "plain", "model_info": {"id": "plain"},
          "litellm_params": {"model": "openai/plain", "api_base": failover_upstream.base, "api_key": "none", "max_retries": 0}}]
    config = proxy_config(steerable_artifact, "redis://127.0.0.1:1/0", model_list)
    router = config["router_settings"]
    router.update(num_retries=2, disable_cooldowns=True, fallbacks=[{"proteus-auto": ["plain"]}])
    args = router["routing_strategy_args"]
    del args["redis"]
    args.update(groups=["proteus-auto", "proteus-solo"], compliance={"enabled": False},
                decision_log={"dir": str(workdir / "log"), "log_responses": True, "log_prompts": True})  # errors keep their message
    proxy = Proxy(workdir, config)
    proxy.wait_ready()
    yield proxy
    proxy.stop()


def attempts_of(proxy: Proxy, call_id: str, records_expected: int, timeout_s: float = 30.0) -> list[tuple]:
    """(type, chosen or answering deployment, success) of the call's records, once ``records_expected`` are written."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = [r for r in iter_records(log_dir(proxy)) if r["call_id"] == call_id] if log_dir(proxy).is_dir() else []
        if len(records) >= records_expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return [("decision", r["candidates"][r["chosen"]]["deployment_id"], None) if r["type"] == "decision"
            else (r["type"], r.get("deployment_id"), r.get("success")) for r in records]


def failing(upstream: FlakyUpstream, *deployments: str, times: int | None = None) -> None:
    """The deployments' upstream models fail (the next ``times`` calls, or every call)."""
    upstream.failure_rates.clear()
    upstream.fail_next.clear()
    for dep_id in deployments:
        model = FAILOVER_DEPLOYMENTS[dep_id][1]
        if times is None:
            upstream.failure_rates[model] = 1.0
        else:
            upstream.fail_next[model] = times


def test_every_failed_attempt_of_a_retried_request_has_its_outcome(failover_proxy, failover_upstream):
    """LiteLLM runs one failure event per request; each failed pick still gets its failure outcome."""
    failing(failover_upstream, "gpt4", "mixtral")
    response = failover_proxy.chat("sk-alice")  # premium, tau 0.9: gpt-4 first
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "served by mistral-7b"
    assert response.headers["x-litellm-model-id"] == "mistral"
    assert response.headers["x-proteus-model"] == "mistralai/mistral-7b-chat"
    call_id = response.headers["x-litellm-call-id"]
    records = attempts_of(failover_proxy, call_id, 6)
    picks = [dep for kind, dep, _ in records if kind == "decision"]
    assert picks[0] == "gpt4" and sorted(picks) == ["gpt4", "mistral", "mixtral"]
    assert [(dep, ok) for kind, dep, ok in records if kind == "outcome"] == [(picks[0], False), (picks[1], False),
                                                                             ("mistral", True)]
    errors = [r["error"] for r in iter_records(log_dir(failover_proxy)) if r["call_id"] == call_id and r["type"] == "outcome"]
    assert "injected failure" in errors[0] and "injected failure" in errors[1] and errors[2] is None
    row = wait_for_log(failover_proxy, [call_id])[call_id]
    assert row.outcome["deployment_id"] == "mistral" and row.outcome["response"] == "served by mistral-7b"


def test_a_fallback_groups_answer_is_no_outcome_of_the_pick_nor_does_it_take_feedback(failover_proxy, failover_upstream):
    failing(failover_upstream, "gpt4", "mixtral", "mistral")
    response = failover_proxy.chat("sk-alice")
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "served by plain"
    assert response.headers["x-litellm-model-id"] == "plain"
    headers = {k: v for k, v in response.headers.items() if k.startswith("x-proteus-")}
    assert headers == {"x-proteus-fallback": "plain"}  # the decision headers described a pick that did not answer
    call_id = response.headers["x-litellm-call-id"]
    records = attempts_of(failover_proxy, call_id, 6)
    picks = [dep for kind, dep, _ in records if kind == "decision"]
    assert sorted(picks) == ["gpt4", "mistral", "mixtral"]
    assert [(dep, ok) for kind, dep, ok in records if kind == "outcome"] == [(dep, False) for dep in picks]
    row = wait_for_log(failover_proxy, [call_id])[call_id]
    assert row.outcome["success"] is False and row.outcome["deployment_id"] == picks[-1]
    refused = httpx.post(failover_proxy.base + FEEDBACK_ROUTE, json={"call_id": call_id, "score": 1.0},
                         headers={"Authorization": "Bearer sk-alice"}, timeout=30)
    assert refused.status_code == 409, refused.text
    assert "not answered by the deployment PROTEUS picked" in refused.json()["error"]["message"]


def test_a_group_of_one_deployment_retries_it_and_logs_both_attempts(failover_proxy, failover_upstream):
    failing(failover_upstream, "solo", times=1)
    calls = failover_upstream.calls.get("solo-gpt-4", 0)
    response = failover_proxy.chat("sk-alice", model="proteus-solo")
    assert response.status_code == 200, response.text  # not a 429 about cooldowns that do not exist
    assert failover_upstream.calls["solo-gpt-4"] == calls + 2
    assert response.headers["x-proteus-model"] == "gpt-4-1106-preview"
    records = attempts_of(failover_proxy, response.headers["x-litellm-call-id"], 4)
    assert records == [("decision", "solo", None), ("outcome", "solo", False), ("decision", "solo", None),
                       ("outcome", "solo", True)]


def test_a_request_whose_every_attempt_failed_has_a_failure_outcome_per_pick(failover_proxy, failover_upstream):
    """No failure event reaches the plugin after the first: the last pick's outcome comes from the
    proxy's post-call failure hook."""
    failing(failover_upstream, "solo")
    response = failover_proxy.chat("sk-alice", model="proteus-solo")
    assert response.status_code == 500, response.text
    headers = {k: v for k, v in response.headers.items() if k.startswith("x-proteus-")}
    assert headers["x-proteus-failed"] == "gpt-4-1106-preview" and headers["x-proteus-tier"] == "premium"
    assert not {"x-proteus-model", "x-proteus-mu", "x-proteus-operating-point"} & set(headers)  # nothing answered
    records = attempts_of(failover_proxy, response.headers["x-litellm-call-id"], 6)
    assert records == [("decision", "solo", None), ("outcome", "solo", False)] * 3


def test_a_stream_its_client_leaves_mid_way_is_logged_as_a_partial_answer(failover_proxy, failover_upstream):
    """The proxy bills the part sent as a success (LiteLLM's disconnect handler); the outcome says the
    client left, so the judge and shadow evaluation do not score the part as the pick's answer."""
    failing(failover_upstream)
    failover_upstream.stream_chunks, failover_upstream.stream_delay_s = 40, 0.1
    body = {"model": "proteus-solo", "stream": True, "messages": [{"role": "user", "content": "Count slowly."}]}
    try:
        with httpx.stream("POST", failover_proxy.base + "/v1/chat/completions", json=body, timeout=60,
                          headers={"Authorization": "Bearer sk-alice"}) as left:
            assert left.status_code == 200
            call_id = left.headers["x-litellm-call-id"]
            lines = left.iter_lines()
            while "part 1 " not in next(lines):  # two chunks read, then the client hangs up
                pass
        with httpx.stream("POST", failover_proxy.base + "/v1/chat/completions", json=body, timeout=60,
                          headers={"Authorization": "Bearer sk-alice"}) as read:
            whole_id = read.headers["x-litellm-call-id"]
            text = "".join(read.iter_lines())
    finally:
        failover_upstream.stream_chunks, failover_upstream.stream_delay_s = 3, 0.0
    assert "part 39 " in text
    rows = wait_for_log(failover_proxy, [call_id, whole_id])
    partial, whole = rows[call_id].outcome, rows[whole_id].outcome
    assert partial["success"] is True and partial["client_disconnected"] is True
    assert "part 0 by solo-gpt-4" in partial["response"] and "part 39 " not in partial["response"]
    assert whole["success"] is True and "client_disconnected" not in whole and "part 39 " in whole["response"]
