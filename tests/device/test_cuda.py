"""The GPU path end to end, where a CUDA device is present (skipped elsewhere): the bundled
artifact's predictor, the micro-batcher in front of it, a short ``proteus train`` and ``proteus eval``."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
from litellm_proteus.batcher import MicroBatcher
from litellm_proteus.predictor import Candidate, ProteusPredictor

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

PROMPTS = [
    "What is 17 times 23?",
    "Write a haiku about the sea at night.",
    "Explain the difference between a process and a thread in an operating system.",
    "Which of these is a prime number: 21, 27, 29, 33?",
]
TAUS = [0.70, 0.80, 0.85, 0.90]


def _candidates(n_models: int) -> list[list[Candidate]]:
    rng = np.random.default_rng(0)
    return [[Candidate(slot, float(10 ** rng.uniform(-6, -2))) for slot in range(n_models)] for _ in PROMPTS]


@pytest.fixture(scope="module")
def predictors() -> tuple[ProteusPredictor, ProteusPredictor]:
    return ProteusPredictor(device="cuda"), ProteusPredictor(device="cpu")


def test_predictor_on_cuda_decides_as_on_cpu(predictors):
    cuda, cpu = predictors
    candidates = _candidates(len(cuda.models))
    on_gpu, on_cpu = cuda.decide(PROMPTS, TAUS, candidates), cpu.decide(PROMPTS, TAUS, candidates)
    assert [d.model for d in on_gpu] == [d.model for d in on_cpu]
    assert np.allclose([d.mu for d in on_gpu], [d.mu for d in on_cpu], atol=1e-4)


def test_batcher_answers_each_caller_from_the_cuda_predictor(predictors):
    cuda, _ = predictors
    candidates = _candidates(len(cuda.models))
    expected = [d.model for d in cuda.decide(PROMPTS, TAUS, candidates)]
    batcher = MicroBatcher(
        lambda items: cuda.decide([i[0] for i in items], [i[1] for i in items], [i[2] for i in items]),
        max_batch=4,
        max_wait_ms=20,
    )
    try:
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            futures = [pool.submit(lambda i=i: batcher.submit_future((PROMPTS[i], TAUS[i], candidates[i])).result(60))
                       for i in range(len(PROMPTS))]
            answers = [f.result(60).model for f in futures]
    finally:
        batcher.close()
    assert answers == expected


def test_short_train_and_eval_on_cuda(shared_data, tmp_path):
    out, cache = tmp_path / "artifact", tmp_path / "cache"
    # the bundled static encoder folder: no transformer download, no distillation
    train = [sys.executable, "-m", "litellm_proteus.cli", "train", "--data", str(shared_data / "routerbench-partial"),
             "--encoder", str(DEFAULT_ARTIFACT_DIR / "encoder"), "--out", str(out), "--device", "cuda", "--steps", "64", "--perf-epochs", "3", "--oof-folds", "2",
             "--boost-steps", "20", "--cache-dir", str(cache), "--quiet"]
    done = subprocess.run(train, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["training"]["device"] == "cuda"
    evaluate = [sys.executable, "-m", "litellm_proteus.cli", "eval", "--artifact", str(out), "--out", str(tmp_path / "eval"),
                "--device", "cuda", "--seeds", "1", "--bootstrap", "20", "--cache-dir", str(cache), "--quiet"]
    done = subprocess.run(evaluate, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["latency"]["device"].startswith("cuda")
