"""Shared fixtures of the plugin tests: a throw-away ``redis-server`` on a free loopback port and a
steerable artifact (hand-set weights whose routing direction follows tau)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def redis_holds(client, secret: str) -> list:
    """The keys of ``client``'s Redis whose name or value holds ``secret`` (every data type read)."""
    read = {b"string": client.get, b"hash": client.hgetall, b"stream": client.xrange,
            b"list": lambda k: client.lrange(k, 0, -1), b"set": client.smembers, b"zset": lambda k: client.zrange(k, 0, -1)}
    return [key for key in client.scan_iter("*") if secret.encode() in key + repr(read[client.type(key)](key)).encode()]


@dataclass
class RedisServer:
    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_redis(port: int | None = None, directory: Path | None = None) -> RedisServer:
    """A redis-server on ``port`` (default: a free one); with ``directory``, a ``SAVE`` there is
    loaded again by the next server started on it (no automatic snapshots either way)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = port or free_port()
    persistence = ["--dir", str(directory), "--dbfilename", "dump.rdb"] if directory is not None else []
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *persistence],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = RedisServer(process, port)
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1)
    for _ in range(100):  # up to ~10 s
        try:
            if client.ping():
                return server
        except redis.exceptions.ConnectionError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"redis-server did not start on port {port}")


@pytest.fixture
def redis_server():
    server = start_redis()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def module_redis_server():
    """One redis-server for a module's proxy fixtures (each proxy start-up costs seconds)."""
    server = start_redis()
    yield server
    server.stop()


# -- a steerable artifact ------------------------------------------------------------------------
# Random weights (``make_artifact``) give a mu that barely moves with tau, so routing-direction tests
# use hand-set weights instead: the performance head predicts fixed correctness per slot
# (``STEER_P``: strong models high, cheap ones low) and the policy maps tau monotonically to mu
# (~0.07 at the bottom of the declared range, ~0.93 at the top).  Low tau therefore routes to a
# cheap deployment and high tau to the strongest, through the real eq. 2 and cost normaliser.
STEER_MODELS = ["gpt-4-1106-preview", "mistralai/mixtral-8x7b-chat", "mistralai/mistral-7b-chat"]
STEER_P = {"gpt-4-1106-preview": 0.92, "mistralai/mixtral-8x7b-chat": 0.70, "mistralai/mistral-7b-chat": 0.55}
# USD per token (RouterBench-era list prices).
PRICES = {
    "gpt-4-1106-preview": (10e-6, 30e-6),
    "mistralai/mixtral-8x7b-chat": (0.6e-6, 0.6e-6),
    "mistralai/mistral-7b-chat": (0.2e-6, 0.2e-6),
}
TAU_RANGE = (0.7, 0.9)


def build_steerable_artifact(directory: Path, models=STEER_MODELS, p=STEER_P) -> Path:
    import math

    import torch

    from litellm_proteus.artifact import EncoderSpec, Manifest, save_artifact
    from litellm_proteus.costs import CostNormalizer
    from litellm_proteus.model import ModelConfig, ProteusModel

    config = ModelConfig(embed_dim=384, n_models=len(models), use_critic=False)
    model = ProteusModel(config)
    h = config.hidden_dim
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        model.performance_head.bias.copy_(torch.tensor([math.log(p[m] / (1 - p[m])) for m in models]))
        # The Beta head reads [gated trunk features (h), tau feature, lambda feature]: steer mu by the
        # tau feature alone, so that raw_alpha = -raw_beta = 40 * (tau_norm - 0.5) whatever affine
        # encoding ProteusModel._conditioning uses for tau_norm.
        assert model.beta_head.linear.in_features == h + 2, "ProteusModel changed: update this builder"
        feature = lambda tn: float(model._conditioning(torch.tensor([tn]), torch.tensor([1.0]), torch.zeros(1, 1))[0, 0])
        slope = feature(1.0) - feature(0.0)
        assert abs(feature(0.5) - (feature(0.0) + feature(1.0)) / 2) < 1e-6 and slope > 0
        weight = 40.0 / slope
        bias = -weight * feature(0.5)
        model.beta_head.linear.weight[0, h] = weight  # alpha grows with tau
        model.beta_head.linear.weight[1, h] = -weight  # beta shrinks with tau
        model.beta_head.linear.bias.copy_(torch.tensor([bias, -bias]))
    manifest = Manifest(
        models=list(models),
        encoder=EncoderSpec(name="all-MiniLM-L6-v2", embed_dim=384),
        architecture=config,
        tau_range=TAU_RANGE,
        tau_train_range=(0.65, 0.95),
        cost_normalization=CostNormalizer(space="log10_usd_per_call", low=-5.0, high=-2.0).to_dict(),
        avg_input_tokens={m: 400.0 for m in models},
        avg_output_tokens={m: 100.0 for m in models},
    )
    return save_artifact(directory, model, manifest)


@pytest.fixture(scope="session")
def steerable_artifact(tmp_path_factory) -> Path:
    return build_steerable_artifact(tmp_path_factory.mktemp("steerable") / "artifact")


# -- a slow first connection ---------------------------------------------------------------------
class SlowFirstConnect:
    """A loopback TCP relay in front of a real server whose first ``slow_connections`` accepted
    connections wait ``delay_s`` before any byte flows (a cold start on a busy machine, reproduced
    with real sockets).  Threads: one accept loop, two pumps per connection."""

    def __init__(self, target_port: int, delay_s: float, slow_connections: int = 1):
        import threading

        self.target_port = target_port
        self.delay_s = delay_s
        self.slow_connections = slow_connections
        self.accepted = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept_loop(self) -> None:
        import threading

        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            self.accepted += 1
            delay = self.delay_s if self.accepted <= self.slow_connections else 0.0
            thread = threading.Thread(target=self._relay, args=(client, delay), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _relay(self, client: socket.socket, delay: float) -> None:
        import threading

        if self._stop.wait(delay):
            client.close()
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
        except OSError:
            client.close()
            return

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for sock in (src, dst):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        other = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        other.start()
        pump(client, upstream)
        other.join(5)
        client.close()
        upstream.close()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(2)


# -- an OpenAI-compatible upstream that fails some calls ------------------------------------------
class FlakyUpstream:
    """A loopback OpenAI-compatible server (chat, completions, embeddings, responses) in a thread:
    each answer names the model it was asked for; calls for a model in ``failure_rates`` fail with
    HTTP 500 at that rate (seeded, so runs repeat), and the next ``fail_next[model]`` calls for a
    model fail whatever its rate (both may be changed while it runs).  A chat request with ``stream``
    is answered as server-sent events: ``stream_chunks`` content chunks, ``stream_delay_s`` apart.
    Counts calls and injected failures per model."""

    def __init__(self, failure_rates: dict[str, float], seed: int = 0):
        import asyncio
        import random
        import threading

        self.failure_rates = failure_rates
        self.fail_next: dict[str, int] = {}
        self.stream_chunks, self.stream_delay_s = 3, 0.0
        self.calls: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self._random = random.Random(seed)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}/v1"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the flaky upstream did not start")

    def _answer(self, kind: str, model: str, text: str) -> dict:
        usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        created = int(time.time())
        if kind == "chat":
            return {"id": "chatcmpl-1", "object": "chat.completion", "created": created, "model": model, "usage": usage,
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}
        if kind == "completions":
            return {"id": "cmpl-1", "object": "text_completion", "created": created, "model": model, "usage": usage,
                    "choices": [{"index": 0, "finish_reason": "stop", "text": text, "logprobs": None}]}
        if kind == "embeddings":
            return {"object": "list", "model": model, "usage": {"prompt_tokens": 10, "total_tokens": 10},
                    "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}]}
        return {"id": "resp_1", "object": "response", "created_at": created, "status": "completed", "model": model,
                "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}}

    def _serve(self) -> None:
        import asyncio

        from aiohttp import web

        def handler(kind: str):
            async def handle(request: web.Request) -> web.Response:
                try:
                    body = await request.json()
                except ValueError:
                    body = {}
                model = str(body.get("model", "?")) if isinstance(body, dict) else "?"
                self.calls[model] = self.calls.get(model, 0) + 1
                forced = self.fail_next.get(model, 0) > 0
                if forced:
                    self.fail_next[model] -= 1
                if forced or self._random.random() < self.failure_rates.get(model, 0.0):
                    self.failures[model] = self.failures.get(model, 0) + 1
                    return web.json_response({"error": {"message": "injected failure", "type": "server_error"}}, status=500)
                if kind == "chat" and isinstance(body, dict) and body.get("stream"):
                    return await self._stream(request, model)
                return web.json_response(self._answer(kind, model, f"served by {model}"))

            return handle

        app = web.Application(client_max_size=64 * 1024 * 1024)
        for kind, path in (("chat", "chat/completions"), ("completions", "completions"), ("embeddings", "embeddings"),
                           ("responses", "responses")):
            app.router.add_post(f"/v1/{path}", handler(kind))
        asyncio.set_event_loop(self._loop)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._runner = runner
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    async def _stream(self, request, model: str):
        import asyncio
        import json

        from aiohttp import web

        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)

        def event(delta: dict, finish: str | None) -> bytes:
            chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(chunk)}\n\n".encode()

        try:
            for i in range(self.stream_chunks):
                await response.write(event({"role": "assistant", "content": f"part {i} by {model} "}, None))
                await asyncio.sleep(self.stream_delay_s)
            await response.write(event({}, "stop") + b"data: [DONE]\n\n")
        except ConnectionResetError:  # the proxy hung up (its client went away)
            pass
        return response

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
