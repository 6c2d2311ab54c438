from __future__ import annotations

import numpy as np
import pytest

from proteus_train.data import RoutingLog, assign_splits


def make_log(n=200, tasks=None, split=None, method=""):
    rng = np.random.default_rng(1)
    return RoutingLog(
        prompts=[f"p{i}" for i in range(n)], scores=rng.random((n, 2)), costs=np.ones((n, 2)), models=["a", "b"],
        task=tasks, split=None if split is None else np.asarray(split, dtype=object), sample_ids=[str(i) for i in range(n)],
        split_method=method,
    )


def counts(log):
    return {s: int((log.split == s).sum()) for s in ("train", "val", "test")}


def test_honours_given_three_way_split():
    split = ["train"] * 5 + ["val"] * 3 + ["test"] * 2
    out = assign_splits(make_log(10, split=split, method="column"), seed=3)
    assert list(out.split) == split and out.split_method == "column:train/val/test"


def test_carves_val_from_train_only():
    split = ["train"] * 140 + ["test"] * 60
    log = make_log(200, split=split, method="files")
    out = assign_splits(log, seed=0)
    assert counts(out) == {"train": 110, "val": 30, "test": 60}  # val = 15% of all rows
    assert (out.split[140:] == "test").all()  # test untouched
    assert out.split_method == "files:train/test+val-from-train(seed=0)"
    assert log.split_method == "files" and "val" not in set(log.split)  # input not mutated


def test_only_train_given_carves_val_and_test():
    out = assign_splits(make_log(100, split=["train"] * 100, method="files"), seed=0)
    assert counts(out) == {"train": 70, "val": 15, "test": 15}
    assert out.split_method == "files:train+val,test-from-train(seed=0)"


def test_random_split_seeded_and_deterministic():
    log = make_log(200)
    a, b, c = assign_splits(log, seed=0), assign_splits(log, seed=0), assign_splits(log, seed=1)
    assert counts(a) == {"train": 140, "val": 30, "test": 30}
    assert list(a.split) == list(b.split) and list(a.split) != list(c.split)
    assert a.split_method == "random:70/15/15(seed=0)"
    assert list(assign_splits(a, seed=5).split) == list(a.split)  # idempotent once assigned


def test_random_split_stratified_by_task():
    tasks = ["big"] * 160 + ["small"] * 40
    out = assign_splits(make_log(200, tasks=tasks), seed=0, ratios=(0.5, 0.25, 0.25))
    assert counts(out) == {"train": 100, "val": 50, "test": 50}
    small = out.split[160:]
    assert (small == "val").sum() == 10 and (small == "test").sum() == 10  # proportional per task
    assert out.split_method == "random:50/25/25(seed=0,by-task)"


@pytest.mark.parametrize("ratios", [(0.7, 0.2, 0.2), (0.0, 0.5, 0.5), (0.7, 0.3), (0.8, -0.1, 0.3)])
def test_bad_ratios(ratios):
    with pytest.raises(ValueError, match="ratios must be three non-negative numbers"):
        assign_splits(make_log(10), ratios=ratios)
