"""Decisions through the plugin's micro-batcher under N concurrent callers.

This is the proxy's own decision path without HTTP: ``DecisionEngine.decide`` (prompt-token
counting, live-price costs, ``ProteusPredictor.decide``) driven by ``MicroBatcher`` with the
plugin's default batching settings, and N asyncio callers that each submit one request, await the
decision, and submit the next until the time budget is spent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from litellm_proteus.batcher import MicroBatcher
from litellm_proteus.model_thread import run_on_model_thread
from litellm_proteus.config import ProteusConfig
from litellm_proteus.engine import DecisionEngine, DecisionRequest
from litellm_proteus.predictor import ProteusPredictor

from .measure import BENCH_TAUS, percentiles_ms

BENCH_GROUP = "proteus-auto"


def bench_model_list(slots: Sequence[str], api_base: str | None = None, api_key: str = "sk-bench") -> list[dict]:
    """One deployment per trained slot in one PROTEUS group, with explicit per-token prices
    (log-spaced over ~3 orders of magnitude, the spread of RouterBench's models)."""
    n = max(1, len(slots) - 1)
    deployments = []
    for i, slot in enumerate(slots):
        price = 10 ** (-7.5 + 3.0 * i / n)
        params: dict = {"model": f"openai/{slot}", "input_cost_per_token": price, "output_cost_per_token": 3 * price}
        if api_base:
            params.update(api_base=api_base, api_key=api_key)
        deployments.append(
            {"model_name": BENCH_GROUP, "litellm_params": params, "model_info": {"id": f"bench-{i}", "proteus_model": slot}}
        )
    return deployments


def _requests(engine: DecisionEngine, pool: list[str]) -> list[DecisionRequest]:
    scored, problems = engine.score_all(bench_model_list(engine.slots))
    if problems:
        raise RuntimeError("benchmark deployments cannot be scored: " + "; ".join(problems))
    return [
        DecisionRequest(text, [{"role": "user", "content": text}], BENCH_TAUS[i % len(BENCH_TAUS)], scored)
        for i, text in enumerate(pool)
    ]


async def _drive(batcher: MicroBatcher, requests: list[DecisionRequest], callers: int, seconds: float, min_per_caller: int):
    latencies: list[float] = []
    counter = iter(range(10**9))

    async def caller() -> None:
        deadline = time.perf_counter() + seconds
        done = 0
        while done < min_per_caller or time.perf_counter() < deadline:
            request = requests[next(counter) % len(requests)]
            t0 = time.perf_counter()
            await batcher.submit(request)
            latencies.append(time.perf_counter() - t0)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return latencies, time.perf_counter() - start


def concurrency(
    predictor: ProteusPredictor,
    pool: list[str],
    callers_list: Sequence[int],
    *,
    seconds: float = 4.0,
    min_per_caller: int = 1,
    config: ProteusConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Rows ``{callers, p50_ms, p95_ms, p99_ms, qps, n, mean_batch, token_counter}`` (qps = decisions per
    wall second; token_counter: how prompt tokens were counted, ``litellm_proteus/token_count.py``)."""
    config = config or ProteusConfig()
    engine = DecisionEngine(predictor.manifest, config, predictor=predictor)
    requests = _requests(engine, pool)
    batcher = MicroBatcher(  # as the plugin runs it: batches gathered by the batcher, torch work on the model thread
        lambda batch: run_on_model_thread(engine.decide, batch),
        max_batch=config.batching.max_batch,
        max_wait_ms=config.batching.max_wait_ms,
    )
    rows = []
    try:
        asyncio.run(_drive(batcher, requests, 1, 0.0, 2))  # warm-up: worker thread, token counter
        for callers in callers_list:
            batcher.batch_sizes = []
            latencies, wall = asyncio.run(_drive(batcher, requests, callers, seconds, min_per_caller))
            sizes = batcher.batch_sizes or [1]
            row = {"callers": callers, **percentiles_ms(latencies)}
            row.update(qps=round(len(latencies) / wall, 2), n=len(latencies), mean_batch=round(sum(sizes) / len(sizes), 2),
                       token_counter=engine.token_counter_name)
            rows.append(row)
            if progress:
                progress(
                    f"batcher callers={callers:<4d} p50={row['p50_ms']:.1f} ms p99={row['p99_ms']:.1f} ms "
                    f"qps={row['qps']:.1f} mean batch={row['mean_batch']}"
                )
    finally:
        batcher.close()
    return rows
