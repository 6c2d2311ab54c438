"""``device: auto`` picks the measured-faster device (CUDA where usable); decisions say where they ran."""

from __future__ import annotations

import pytest
import torch

from litellm_proteus import devices
from litellm_proteus.devices import choose_device
from litellm_proteus.observability import DecisionRecord
from litellm_proteus.predictor import ProteusPredictor


def test_auto_without_a_gpu_driver_is_the_cpu_on_the_numpy_runtime(monkeypatch, tmp_path):
    monkeypatch.setattr(devices, "GPU_DEVICE_FILES", (str(tmp_path / "nvidiactl"),))  # absent
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # not even asked without a driver
    assert choose_device("auto") == "cpu"
    predictor = ProteusPredictor(device="auto")
    assert predictor.device == "cpu" and predictor.network.runtime == "numpy"


def test_auto_with_a_usable_gpu_is_cuda_for_a_static_table_too(monkeypatch, tmp_path):
    (tmp_path / "nvidiactl").touch()
    monkeypatch.setattr(devices, "GPU_DEVICE_FILES", (str(tmp_path / "nvidiactl"),))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the host, not the code under test
    assert devices.cuda_usable() and choose_device("auto") == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a driver, but no device torch can use
    assert choose_device("auto") == "cpu"


def test_explicit_devices_are_checked():
    assert choose_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="device must be one of"):
        choose_device("tpu")


def test_the_deciding_device_is_a_header_and_survives_the_metadata_round_trip():
    fields = dict(model_group="g", deployment_id="d", model="m", tau=0.8, tau_requested=0.8, tau_source="default",
                  tier="standard", tier_source="default", mu=0.5, clamped=False, capped=False, candidates=2, excluded=0,
                  prompt_tokens=3, cost_usd=0.001, latency_ms=1.0)
    record = DecisionRecord(**fields, device="cuda:0")
    assert record.headers()["x-proteus-device"] == "cuda:0"
    assert DecisionRecord.from_dict(record.to_dict()) == record
    assert "x-proteus-device" not in DecisionRecord(**fields).headers()
    assert DecisionRecord.from_dict(fields) == DecisionRecord(**fields)  # a record written without the field
