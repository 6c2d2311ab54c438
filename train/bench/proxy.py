"""End-to-end overhead: real ``litellm --config`` proxies on loopback against a mock upstream.

Two proxies run side by side with the same deployments (one per trained slot, all served by
``mock_upstream`` after a fixed delay): one with ``routing_strategy: proteus`` (the plugin, loaded
through ``litellm_settings.callbacks``), one with LiteLLM's default ``simple-shuffle``.  Requests
go in interleaved rounds (shuffle then proteus, then the other way round), so drift in machine load
hits both alike; each round, ``callers`` concurrent clients send ``per_caller`` requests each, one
after the other, their first requests staggered over one upstream delay (steady arrivals, not one
synchronized burst per round).
The ratio of the two p50 (and p99) latencies is the router's end-to-end cost.

``rss_mb`` is the peak resident set (``VmHWM``) of the PROTEUS proxy worker (the largest over the
proxy process and its children) after the run: the model, LiteLLM and the served traffic;
``startup_rss_mb`` is the same figure for both proxies once they answer ``/health/liveliness``,
before any request.

On a small host the load generator and the mock upstream compete with the proxy for the same cores,
which a client and an LLM provider elsewhere would not.  ``load_nice`` (``proteus bench
--load-nice N``, Linux) runs both at N niceness steps below normal priority, so the proxies get the
CPU first; the default 0 measures everything at equal priority.
"""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import yaml

from .concurrency import BENCH_GROUP, bench_model_list
from .measure import percentiles_ms

HOOK = "litellm_proteus.router_strategy.proteus_hook"


@dataclass(frozen=True)
class ProxySettings:
    callers: int = 8
    requests: int = 64  # per strategy
    per_caller: int = 4  # requests per caller per round
    delay_s: float = 1.0
    startup_timeout_s: float = 240.0
    request_timeout_s: float = 60.0
    device: str = "cpu"
    artifact: str | None = None
    threads: int | None = None  # also OMP_NUM_THREADS for the proxies (torch reads it at start-up)
    strategy_args: dict | None = None  # extra routing_strategy_args (predictor_options, batching)
    load_nice: int = 0  # niceness added to the load generator thread and the mock upstream (Linux)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def litellm_command() -> list[str]:
    exe = shutil.which("litellm")
    if exe:
        return [exe]
    return [sys.executable, "-c", "import sys; from litellm.proxy.proxy_cli import run_server; sys.exit(run_server())"]


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc; Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo and len(tree) < 10_000:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def peak_rss_mb(pid: int) -> float:
    """Largest ``VmHWM`` (peak resident set) over the process tree, in MiB (0.0 when unreadable)."""
    best = 0.0
    for member in process_tree(pid):
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    best = max(best, int(line.split()[1]) / 1024.0)
        except OSError:
            continue
    return round(best, 1)


class Service:
    """A subprocess with its output in a log file, stopped (terminate, then kill) on exit."""

    def __init__(self, name: str, command: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=log_path.parent)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_http(self, url: str, timeout_s: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} not ready at {url} after {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)
        self._log.close()


def proxy_config(strategy: str, api_base: str, slots: list[str], settings: ProxySettings, master_key: str) -> dict:
    config: dict = {
        "model_list": bench_model_list(slots, api_base=api_base),
        "general_settings": {"master_key": master_key},
        "litellm_settings": {"set_verbose": False, "telemetry": False},
        "router_settings": {"routing_strategy": strategy},
    }
    if strategy == "proteus":
        config["litellm_settings"]["callbacks"] = [HOOK]
        args = {"artifact": settings.artifact, "device": settings.device, "groups": [BENCH_GROUP]}
        args.update(settings.strategy_args or {})
        config["router_settings"]["routing_strategy_args"] = args
    return config


async def _round(url: str, prompts: list[str], offset: int, settings: ProxySettings, session) -> tuple[list[float], int]:
    import aiohttp

    latencies: list[float] = []
    errors = 0

    async def caller(index: int) -> None:
        nonlocal errors
        await asyncio.sleep(settings.delay_s * index / settings.callers)
        for k in range(settings.per_caller):
            text = prompts[(offset + index * settings.per_caller + k) % len(prompts)]
            body = {"model": BENCH_GROUP, "messages": [{"role": "user", "content": text}]}
            t0 = time.perf_counter()
            try:
                async with session.post(url, json=body) as response:
                    await response.read()
                    ok = response.status == 200
            except (aiohttp.ClientError, asyncio.TimeoutError):
                ok = False
            if ok:
                latencies.append(time.perf_counter() - t0)
            else:
                errors += 1

    await asyncio.gather(*(caller(i) for i in range(settings.callers)))
    return latencies, errors


async def _load(
    urls: dict[str, str], prompts: list[str], settings: ProxySettings, master_key: str, progress
) -> dict[str, dict]:
    import aiohttp

    per_round = settings.callers * settings.per_caller
    rounds = max(1, math.ceil(settings.requests / per_round))
    results = {name: {"latencies": [], "errors": 0} for name in urls}
    timeout = aiohttp.ClientTimeout(total=settings.request_timeout_s)
    connector = aiohttp.TCPConnector(limit=0)
    headers = {"Authorization": f"Bearer {master_key}"}
    async with aiohttp.ClientSession(timeout=timeout, connector=connector, headers=headers) as session:
        warm = ProxySettings(callers=1, per_caller=2, delay_s=0.0)
        for name, url in urls.items():  # warm-up (prompts from the pool's end, never timed later)
            await _round(url, prompts, len(prompts) - 2, warm, session)
        names = list(urls)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                latencies, errors = await _round(urls[name], prompts, r * per_round, settings, session)
                results[name]["latencies"] += latencies
                results[name]["errors"] += errors
            if progress:
                progress(f"proxy round {r + 1}/{rounds} done")
    return results


def run_niced(fn: Callable[[], object], nice: int) -> object:
    """``fn()`` on a fresh thread running ``nice`` steps below this process's priority (0: here).
    Linux keeps niceness per thread, so nothing else in this process, and no process started
    before, is slowed down; the thread ends with the call, so nothing needs restoring."""
    if not nice:
        return fn()

    def lower_priority() -> None:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-load", initializer=lower_priority) as pool:
        return pool.submit(fn).result()  # re-raises fn's error here


def proxy_bench(
    prompts: list[str],
    slots: list[str],
    settings: ProxySettings,
    workdir: Path,
    *,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict, float]:
    """(``proxy`` section of bench.json, PROTEUS proxy peak RSS in MiB)."""
    workdir = workdir.resolve()  # the services run inside it: a relative path would point elsewhere
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", LITELLM_LOCAL_MODEL_COST_MAP="True")
    if settings.threads:
        env["OMP_NUM_THREADS"] = str(settings.threads)
    with ExitStack() as stack:
        upstream_port = free_port()
        upstream = Service(
            "mock upstream",
            [sys.executable, "-m", "proteus_train.bench.mock_upstream", "--port", str(upstream_port), "--delay", str(settings.delay_s),
             "--nice", str(settings.load_nice)],
            workdir / "upstream.log",
            env={**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")]))},
        )
        stack.callback(upstream.stop)
        upstream.wait_http(f"http://127.0.0.1:{upstream_port}/health", 60)
        api_base = f"http://127.0.0.1:{upstream_port}/v1"
        master_key = "sk-bench-" + secrets.token_hex(16)  # per run; loopback only
        proxies: dict[str, tuple[Service, int]] = {}
        for name, strategy in (("shuffle", "simple-shuffle"), ("proteus", "proteus")):
            port = free_port()
            config_path = workdir / f"proxy-{name}.yaml"
            config_path.write_text(yaml.safe_dump(proxy_config(strategy, api_base, slots, settings, master_key), sort_keys=False))
            command = litellm_command() + ["--config", str(config_path), "--host", "127.0.0.1", "--port", str(port)]
            service = Service(f"litellm proxy ({strategy})", command, workdir / f"proxy-{name}.log", env=env)
            stack.callback(service.stop)
            proxies[name] = (service, port)
        for name, (service, port) in proxies.items():
            if progress:
                progress(f"waiting for the {name} proxy on port {port}")
            service.wait_http(f"http://127.0.0.1:{port}/health/liveliness", settings.startup_timeout_s)
        startup_rss = {name: peak_rss_mb(service.process.pid) for name, (service, _) in proxies.items()}
        urls = {name: f"http://127.0.0.1:{port}/v1/chat/completions" for name, (_, port) in proxies.items()}
        results = run_niced(lambda: asyncio.run(_load(urls, prompts, settings, master_key, progress)), settings.load_nice)
        rss = {name: peak_rss_mb(service.process.pid) for name, (service, _) in proxies.items()}
        for name, result in results.items():
            if not result["latencies"]:
                service = proxies[name][0]
                raise RuntimeError(f"every request through the {name} proxy failed:\n{service.log_tail()}")
    stats = {name: percentiles_ms(r["latencies"]) for name, r in results.items()}
    section = {
        "p50_ratio": round(stats["proteus"]["p50_ms"] / stats["shuffle"]["p50_ms"], 4),
        "p99_ratio": round(stats["proteus"]["p99_ms"] / stats["shuffle"]["p99_ms"], 4),
        "proteus_p50_ms": stats["proteus"]["p50_ms"],
        "shuffle_p50_ms": stats["shuffle"]["p50_ms"],
        "proteus_p99_ms": stats["proteus"]["p99_ms"],
        "shuffle_p99_ms": stats["shuffle"]["p99_ms"],
        "upstream_delay_ms": settings.delay_s * 1000.0,
        "callers": settings.callers,
        "requests": {name: len(r["latencies"]) for name, r in results.items()},
        "errors": {name: r["errors"] for name, r in results.items()},
        "shuffle_rss_mb": rss["shuffle"],
        "startup_rss_mb": startup_rss,
        "load_nice": settings.load_nice,
    }
    return section, rss["proteus"]
