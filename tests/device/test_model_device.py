"""ProteusModel's inference and training passes create every tensor on the model's device."""

from __future__ import annotations

import pytest
import torch

from litellm_proteus.model import INFERENCE_LAMBDA, ModelConfig, ProteusModel


def _model(device: torch.device, **overrides) -> ProteusModel:
    return ProteusModel(ModelConfig(embed_dim=8, n_models=3, hidden_dim=16, **overrides)).to(device)


@pytest.mark.parametrize("fixed_gamma", [None, 3.0])
def test_route_with_python_float_tau_and_lambda_stays_on_the_model_device(foreign_device, fixed_gamma):
    # the predictor passes lambda as a Python float (INFERENCE_LAMBDA) and calibration a float tau_norm
    model = _model(foreign_device, fixed_gamma=fixed_gamma)
    out = model.route(torch.zeros(4, 8, device=foreign_device), 0.5, torch.zeros(4, 3, device=foreign_device))
    assert out.choice.device == foreign_device and out.mu.shape == (4,)
    assert model.gamma.device == foreign_device
    tau_norm = torch.full((4,), 0.3, device=foreign_device)
    assert model.policy(torch.zeros(4, 16, device=foreign_device), tau_norm, INFERENCE_LAMBDA).mean.device == foreign_device
    assert model.value(torch.zeros(4, 16, device=foreign_device), 0.3, 1.0).shape == (4,)


def test_cpu_conditioning_is_refused_on_another_device(foreign_device):
    # the harness itself: a CPU tensor meeting a model on the foreign device must fail, as on CUDA
    model = _model(foreign_device)
    with pytest.raises(RuntimeError, match="device"):
        model.policy_trunk(torch.cat([torch.zeros(2, 16, device=foreign_device), torch.zeros(2, 2)], dim=-1))
