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
from proteus_train.bench.random_transformer import write_random_transformer_artifact

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


def test_cuda_predictor_replays_graphs_by_default(predictors):
    cuda, cpu = predictors
    assert cuda.cuda_graphs and not cpu.cuda_graphs
    cuda.decide(PROMPTS[:3], TAUS[:3], _candidates(len(cuda.models))[:3])
    assert len(cuda.network._graphs) >= 1


@pytest.fixture(scope="module")
def transformer_artifact(tmp_path_factory):
    """The bundled artifact routing on a 2-layer BERT of MiniLM's width with random weights (its
    decisions mean nothing; graphs and eager must still agree)."""
    from transformers import BertConfig

    torch.manual_seed(0)
    config = BertConfig(hidden_size=384, num_hidden_layers=2, num_attention_heads=12, intermediate_size=1536)
    return write_random_transformer_artifact(config, tmp_path_factory.mktemp("tf") / "artifact")


@pytest.mark.parametrize(("backend", "batch"), [("fused", 1), ("fused", 3), ("fused", 37), ("hf", 5)])
def test_cuda_graphs_decide_as_eager_on_a_transformer(transformer_artifact, backend, batch):
    options = dict(device="cuda", precision="fp32", memory_cache=0, backend=backend)
    graphed = ProteusPredictor(transformer_artifact, **options)
    eager = ProteusPredictor(transformer_artifact, **options, cuda_graphs=False)
    assert graphed.encoder.backend == backend
    assert graphed.cuda_graphs and graphed.encoder._graphs is not None and eager.encoder._graphs is None
    texts = [PROMPTS[i % len(PROMPTS)] * (1 + i % 5) for i in range(batch)]  # mixed lengths: padded rows
    taus = [TAUS[i % len(TAUS)] for i in range(batch)]
    candidates = [_candidates(len(graphed.models))[i % len(PROMPTS)] for i in range(batch)]
    assert np.allclose(graphed.encoder.encode(texts), eager.encoder.encode(texts), atol=1e-4)
    on_graphs, on_eager = graphed.decide(texts, taus, candidates), eager.decide(texts, taus, candidates)
    assert [d.model for d in on_graphs] == [d.model for d in on_eager]
    assert np.allclose([d.mu for d in on_graphs], [d.mu for d in on_eager], atol=1e-4)
    assert np.allclose([d.p for d in on_graphs], [d.p for d in on_eager], atol=1e-4)
    assert len(graphed.encoder._graphs) >= 1  # replayed, not fallen back to eager


def test_graphed_heads_slice_a_batch_past_128_rows(predictors):
    cuda, cpu = predictors
    rng = np.random.default_rng(1)
    embeddings = rng.normal(size=(130, 384)).astype(np.float32)
    tau_norm = rng.uniform(size=130).astype(np.float32)
    (p_gpu, mu_gpu), (p_cpu, mu_cpu) = cuda.network.forward(embeddings, tau_norm), cpu.network.forward(embeddings, tau_norm)
    assert p_gpu.shape == (130, len(cuda.models)) and np.allclose(p_gpu, p_cpu, atol=1e-4)
    assert np.allclose(mu_gpu, mu_cpu, atol=1e-4)


def test_one_graph_serves_a_bucket_of_shapes(transformer_artifact):
    predictor = ProteusPredictor(transformer_artifact, device="cuda", precision="bf16", memory_cache=0)
    graphs = predictor.encoder._graphs
    before = len(graphs)
    predictor.encoder.encode(["a short prompt", "another short prompt", "a third one"])  # batch 3 -> bucket 4
    assert len(graphs) == before + 1
    predictor.encoder.encode(["one more short prompt", "and one", "then two", "or three"])  # batch 4, same lengths bucket
    assert len(graphs) == before + 1
    predictor.encoder.encode(["word " * 200])  # another length bucket
    assert len(graphs) == before + 2


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


@pytest.fixture(scope="module")
def cuda_trained(shared_data, tmp_path_factory):
    """A short ``proteus train --device cuda`` on RouterBench-partial: (artifact dir, cache dir)."""
    root = tmp_path_factory.mktemp("cuda-train")
    out, cache = root / "artifact", root / "cache"
    # the bundled static encoder folder: no transformer download, no distillation
    train = [sys.executable, "-m", "litellm_proteus.cli", "train", "--data", str(shared_data / "routerbench-partial"),
             "--encoder", str(DEFAULT_ARTIFACT_DIR / "encoder"), "--out", str(out), "--device", "cuda", "--steps", "64",
             "--perf-epochs", "3", "--oof-folds", "2", "--boost-steps", "20", "--cache-dir", str(cache), "--quiet"]
    done = subprocess.run(train, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, cache


def test_short_train_on_cuda(cuda_trained):
    out, _ = cuda_trained
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["training"]["device"] == "cuda"


def test_eval_on_cuda(cuda_trained, tmp_path):
    pytest.importorskip("litellm", reason="proteus eval's LiteLLM-Complexity baseline needs litellm (a dependency of the package)")
    out, cache = cuda_trained
    evaluate = [sys.executable, "-m", "litellm_proteus.cli", "eval", "--artifact", str(out), "--out", str(tmp_path / "eval"),
                "--device", "cuda", "--seeds", "1", "--bootstrap", "20", "--cache-dir", str(cache), "--quiet"]
    done = subprocess.run(evaluate, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["latency"]["device"].startswith("cuda")
