"""Shadow evaluation through a real ``litellm --config`` proxy subprocess with a real redis-server.

The served deployment (GPT-4 at tau 0.9, the steerable artifact) answers with LiteLLM's
``mock_response``; the other candidate (Mixtral) and the judge are OpenAI-compatible HTTP servers on
loopback run by this test (``Upstream``): Mixtral can answer, fail with HTTP 500 or hold every
request until released; the judge scores an answer naming Mixtral 0 and any other 1.  Every shadow
and judge call reports 1,000 prompt + 1,000 completion tokens, so the spend is known exactly.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import redis

from litellm_proteus.shadow_budget import utc_day

from .test_proxy_e2e import LITELLM, Proxy, deployments, proxy_config

pytestmark = pytest.mark.e2e
MIXTRAL_PRICE = 6.0e-7  # per token, input and output
JUDGE_PRICE = 1.0e-6
SHADOW_CALL_USD = 2000 * MIXTRAL_PRICE  # 0.0012
JUDGE_CALL_USD = 2000 * JUDGE_PRICE  # 0.002
BUDGET_USD = 0.035


class Upstream:
    """``/mixtral/v1/chat/completions`` and ``/judge/v1/chat/completions`` on a free loopback port."""

    def __init__(self):
        self.mode = "answer"  # answer | error | hold
        self.release = threading.Event()
        self.mixtral_calls = 0
        self.held = 0  # Mixtral requests waiting for ``release`` right now
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.startswith("/judge/"):
                    answer = body["messages"][-1]["content"]
                    upstream.reply(self, "Names the wrong model.\nSCORE: 0" if "answer by mixtral" in answer else "Fine.\nSCORE: 1")
                    return
                with upstream.lock:
                    upstream.mixtral_calls += 1
                    mode = upstream.mode
                if mode == "error":
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "upstream broke", "type": "server_error"}}')
                    return
                if mode == "hold":
                    with upstream.lock:
                        upstream.held += 1
                    upstream.release.wait(60)
                    with upstream.lock:
                        upstream.held -= 1
                upstream.reply(self, "answer by mixtral")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def reply(handler: BaseHTTPRequestHandler, text: str) -> None:
        body = json.dumps({
            "id": "chatcmpl-upstream", "object": "chat.completion", "created": int(time.time()), "model": "upstream",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 1000, "total_tokens": 2000},
        }).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def base(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}/v1"

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def upstream():
    server = Upstream()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def shadow_proxy(tmp_path_factory, steerable_artifact, module_redis_server, upstream):
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    workdir = tmp_path_factory.mktemp("shadow-proxy")
    models = deployments()
    mixtral = models[1]["litellm_params"]
    del mixtral["mock_response"]
    mixtral.update(api_base=upstream.base("mixtral"), input_cost_per_token=MIXTRAL_PRICE, output_cost_per_token=MIXTRAL_PRICE)
    models.append({"model_name": "judge", "litellm_params": {
        "model": "openai/judge", "api_base": upstream.base("judge"), "api_key": "none",
        "input_cost_per_token": JUDGE_PRICE, "output_cost_per_token": JUDGE_PRICE}})
    config = proxy_config(steerable_artifact, module_redis_server.url, model_list=models)
    args = config["router_settings"]["routing_strategy_args"]
    args["decision_log"] = {"dir": str(workdir / "log"), "log_prompts": True}
    args["shadow"] = {"rate": 1.0, "tiers": {"economy": 0.0}, "candidates": 1, "judge_model": "judge",
                      "daily_budget_usd": BUDGET_USD, "timeout_s": 30}
    proxy = Proxy(workdir, config)
    proxy.wait_ready()
    yield proxy
    proxy.stop()


def ask(proxy: Proxy) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    response = proxy.chat("sk-alice", tau=0.9)  # premium key, may raise tau: GPT-4 serves
    return response, time.monotonic() - start


def shadow_rows(proxy: Proxy) -> dict[str, dict]:
    rows = {}
    for path in sorted((proxy.workdir / "log").glob("shadow-*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            rows[row["shadow_of"]] = row
    return rows


def wait_for(condition, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    return condition()


def counter(proxy: Proxy, name: str, **labels) -> float:
    text = httpx.get(proxy.base + "/metrics/", timeout=30, follow_redirects=True).text
    total = 0.0
    for match in re.finditer(rf"^{name}(?:\{{([^}}]*)\}})? (\S+)$", text, re.M):
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


def test_client_gets_the_served_answer_and_a_shadow_row_scores_every_called_model(shadow_proxy, upstream):
    response, _ = ask(shadow_proxy)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "served by gpt-4"  # unchanged
    assert response.headers["x-proteus-model"] == "gpt-4-1106-preview"
    call_id = response.headers["x-litellm-call-id"]
    row = wait_for(lambda: shadow_rows(shadow_proxy).get(call_id))
    assert row, shadow_proxy.log()[-3000:]
    assert row["served"] == "gpt-4-1106-preview" and row["eval_name"] == "premium"
    assert row["call_share"] == 1.0  # one shadow candidate (the default) of the one other model
    assert row["tau"] == float(response.headers["x-proteus-tau"])
    assert row["prompt"] == "What is the capital of France?"
    assert row["gpt-4-1106-preview"] == 1.0 and row["mistralai/mixtral-8x7b-chat"] == 0.0
    assert row["mistralai/mixtral-8x7b-chat|total_cost"] == pytest.approx(SHADOW_CALL_USD)
    assert row["gpt-4-1106-preview|total_cost"] > 0
    assert upstream.mixtral_calls == 1
    economy = shadow_proxy.chat("sk-bob")  # tau 0.7: Mixtral serves; the economy tier's rate is 0: never shadowed
    assert economy.status_code == 200 and economy.json()["choices"][0]["message"]["content"] == "answer by mixtral"
    time.sleep(1.0)
    assert economy.headers["x-litellm-call-id"] not in shadow_rows(shadow_proxy)
    assert upstream.mixtral_calls == 2 and counter(shadow_proxy, "proteus_shadow_calls_total", kind="judge", outcome="ok") == 2


def test_a_streamed_response_is_shadowed_once_the_stream_is_complete(shadow_proxy, upstream):
    body = {"model": "proteus-auto", "stream": True, "metadata": {"tau": 0.9},
            "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    with httpx.stream("POST", shadow_proxy.base + "/v1/chat/completions", json=body,
                      headers={"Authorization": "Bearer sk-alice"}, timeout=60) as response:
        text = "".join(response.iter_text())
        assert response.status_code == 200
        call_id = response.headers["x-litellm-call-id"]
    assert "[DONE]" in text
    row = wait_for(lambda: shadow_rows(shadow_proxy).get(call_id))
    assert row["gpt-4-1106-preview"] == 1.0 and row["mistralai/mixtral-8x7b-chat"] == 0.0  # the served text was judged


def test_a_completions_prompt_is_shadowed_like_a_chat_message(shadow_proxy, upstream):
    body = {"model": "proteus-auto", "metadata": {"tau": 0.9}, "prompt": "What is the capital of France?"}
    response = httpx.post(shadow_proxy.base + "/v1/completions", json=body, headers={"Authorization": "Bearer sk-alice"},
                          timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["text"] == "served by gpt-4"
    row = wait_for(lambda: shadow_rows(shadow_proxy).get(response.headers["x-litellm-call-id"]))
    assert row, shadow_proxy.log()[-3000:]
    assert row["prompt"] == "What is the capital of France?"
    assert row["gpt-4-1106-preview"] == 1.0 and row["mistralai/mixtral-8x7b-chat"] == 0.0  # both answers judged

def test_a_failing_shadow_upstream_leaves_the_client_untouched(shadow_proxy, upstream):
    upstream.mode = "error"
    errors = counter(shadow_proxy, "proteus_shadow_calls_total", kind="candidate", outcome="error")
    response, _ = ask(shadow_proxy)
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "served by gpt-4"
    call_id = response.headers["x-litellm-call-id"]
    row = wait_for(lambda: shadow_rows(shadow_proxy).get(call_id))
    assert row["gpt-4-1106-preview"] == 1.0 and row["mistralai/mixtral-8x7b-chat"] is None  # called, no answer
    assert wait_for(lambda: counter(shadow_proxy, "proteus_shadow_calls_total", kind="candidate", outcome="error") > errors)
    upstream.mode = "answer"


def test_a_hanging_shadow_upstream_does_not_delay_the_client(shadow_proxy, upstream):
    upstream.mode, before = "hold", upstream.mixtral_calls
    upstream.release.clear()
    try:
        first, _ = ask(shadow_proxy)
        assert first.status_code == 200
        assert wait_for(lambda: upstream.held == 1), "the shadow call never reached the upstream"
        second, seconds = ask(shadow_proxy)  # while the first shadow call is blocked
        assert second.status_code == 200 and second.json()["choices"][0]["message"]["content"] == "served by gpt-4"
        assert upstream.held >= 1  # the response came back while a shadow call was still blocked
        assert wait_for(lambda: upstream.held == 2)
        ids = [r.headers["x-litellm-call-id"] for r in (first, second)]
        assert not set(ids) & set(shadow_rows(shadow_proxy))
    finally:
        upstream.release.set()
        upstream.mode = "answer"
    rows = wait_for(lambda: all(i in shadow_rows(shadow_proxy) for i in ids) and shadow_rows(shadow_proxy))
    assert all(rows[i]["mistralai/mixtral-8x7b-chat"] == 0.0 for i in ids) and upstream.mixtral_calls == before + 2
    print(f"client latency with a blocked shadow call: {seconds:.3f} s")


def test_after_the_daily_budget_is_spent_no_shadow_call_happens(shadow_proxy, upstream, module_redis_server):
    client = redis.Redis.from_url(module_redis_server.url, decode_responses=True)
    key = f"proteus:shadow:spend:{utc_day()}"
    spent = lambda: float(client.get(key) or 0.0)  # noqa: E731
    # so far: 5 answered shadow calls, 1 failed one (no cost), 11 judge calls
    assert spent() == pytest.approx(5 * SHADOW_CALL_USD + 11 * JUDGE_CALL_USD)
    for _ in range(10):  # bounded: 0.0052 USD a request
        if spent() >= BUDGET_USD:
            break
        call_id = ask(shadow_proxy)[0].headers["x-litellm-call-id"]
        assert wait_for(lambda: call_id in shadow_rows(shadow_proxy))
    assert spent() >= BUDGET_USD
    calls, rows = upstream.mixtral_calls, len(shadow_rows(shadow_proxy))
    skipped = counter(shadow_proxy, "proteus_shadow_skipped_total", reason="budget")
    for _ in range(3):
        response, _ = ask(shadow_proxy)
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "served by gpt-4"
    assert wait_for(lambda: counter(shadow_proxy, "proteus_shadow_skipped_total", reason="budget") >= skipped + 3)
    assert upstream.mixtral_calls == calls and len(shadow_rows(shadow_proxy)) == rows
    assert counter(shadow_proxy, "proteus_shadow_budget_spent_usd") == pytest.approx(spent())
    assert "daily budget of 0.0350 USD spent" in shadow_proxy.log()
