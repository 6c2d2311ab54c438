"""``device: auto`` picks the measured-faster device per encoder kind; decisions say where they ran."""

from __future__ import annotations

import pytest
import torch

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
from litellm_proteus.devices import choose_device
from litellm_proteus.observability import DecisionRecord
from litellm_proteus.predictor import ProteusPredictor

STATIC_ENCODER = str(DEFAULT_ARTIFACT_DIR / "encoder")


def test_auto_without_cuda_is_the_cpu():
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    assert choose_device("auto", STATIC_ENCODER) == "cpu"
    assert choose_device("auto", "all-MiniLM-L6-v2") == "cpu"
    assert ProteusPredictor(device="auto").device == "cpu"


def test_auto_on_a_cuda_host_keeps_a_static_table_on_the_cpu_and_a_transformer_on_the_gpu(monkeypatch, tiny_bert):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the host, not the code under test
    assert choose_device("auto", STATIC_ENCODER) == "cpu"
    assert choose_device("auto", str(tiny_bert)) == "cuda"


def test_explicit_devices_are_checked():
    assert choose_device("cpu", STATIC_ENCODER) == "cpu"
    with pytest.raises(ValueError, match="device must be one of"):
        choose_device("tpu", STATIC_ENCODER)


def test_the_deciding_device_is_a_header_and_survives_the_metadata_round_trip():
    fields = dict(model_group="g", deployment_id="d", model="m", tau=0.8, tau_requested=0.8, tau_source="default",
                  tier="standard", tier_source="default", mu=0.5, clamped=False, capped=False, candidates=2, excluded=0,
                  prompt_tokens=3, cost_usd=0.001, latency_ms=1.0)
    record = DecisionRecord(**fields, device="cuda:0")
    assert record.headers()["x-proteus-device"] == "cuda:0"
    assert DecisionRecord.from_dict(record.to_dict()) == record
    assert "x-proteus-device" not in DecisionRecord(**fields).headers()
    assert DecisionRecord.from_dict(fields) == DecisionRecord(**fields)  # a record written without the field
