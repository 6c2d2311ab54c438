"""The decision-log benchmark runs at a tiny size and writes its JSON."""

from __future__ import annotations

import json

from proteus_train.bench.decision_log import main


def test_the_benchmark_writes_its_figures(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--records", "200"]) == 0
    result = json.loads((tmp_path / "decision_log_bench.json").read_text())
    assert result["records"] == 200 and result["dropped"] == 0 and result["redis"] is False
    assert 0 < result["submit_us"]["p50"] <= result["submit_us"]["p99"]
    assert result["drain_records_per_s"] > 0 and result["bytes_per_decision"] > 100
    assert "records/s" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["decision_log_bench.json"]  # scratch log removed
