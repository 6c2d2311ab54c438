"""The encoder's speed options: exact ones (fused backend, LRU, windowed tokenisation) must not move
embeddings; numeric ones (bf16, int8) stay close; bad values are named."""

from __future__ import annotations

import types

import numpy as np
import pytest

import litellm_proteus.encoder as encoder_module
import litellm_proteus.encoder_transformer as transformer_module
from litellm_proteus.encoder import open_encoder
from litellm_proteus.encoder_cache import MemoryLRU
from litellm_proteus.encoder_transformer import fused_supported, native_layer_available, resolve_precision
from proteus_train.bench.prompts import load_prompts


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return load_prompts(None)[0][:24]


@pytest.fixture(scope="module")
def hf_encoder():
    return open_encoder(device="cpu", backend="hf")


@pytest.fixture(scope="module")
def reference(hf_encoder, prompts):
    return hf_encoder.encode(prompts)


def test_default_backend_is_the_transformers_module(hf_encoder):
    assert open_encoder.__kwdefaults__["backend"] == "hf"
    assert hf_encoder.backend == "hf" and hf_encoder.fingerprint.endswith("pooling=mean-l2")


def test_fused_backend_matches_transformers(hf_encoder, prompts, reference):
    fused = open_encoder(device="cpu", backend="auto", batch_size=5)  # uneven chunks: padded batches
    assert fused.backend == "fused"
    assert np.abs(fused.encode(prompts) - reference).max() < 1e-5
    one = fused.encode(prompts[:1])  # batch of one: the unpadded path
    assert np.abs(one - reference[:1]).max() < 1e-5
    assert fused.fingerprint == hf_encoder.fingerprint  # exact to fp tolerance: shares the disk cache


def test_fused_refuses_unsupported_architectures():
    config = types.SimpleNamespace(model_type="deberta-v2", position_embedding_type="absolute", hidden_act="gelu")
    assert "model_type" in fused_supported(types.SimpleNamespace(config=config))
    config = types.SimpleNamespace(model_type="bert", position_embedding_type="relative_key", hidden_act="gelu")
    assert "position_embedding_type" in fused_supported(types.SimpleNamespace(config=config))
    config = types.SimpleNamespace(model_type="bert", position_embedding_type="absolute", hidden_act="gelu")
    assert fused_supported(types.SimpleNamespace(config=config)) is None


def test_memory_lru_is_exact_and_bounded(prompts, reference):
    encoder = open_encoder(device="cpu", backend="fused", memory_cache=8)
    first = encoder.encode(prompts[:6])
    assert len(encoder.memory) == 6 and encoder.memory.hits == 0
    again = encoder.encode(prompts[:6])
    assert encoder.memory.hits == 6
    np.testing.assert_array_equal(again, first)
    assert np.abs(again - reference[:6]).max() < 1e-5
    encoder.encode(prompts[6:10])
    assert len(encoder.memory) == 8  # bounded


def test_memory_lru_evicts_least_recent():
    lru = MemoryLRU(2)
    lru.put("a", np.zeros(1))
    lru.put("b", np.ones(1))
    assert lru.get("a") is not None  # a becomes most recent
    lru.put("c", np.ones(1))
    assert lru.get("b") is None and lru.get("a") is not None and lru.get("c") is not None


@pytest.mark.parametrize("truncation", ["tail", "head", "head_tail"])
def test_windowed_tokenisation_equals_full(hf_encoder, prompts, truncation):
    encoder = open_encoder(device="cpu", max_tokens=32, truncation=truncation)
    budget = encoder.max_tokens - len(encoder._prefix) - len(encoder._suffix)
    long_texts = ["\n".join(prompts[i:] + prompts[:i]) for i in range(0, 24, 3)]
    assert all(encoder._windowed_ids(t, budget) is not None for t in long_texts)  # the fast path ran
    full = encoder.tokenizer(long_texts, add_special_tokens=False)["input_ids"]
    assert encoder._token_ids(long_texts) == [encoder._truncate(seq, budget) for seq in full]
    assert encoder._windowed_ids("short text", budget) is None
    no_spaces = "x" * 10_000  # no whitespace to cut at: falls back to the whole text
    assert encoder._windowed_ids(no_spaces, budget) is None


def test_bf16_and_int8_stay_close(prompts, reference):
    bf16 = open_encoder(device="cpu", backend="fused", precision="bf16")
    assert "precision=bf16" in bf16.fingerprint
    assert ((bf16.encode(prompts) * reference).sum(1)).min() > 0.999
    int8 = open_encoder(device="cpu", backend="fused", quantize="int8")
    assert "quantize=int8" in int8.fingerprint
    assert ((int8.encode(prompts) * reference).sum(1)).min() > 0.9


@pytest.mark.skipif(not native_layer_available(), reason="this torch has no fused encoder-layer kernel")
def test_bf16_runs_the_native_layer_and_matches_on_padded_batches(prompts, reference):
    encoder = open_encoder(device="cpu", backend="fused", precision="bf16", batch_size=3)  # padded batches
    assert encoder._runner.native
    assert ((encoder.encode(prompts) * reference).sum(1)).min() > 0.999
    single = open_encoder(device="cpu", backend="fused", precision="bf16", batch_size=1)  # unpadded path
    assert ((single.encode(prompts[:4]) * reference[:4]).sum(1)).min() > 0.999


def test_native_layer_is_dropped_when_the_probe_disagrees(monkeypatch):
    monkeypatch.setattr(transformer_module, "fused_probe_error", lambda *a: 1.0 if a[1].native else 0.0)
    encoder = open_encoder(device="cpu", backend="fused", precision="bf16")
    assert encoder.backend == "fused" and not encoder._runner.native


def test_fine_tuning_refuses_a_cast_encoder():
    with pytest.raises(ValueError, match="encode_tensor .fine-tuning. needs precision 'fp32'"):
        open_encoder(device="cpu", backend="fused", precision="bf16").encode_tensor(["a prompt"])


def test_fp32_keeps_the_python_layer():
    assert not open_encoder(device="cpu", backend="fused")._runner.native


def test_auto_precision_is_bf16_only_on_cpus_with_native_bf16(monkeypatch):
    monkeypatch.setattr(transformer_module, "cpu_has_native_bf16", lambda: False)
    assert resolve_precision("auto", "cpu") == "fp32"
    monkeypatch.setattr(transformer_module, "cpu_has_native_bf16", lambda: True)
    assert resolve_precision("auto", "cpu") == "bf16"
    assert resolve_precision("auto", "cuda") == "fp16"
    assert resolve_precision("fp32", "cpu") == "fp32"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"precision": "fp8"}, "precision must be one of"),
        ({"precision": "fp16"}, "precision 'fp16' needs device 'cuda'"),
        ({"quantize": "int4"}, "quantize must be one of"),
        ({"quantize": "int8", "precision": "bf16"}, "quantize 'int8' needs device 'cpu' and precision 'fp32'"),
        ({"backend": "onnx"}, "backend must be one of"),
        ({"memory_cache": -1}, "memory_cache must be >= 0"),
        ({"max_batch_tokens": -1}, "max_batch_tokens must be >= 0"),
    ],
)
def test_bad_options_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        open_encoder(device="cpu", **kwargs)


def test_cpu_batches_are_bucketed_by_length(hf_encoder, monkeypatch, prompts, reference):
    lengths = [10, 12, 40, 41, 300, 301]
    assert hf_encoder._buckets(list(range(6)), lengths) == [[0, 1], [2, 3], [4, 5]]
    monkeypatch.setattr(hf_encoder, "batch_size", 2)
    assert hf_encoder._buckets([0, 1, 2], [10, 10, 10]) == [[0, 1], [2]]
    monkeypatch.setattr(hf_encoder, "batch_size", 32)
    monkeypatch.setattr(hf_encoder, "device", "cuda")  # only the bucketing rule reads it here
    assert hf_encoder._buckets(list(range(6)), lengths) == [list(range(6))]
    monkeypatch.undo()
    mixed = [p[:40] for p in prompts[:6]] + prompts[6:12]  # short and long in one call: several buckets
    expected = np.concatenate([encoder_module.Encoder.encode(hf_encoder, [p]) for p in mixed])
    assert np.abs(hf_encoder.encode(mixed) - expected).max() < 1e-5


def test_cpu_forward_passes_are_cut_into_equal_parts_of_about_the_token_budget(hf_encoder, monkeypatch, prompts):
    assert hf_encoder.max_batch_tokens == encoder_module.CPU_BATCH_TOKENS == 2048
    order = list(range(32))
    assert [len(c) for c in hf_encoder._buckets(order, [130] * 32)] == [16, 16]  # not 15 + 15 + 2
    assert [len(c) for c in hf_encoder._buckets(order, [258] * 32)] == [8, 8, 8, 8]
    assert hf_encoder._buckets(order, [34] * 32) == [order]  # 1,088 tokens: one pass
    assert hf_encoder._buckets([0], [5000]) == [[0]]  # one prompt over the budget still runs
    assert [len(c) for c in hf_encoder._buckets(list(range(27)), [130] * 27)] == [14, 13]
    monkeypatch.setattr(hf_encoder, "max_batch_tokens", 0)  # 0 = no limit
    assert hf_encoder._buckets(order, [258] * 32) == [order]
    monkeypatch.setattr(hf_encoder, "max_batch_tokens", 64)  # cut into passes of ~2 rows: same embeddings
    whole = encoder_module.Encoder.encode(hf_encoder, prompts[:8])
    monkeypatch.setattr(hf_encoder, "max_batch_tokens", 0)
    assert np.abs(whole - hf_encoder.encode(prompts[:8])).max() < 1e-5


def test_fused_runner_follows_fine_tuning(prompts):
    import torch

    encoder = open_encoder(device="cpu", backend="fused")
    before = encoder.encode(prompts[:2])
    encoder.encode_tensor(prompts[:1])  # the fine-tuning path marks the fused copy stale
    with torch.no_grad():
        encoder.model.encoder.layer[0].attention.self.query.weight.mul_(1.5)  # an "optimizer step"
    after = encoder.encode(prompts[:2])
    reference = open_encoder(device="cpu", backend="hf")
    reference.model.load_state_dict(encoder.model.state_dict())
    expected = reference.encode(prompts[:2])
    assert np.abs(after - expected).max() < 1e-5 and np.abs(after - before).max() > 1e-3


@pytest.mark.parametrize("backend", ["hf", "static"])
def test_threaded_tokenisation_equals_one_thread(backend, prompts):
    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR

    name = str(DEFAULT_ARTIFACT_DIR / "encoder") if backend == "static" else encoder_module.DEFAULT_ENCODER
    texts = (prompts * 3)[:61]  # 61 texts on 3 threads: chunks of 21, 21 and 19
    serial = open_encoder(name, device="cpu", tokenizer_threads=1)
    threaded = open_encoder(name, device="cpu", tokenizer_threads=3)
    assert threaded.content_ids(texts) == serial.content_ids(texts)
    assert threaded._tokenizer_pool is not None and serial._tokenizer_pool is None
    assert threaded.content_ids(texts[:5]) == serial.content_ids(texts[:5])  # below 2 chunks: one thread


def test_tokenizer_threads_are_checked_and_bounded():
    with pytest.raises(ValueError, match="tokenizer_threads must be >= 1"):
        open_encoder(device="cpu", tokenizer_threads=0)
    assert 1 <= encoder_module.default_tokenizer_threads() <= encoder_module.MAX_TOKENIZER_THREADS
