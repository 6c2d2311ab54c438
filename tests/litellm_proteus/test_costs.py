import numpy as np
import pytest

from litellm_proteus.costs import CostNormalizer, DeploymentMappingError, deployment_prices


def test_linear_space_is_dollars():
    norm = CostNormalizer(space="usd_per_call")
    norm.update(np.linspace(0.0, 1e-2, 101))
    assert norm.low == pytest.approx(5e-4) and norm.high == pytest.approx(9.5e-3)
    assert norm.normalize([5e-3])[0] == pytest.approx((5e-3 - 5e-4) / 9e-3, rel=1e-5)
    assert CostNormalizer.from_dict(norm.to_dict()).space == "usd_per_call"
    with pytest.raises(ValueError, match="space"):
        CostNormalizer(space="eur")


def test_first_update_sets_percentile_bounds_in_log_space():
    norm = CostNormalizer(space="log10_usd_per_call")
    costs = np.logspace(-5, -2, 101)  # log10 from -5 to -2, evenly
    norm.update(costs)
    assert norm.low == pytest.approx(-5 + 0.05 * 3, abs=1e-9)
    assert norm.high == pytest.approx(-2 - 0.05 * 3, abs=1e-9)


def test_ema_moves_bounds_by_one_minus_momentum():
    norm = CostNormalizer(space="log10_usd_per_call", momentum=0.9)
    norm.update([1e-4] * 10)
    norm.update([1e-2] * 10)
    assert norm.low == pytest.approx(0.9 * -4 + 0.1 * -2)


def test_normalize_clips_to_unit_interval_and_is_monotone():
    norm = CostNormalizer(space="log10_usd_per_call")
    norm.update(np.logspace(-5, -2, 50))
    out = norm.normalize([1e-9, 1e-5, 1e-4, 1e-3, 1.0])
    assert out[0] == 0.0 and out[-1] == 1.0
    assert np.all(np.diff(out) >= 0)


def test_zero_cost_is_finite_and_nan_is_ignored_in_update():
    norm = CostNormalizer()
    norm.update([np.nan, 1e-4, 1e-3])
    assert norm.initialised
    assert np.isfinite(norm.normalize([0.0])).all()


def test_round_trip_and_validation():
    norm = CostNormalizer()
    norm.update([1e-4, 1e-3])
    again = CostNormalizer.from_dict(norm.to_dict())
    assert again.normalize([5e-4]) == pytest.approx(norm.normalize([5e-4]))
    with pytest.raises(ValueError, match="space"):
        CostNormalizer.from_dict({**norm.to_dict(), "space": "usd"})
    with pytest.raises(RuntimeError):
        CostNormalizer().normalize([1.0])


def test_default_space_is_the_trainers():
    from proteus_train.config import TrainConfig

    assert CostNormalizer().space == TrainConfig().cost_space == "usd_per_call"


def test_a_deployment_priced_per_second_needs_per_token_prices_to_be_routed():
    """LiteLLM bills a deployment with input_cost_per_second by the second: the cost map's per-token
    price of its model is no estimate of that, so it is an error naming the field, not a silent swap."""
    params = {"model": "openai/gpt-4o", "input_cost_per_second": 0.01, "output_cost_per_second": 0.01}
    with pytest.raises(DeploymentMappingError, match=r"litellm_params\.input_cost_per_second prices it per second"):
        deployment_prices({"model_name": "g", "litellm_params": params})
    with pytest.raises(DeploymentMappingError, match=r"model_info\.output_cost_per_second"):
        deployment_prices({"model_name": "g", "litellm_params": {"model": "openai/gpt-4o"},
                           "model_info": {"output_cost_per_second": 0.01}})
    both = {**params, "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}
    assert deployment_prices({"model_name": "g", "litellm_params": both}).input_per_token == 1e-6
