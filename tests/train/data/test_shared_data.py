"""The real shared routing logs load as documented in their PROVENANCE.md (skipped without them)."""

from __future__ import annotations

import numpy as np
import pytest

from proteus_train.data import RoutingLogWarning, assign_splits, load_logs
from proteus_train.data.common import files_sha256

pytestmark = pytest.mark.shared_data


def accuracy(log):
    return dict(zip(log.models, np.round(np.nanmean(log.scores, axis=0), 3)))


def test_routerbench_partial(shared_data):
    root = shared_data / "routerbench-partial"
    with pytest.warns(RoutingLogWarning) as record:
        log = load_logs([root])
    message = " ".join(str(w.message) for w in record)
    # 3,178 rows, 3,164 unique ids (6 across train/test); the 14 sparse copies are the duplicates
    assert "3178 rows -> 3164" in message and "28 rows share 14 duplicated sample_ids" in message
    assert "6 ids appear in more than one split" in message
    assert len(log) == 3164 and len(set(log.sample_ids)) == 3164
    assert {s: int((log.split == s).sum()) for s in ("train", "test")} == {"train": 2212, "test": 952}
    # PROVENANCE.md accuracies (over all 3,178 raw rows; dedup moves two of them by 0.001)
    documented = {
        "gpt-4-1106-preview": 0.880, "zero-one-ai/Yi-34B-Chat": 0.774, "mistralai/mixtral-8x7b-chat": 0.742,
        "gpt-3.5-turbo-1106": 0.732, "claude-v1": 0.728, "claude-instant-v1": 0.674, "meta/llama-2-70b-chat": 0.619,
        "meta/code-llama-instruct-34b-chat": 0.611, "mistralai/mistral-7b-chat": 0.584,
        "WizardLM/WizardLM-13B-V1.2": 0.568, "claude-v2": 0.551,
    }
    assert sorted(log.models) == sorted(documented)
    acc = accuracy(log)
    assert all(abs(acc[m] - a) <= 0.0015 for m, a in documented.items()), acc
    assert sorted(set(log.task)) == ["arc-challenge", "mbpp", "winogrande"]
    assert not any(p.startswith("['") for p in log.prompts)
    assert log.sha256 == files_sha256(sorted(root.glob("*.csv")))
    split = assign_splits(log, seed=0)
    assert int((split.split == "val").sum()) == round(0.15 * 3164)
    assert split.split_method == "files:train/test+val-from-train(seed=0,by-task)"
    # the evaluator re-loads manifest.data.paths (= log.paths) and must get the same rows and split
    with pytest.warns(RoutingLogWarning):
        again = assign_splits(load_logs(log.paths), seed=0)
    assert again.content_hash() == log.content_hash() and list(again.split) == list(split.split)


def test_routellm_mmlu(shared_data):
    log = load_logs([shared_data / "routellm-evals" / "mmlu"])
    assert len(log) == 14042 and len(set(log.task)) == 57
    acc = accuracy(log)
    assert acc["mistralai/Mixtral-8x7B-Instruct-v0.1"] == 0.681 and acc["gpt-4-1106-preview"] == 0.806
    assert np.isfinite(log.costs).all() and (log.costs[:, 1] > log.costs[:, 0]).all()


def test_routellm_gsm8k(shared_data):
    log = load_logs([shared_data / "routellm-evals" / "gsm8k" / "gsm8k_responses.csv"])
    acc = accuracy(log)
    assert len(log) == 1319 and acc["mistralai/Mixtral-8x7B-Instruct-v0.1"] == 0.638 and acc["gpt-4-1106-preview"] == 0.857
    with pytest.warns(RoutingLogWarning, match="skipped 12 contaminated prompts"):
        assert len(load_logs([shared_data / "routellm-evals" / "gsm8k" / "gsm8k_responses.csv"], skip_contaminated=True)) == 1307
