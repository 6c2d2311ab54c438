"""``scripts/train_scale.py``: scaled logs built, one training per factor, time and memory in JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_scale.py"
MODELS = {"big-model": (0.9, 2e-3), "small-model": (0.6, 5e-5)}


def write_split(path: Path, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        row = {"sample_id": f"{path.stem}-{i}", "prompt": str([f"Question {i} of {path.stem}: what is {i} + {seed}?"]),
               "eval_name": "sums"}
        for model, (acc, cost) in MODELS.items():
            row[model] = float(rng.random() < acc)
            row[f"{model}|total_cost"] = cost
        rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)


def test_two_scales_are_trained_and_reported(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    write_split(source / "sums_train.csv", 70, seed=0)
    write_split(source / "sums_test.csv", 20, seed=1)
    work = tmp_path / "work"
    command = [sys.executable, str(SCRIPT), "--source", str(source), "--factors", "1,2", "--work", str(work), "--",
               "--steps", "40", "--perf-epochs", "3", "--oof-folds", "2", "--boost-steps", "10"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((work / "train_scale.json").read_text())
    one, two = result["runs"]
    assert (one["factor"], two["factor"]) == (1, 2)
    assert two["rows"] == 2 * one["rows"] == 180
    assert two["split"] == {k: 2 * v for k, v in one["split"].items()}
    for run in (one, two):
        assert run["wall_s"] > 0 and run["cpu_s"] > 0 and run["max_rss_mb"] > 50
        assert {"encode_s", "performance_head_s", "ppo_s", "total_s"} <= set(run["timings_s"])
        assert len(run["loadavg_before"]) == 3
    assert "| 2x | 180 |" in done.stdout
