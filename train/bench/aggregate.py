"""Repeated benchmark runs folded into one: per cell, the median of each timing over the runs.

A shared host moves single runs by up to ~20 %; ``proteus bench --repeat N`` runs every section N
times and reports medians, keeping each run's p50 and qps (``p50_ms_runs``, ``qps_runs``; for the
proxy, ``p50_ratio_runs``) so the spread stays visible.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

TIMING_KEYS = ("p50_ms", "p95_ms", "p99_ms", "qps", "mean_batch")
PROXY_KEYS = ("p50_ratio", "p99_ratio", "proteus_p50_ms", "shuffle_p50_ms", "proteus_p99_ms", "shuffle_p99_ms")


def median_rows(runs: Sequence[Sequence[dict]], identity: Sequence[str]) -> list[dict]:
    """Rows of the first run with every timing replaced by its median over ``runs`` (rows are
    matched on the ``identity`` fields; ``n`` becomes the total number of timed calls)."""
    if len(runs) == 1:
        return [dict(row) for row in runs[0]]
    merged = []
    for row in runs[0]:
        key = tuple(row[k] for k in identity)
        same = [r for run in runs for r in run if tuple(r[k] for k in identity) == key]
        out = dict(row)
        for field in TIMING_KEYS:
            values = [r[field] for r in same if field in r]
            if values:
                out[field] = round(statistics.median(values), 3)
        out["p50_ms_runs"] = [r["p50_ms"] for r in same]
        out["qps_runs"] = [r["qps"] for r in same]
        if "n" in row:
            out["n"] = sum(r.get("n", 0) for r in same)
        merged.append(out)
    return merged


def median_proxy(runs: Sequence[dict]) -> dict:
    """The proxy section with its latencies and ratios replaced by medians over ``runs``."""
    if len(runs) == 1:
        return dict(runs[0])
    out = dict(runs[0])
    for field in PROXY_KEYS:
        values = [r[field] for r in runs if r.get(field) is not None]
        if values:
            out[field] = round(statistics.median(values), 4)
    out["p50_ratio_runs"] = [r["p50_ratio"] for r in runs]
    return out
