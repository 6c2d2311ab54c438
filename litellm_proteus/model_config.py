"""The network's architecture hyper-parameters (stored in the artifact manifest) and the inference
constant, without torch: the manifest and the numpy forward pass read them on a torch-free proxy."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

# At inference the dual variable is fixed (paper section 2.3).
INFERENCE_LAMBDA = 1.0


class ModelConfig(BaseModel):
    """Architecture hyper-parameters; stored in the artifact manifest."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    embed_dim: int = Field(gt=0, description="encoder output size")
    n_models: int = Field(ge=2, description="K, the number of trained model slots")
    hidden_dim: int = Field(256, gt=0)
    use_critic: bool = True
    fixed_gamma: float | None = Field(None, ge=2.0, le=8.0, description="ablation: freeze gamma")
    gamma_min: float = 2.0
    gamma_max: float = 8.0
    selection_temperature: float = Field(0.05, gt=0)

    @model_validator(mode="after")
    def _gamma_range(self) -> "ModelConfig":
        if not 0 < self.gamma_min < self.gamma_max:  # (1 - mu)^gamma at mu = 1 is 0^gamma: a power <= 0 is no cost term
            raise ValueError(f"gamma_min ({self.gamma_min}) must be > 0 and below gamma_max ({self.gamma_max})")
        return self


def tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor ``ProteusModel(config).state_dict()`` holds (``model.py``; a
    test keeps the two equal), so weights can be checked without building the torch module."""
    e, h, k = config.embed_dim, config.hidden_dim, config.n_models
    shapes: dict[str, tuple[int, ...]] = {
        "projection.0.0.weight": (h, e), "projection.0.0.bias": (h,),
        "projection.0.2.weight": (h, h), "projection.0.2.bias": (h,),
        "performance_head.weight": (k, h), "performance_head.bias": (k,),
        "boost": (k,), "gamma_raw": (),
        "policy_trunk.0.0.weight": (h, h + 2), "policy_trunk.0.0.bias": (h,),
        "policy_trunk.0.2.weight": (h, h), "policy_trunk.0.2.bias": (h,),
        "lambda_gate.0.weight": (h, 2), "lambda_gate.0.bias": (h,),
        "beta_head.linear.weight": (2, h + 2), "beta_head.linear.bias": (2,),
    }
    if config.use_critic:
        shapes |= {"critic.0.weight": (h, h + 2), "critic.0.bias": (h,), "critic.2.weight": (1, h), "critic.2.bias": (1,)}
    return shapes
