"""Timing helpers and the Table 3 measurement (decision latency/throughput per batch and length).

A "decision" is ``ProteusPredictor.decide``: tokenise, encode, both heads, eq. 2 over every slot of
the artifact: what the proxy's worker thread runs per batch.  Each call gets prompts not seen
before in its cell (the pool rotates), and the benchmark's predictor has no embedding cache, so no
measured call is a cache hit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from litellm_proteus.predictor import Candidate, ProteusPredictor

BENCH_TAUS = (0.78, 0.85, 0.9)  # the plugin's default tiers: economy, standard, premium


@dataclass(frozen=True)
class CellBudget:
    """How long one measurement cell runs: at least ``min_iters`` timed calls, then more until
    ``seconds`` have passed or ``max_iters`` calls were made (every loop bounded)."""

    seconds: float = 3.0
    min_iters: int = 3
    max_iters: int = 200
    warmup: int = 0


def percentiles_ms(samples_s: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(samples_s, dtype=np.float64) * 1000.0
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {"p50_ms": round(float(p50), 3), "p95_ms": round(float(p95), 3), "p99_ms": round(float(p99), 3)}


def time_calls(fn: Callable[[int], object], budget: CellBudget) -> list[float]:
    """Seconds per call of ``fn(i)`` (i = call number, so callers can rotate inputs)."""
    for i in range(budget.warmup):
        fn(-1 - i)
    samples: list[float] = []
    start = time.perf_counter()
    for i in range(budget.max_iters):
        if i >= budget.min_iters and time.perf_counter() - start >= budget.seconds:
            break
        t0 = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - t0)
    return samples


def bench_candidates(predictor: ProteusPredictor) -> list[Candidate]:
    """Every trained slot as a candidate, with per-call costs spread over the artifact's cost range."""
    norm = predictor.costs
    costs = np.logspace(norm.low, norm.high, len(predictor.models))
    return [Candidate(slot, float(c)) for slot, c in enumerate(costs)]


def table3(
    predictor: ProteusPredictor,
    pools: dict[int, list[str]],
    batches: Sequence[int],
    budget: CellBudget,
    *,
    progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Rows ``{batch, tokens, p50_ms, p95_ms, p99_ms, qps, n}`` for every (tokens, batch) cell.

    ``qps`` = decisions per second over the timed calls (batch * calls / total time).  Two untimed
    calls per prompt length (batch 1 and 8) warm the kernels first; cells themselves are not
    warmed, so the default grid (batch 128 x 512 tokens included) fits in minutes on 2 cores."""
    candidates = bench_candidates(predictor)
    rows = []
    for tokens, pool in pools.items():
        for warm in (1, 8):
            predictor.decide(pool[-warm:], [BENCH_TAUS[0]] * warm, [candidates] * warm)
        for batch in batches:
            calls_per_pool = max(1, len(pool) // batch)

            def call(i: int, batch: int = batch, pool: list[str] = pool, per: int = calls_per_pool) -> None:
                start = (i % per) * batch
                texts = [pool[(start + j) % len(pool)] for j in range(batch)]
                taus = [BENCH_TAUS[(start + j) % len(BENCH_TAUS)] for j in range(batch)]
                predictor.decide(texts, taus, [candidates] * batch)

            samples = time_calls(call, budget)
            row = {"batch": batch, "tokens": tokens, **percentiles_ms(samples)}
            row["qps"] = round(batch * len(samples) / sum(samples), 2)
            row["n"] = len(samples)
            rows.append(row)
            if progress:
                progress(f"table3 tokens={tokens:<4d} batch={batch:<4d} p50={row['p50_ms']:.1f} ms qps={row['qps']:.1f}")
    return rows


def cache_hit(predictor: ProteusPredictor, prompt: str, budget: CellBudget) -> dict:
    """Batch-1 latency of a prompt already in the encoder's in-memory LRU (hash + heads)."""
    from litellm_proteus.encoder_cache import MemoryLRU

    encoder = predictor.encoder
    saved, encoder.memory = encoder.memory, MemoryLRU(16)
    candidates = bench_candidates(predictor)
    try:
        predictor.decide([prompt], [BENCH_TAUS[1]], [candidates])  # fills the cache
        samples = time_calls(lambda i: predictor.decide([prompt], [BENCH_TAUS[1]], [candidates]), budget)
    finally:
        encoder.memory = saved
    return {"batch": 1, **percentiles_ms(samples), "n": len(samples)}
