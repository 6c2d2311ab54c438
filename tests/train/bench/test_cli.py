"""``proteus bench`` at tiny settings: the JSON schema (never the timings)."""

from __future__ import annotations

import json
import math

import pytest

from litellm_proteus.cli import main
from litellm_proteus.encoder_transformer import resolve_precision

TABLE3_KEYS = {"batch", "tokens", "p50_ms", "p95_ms", "p99_ms", "qps"}
CONCURRENCY_KEYS = {"callers", "p50_ms", "p99_ms", "qps"}
PROXY_KEYS = {"p50_ratio", "p99_ratio", "proteus_p50_ms", "shuffle_p50_ms"}


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def check_common(result: dict, batches: list[int], tokens: list[int], callers: list[int]) -> None:
    assert isinstance(result["device"], str) and result["device"].startswith("cpu")
    assert {(r["batch"], r["tokens"]) for r in result["table3"]} == {(b, t) for b in batches for t in tokens}
    for row in result["table3"]:
        assert TABLE3_KEYS <= set(row)
        assert all(positive(row[k]) for k in ("p50_ms", "p95_ms", "p99_ms", "qps"))
        assert row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
    assert [r["callers"] for r in result["concurrency"]] == callers
    for row in result["concurrency"]:
        assert CONCURRENCY_KEYS <= set(row) and all(positive(row[k]) for k in CONCURRENCY_KEYS)
        assert 1 <= row["mean_batch"] <= row["callers"]
    assert positive(result["rss_mb"])
    assert positive(result["cache_hit"]["p50_ms"])


def test_quick_bench_without_proxy(make_artifact, tmp_path, capsys):
    artifact = make_artifact()
    out = tmp_path / "out"
    code = main(["bench", "--artifact", str(artifact), "--out", str(out), "--quick", "--skip-proxy", "--data", "none",
                 "--device", "cpu", "--batches", "1,2", "--callers", "1,3"])
    assert code == 0
    result = json.loads((out / "bench.json").read_text())
    check_common(result, [1, 2], [32, 128], [1, 3])
    assert result["proxy"] is None and result["rss_source"] == "bench process"
    assert result["prompts_source"].startswith("bundled")
    assert result["settings"]["backend"] == "fused"
    assert result["settings"]["max_batch_tokens"] == 2048  # the CPU default
    assert result["settings"]["precision"] == resolve_precision("auto", "cpu")  # the plugin's default
    assert set(result["settings"]["openmp"]) == {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS"}
    printed = capsys.readouterr().out
    assert "decision latency (table 3)" in printed and "through the micro-batcher" in printed


def test_reference_comparison_reports_quality(make_artifact, tmp_path):
    out = tmp_path / "out"
    code = main(["bench", "--artifact", str(make_artifact()), "--out", str(out), "--quick", "--skip-proxy",
                 "--skip-concurrency", "--data", "none", "--device", "cpu", "--batches", "1", "--tokens", "32",
                 "--precision", "bf16", "--compare-reference", "--max-batch-tokens", "0"])
    assert code == 0
    result = json.loads((out / "bench.json").read_text())
    quality = result["quality"]
    assert quality["same_as_reference"] is False and quality["n_prompts"] >= 16
    assert 0.99 < quality["cosine_mean"] <= 1.0001 and 0.0 <= quality["decision_agreement"] <= 1.0
    assert result["concurrency"] == [] and result["settings"]["precision"] == "bf16"
    assert result["settings"]["max_batch_tokens"] == 0  # the flag reaches the encoder


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batches", "1,x"], "--batches takes comma-separated positive integers"),
        (["--tokens", "0"], "--tokens takes comma-separated positive integers"),
        (["--precision", "fp8"], "invalid choice: 'fp8'"),
    ],
)
def test_bad_flags_name_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(["bench", *argv])
    assert message in capsys.readouterr().err


def test_missing_artifact_is_a_clear_error_and_leaves_no_out_folder(tmp_path, capsys):
    code = main(["bench", "--artifact", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), "--quick", "--skip-proxy"])
    err = capsys.readouterr().err
    assert code == 2 and "error: artifact directory" in err and "does not exist" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cell-seconds", "nan"], "error: --cell-seconds must be a number of seconds >= 0; got nan"),
        (["--repeat", "0"], "error: --repeat must be >= 1; got 0"),
        (["--data", "."], "error: --data . holds no routerbench-partial/*.csv"),  # a wrong folder: not the bundled prompts
    ],
)
def test_bad_values_are_refused_naming_the_flag_before_any_work(argv, message, tmp_path, capsys):
    code = main(["bench", "--out", str(tmp_path / "o"), "--quick", "--skip-proxy", *argv])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.e2e
def test_quick_bench_through_real_proxies(make_artifact, tmp_path, monkeypatch):
    """Mock upstream + two real ``litellm --config`` proxies (proteus, simple-shuffle) on loopback;
    ``--out`` relative to the working directory, as a user types it."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    code = main(["bench", "--artifact", str(make_artifact()), "--out", "out", "--quick", "--data", "none",
                 "--device", "cpu", "--batches", "1", "--tokens", "32", "--callers", "2", "--threads", "1",
                 "--load-nice", "2"])
    assert code == 0
    result = json.loads((out / "bench.json").read_text())
    check_common(result, [1], [32], [2])
    proxy = result["proxy"]
    assert proxy["load_nice"] == 2  # client and mock upstream ran below the proxies' priority
    assert PROXY_KEYS <= set(proxy) and all(positive(proxy[k]) for k in PROXY_KEYS)
    assert proxy["requests"] == {"shuffle": 8, "proteus": 8} and proxy["errors"] == {"shuffle": 0, "proteus": 0}
    # every request was answered by the mock upstream, so neither p50 can beat its delay
    assert proxy["proteus_p50_ms"] >= proxy["upstream_delay_ms"] and proxy["shuffle_p50_ms"] >= proxy["upstream_delay_ms"]
    assert result["rss_source"] == "proteus proxy worker" and result["rss_mb"] > 100
    # start-up figures are taken before any request: never above the same worker's peak after the run
    assert 100 < proxy["startup_rss_mb"]["proteus"] <= result["rss_mb"]
    assert 100 < proxy["startup_rss_mb"]["shuffle"] <= proxy["shuffle_rss_mb"]
    log = (out / "proxy" / "proxy-proteus.log").read_text()
    assert '"tau_source"' in log or "proteus" in log  # the PROTEUS proxy logged its decisions


def test_repeat_reports_medians_and_every_run(make_artifact, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["bench", "--artifact", str(make_artifact()), "--out", str(out), "--quick", "--skip-proxy", "--data", "none",
                 "--device", "cpu", "--batches", "1", "--tokens", "32", "--callers", "2", "--repeat", "3"])
    assert code == 0
    result = json.loads((out / "bench.json").read_text())
    assert result["repeat"] == 3
    check_common(result, [1], [32], [2])
    for row in (*result["table3"], *result["concurrency"]):
        assert len(row["p50_ms_runs"]) == 3 and len(row["qps_runs"]) == 3
        assert min(row["p50_ms_runs"]) <= row["p50_ms"] <= max(row["p50_ms_runs"])  # the median of the runs
    assert "medians of 3 runs" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["-1", "20"])
def test_load_nice_out_of_range_names_the_flag(value, capsys):
    assert main(["bench", "--load-nice", value, "--skip-proxy"]) == 2
    assert "error: --load-nice must be 0-19" in capsys.readouterr().err


# LiteLLM made unimportable in a fresh interpreter: ``import litellm`` raises ImportError, as on a
# host where it is not installed.
WITHOUT_LITELLM = "import sys; sys.modules['litellm'] = None; from litellm_proteus.cli import main; sys.exit(main(sys.argv[1:]))"


def test_quick_bench_without_litellm_skips_only_the_proxy(make_artifact, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out"
    argv = ["bench", "--artifact", str(make_artifact()), "--out", str(out), "--quick", "--data", "none",
            "--device", "cpu", "--batches", "1", "--tokens", "32", "--callers", "1,2", "--prompt-tokens", "litellm"]
    done = subprocess.run([sys.executable, "-c", WITHOUT_LITELLM, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "bench.json").read_text())
    check_common(result, [1], [32], [1, 2])
    assert result["proxy"] is None and "LiteLLM is not installed" in result["skipped"]["proxy"]
    # --prompt-tokens sets the proxies' counter only: the concurrency engine counts chars, LiteLLM or not
    assert {r["token_counter"] for r in result["concurrency"]} == {"chars"}
    assert "proxy: skipped (LiteLLM is not installed" in done.stdout
