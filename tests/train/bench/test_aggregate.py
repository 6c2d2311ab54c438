"""Folding repeated benchmark runs: medians per cell, every run kept."""

from __future__ import annotations

from proteus_train.bench.aggregate import median_proxy, median_rows


def test_median_rows_matches_cells_by_identity_not_position():
    runs = [
        [{"tokens": 32, "batch": 1, "p50_ms": 10.0, "qps": 100.0, "n": 5}, {"tokens": 32, "batch": 8, "p50_ms": 40.0, "qps": 200.0, "n": 2}],
        [{"tokens": 32, "batch": 8, "p50_ms": 60.0, "qps": 130.0, "n": 2}, {"tokens": 32, "batch": 1, "p50_ms": 30.0, "qps": 33.0, "n": 5}],
        [{"tokens": 32, "batch": 1, "p50_ms": 20.0, "qps": 50.0, "n": 5}, {"tokens": 32, "batch": 8, "p50_ms": 50.0, "qps": 160.0, "n": 2}],
    ]
    merged = median_rows(runs, ("tokens", "batch"))
    assert [(r["batch"], r["p50_ms"], r["qps"], r["n"]) for r in merged] == [(1, 20.0, 50.0, 15), (8, 50.0, 160.0, 6)]
    assert merged[0]["p50_ms_runs"] == [10.0, 30.0, 20.0]


def test_a_single_run_is_returned_unchanged():
    run = [{"callers": 1, "p50_ms": 3.0, "qps": 9.0}]
    assert median_rows([run], ("callers",)) == run
    assert median_proxy([{"p50_ratio": 1.01}]) == {"p50_ratio": 1.01}


def test_median_proxy_keeps_each_runs_ratio():
    runs = [{"p50_ratio": 1.03, "p99_ratio": 1.05, "tokens": 128}, {"p50_ratio": 1.01, "p99_ratio": 1.02, "tokens": 128},
            {"p50_ratio": 1.02, "p99_ratio": 1.10, "tokens": 128}]
    merged = median_proxy(runs)
    assert merged["p50_ratio"] == 1.02 and merged["p99_ratio"] == 1.05 and merged["tokens"] == 128
    assert merged["p50_ratio_runs"] == [1.03, 1.01, 1.02]
