"""``scripts/scale_data.py``: a routing log replicated with distinct prompts, splits and outcomes kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from proteus_train.data import assign_splits, load_logs

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "scale_data.py"
pytestmark = pytest.mark.filterwarnings("ignore::proteus_train.data.RoutingLogWarning")


def scale(source: Path, factor: int, out: Path) -> Path:
    done = subprocess.run([sys.executable, str(SCRIPT), "--source", str(source), "--factor", str(factor), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def base_id(sample_id: str) -> str:
    return sample_id.split("#")[0]


def test_replicas_have_distinct_prompts_source_splits_and_copied_outcomes(routerbench_dir, tmp_path):
    source = assign_splits(load_logs([routerbench_dir]), seed=0)
    assert {"train", "val", "test"} <= set(source.split.tolist())  # the fixture exercises every split
    scaled = assign_splits(load_logs([scale(routerbench_dir, 4, tmp_path / "4x")]), seed=0)

    assert len(scaled) == 4 * len(source)  # the loader's clean-up (all-NaN row, duplicate ids) acts per replica
    assert len(set(scaled.prompts)) == len(scaled)
    row_of = {sid: i for i, sid in enumerate(source.sample_ids)}
    for j, sid in enumerate(scaled.sample_ids):
        i = row_of[base_id(sid)]
        assert scaled.split[j] == source.split[i]
        np.testing.assert_array_equal(scaled.scores[j], source.scores[i])
        np.testing.assert_array_equal(scaled.costs[j], source.costs[i])
        np.testing.assert_array_equal(scaled.output_tokens[j], source.output_tokens[i])
        assert source.prompts[i].split("\n\n")[-1] in scaled.prompts[j]  # the source text, after a preamble
    held_out = {base_id(s) for s, split in zip(scaled.sample_ids, scaled.split) if split == "test"}
    trained = {base_id(s) for s, split in zip(scaled.sample_ids, scaled.split) if split == "train"}
    assert not held_out & trained


def test_factor_one_is_the_source_and_output_is_deterministic(routerbench_dir, tmp_path):
    source = assign_splits(load_logs([routerbench_dir]), seed=0)
    once = scale(routerbench_dir, 1, tmp_path / "a")
    same = assign_splits(load_logs([once]), seed=0)
    assert same.prompts == source.prompts and same.sample_ids == source.sample_ids
    np.testing.assert_array_equal(same.split, source.split)
    np.testing.assert_array_equal(same.scores, source.scores)

    first, second = scale(routerbench_dir, 3, tmp_path / "b"), scale(routerbench_dir, 3, tmp_path / "c")
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir()) and "tasks_train.csv" in names
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_bad_factor_is_an_error(routerbench_dir, tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--source", str(routerbench_dir), "--factor", "0", "--out",
                           str(tmp_path / "x")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "error: --factor must be an integer >= 1" in done.stderr
