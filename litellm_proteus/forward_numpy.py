"""The network's inference forward pass in numpy, from the same ``model.safetensors``: a faithful
re-implementation of ``ProteusModel.embed`` / ``performance_logits`` / ``policy(...).mean`` (see
``model.py``, the one model definition; a test keeps the two equal), so a static-table artifact
serves on the CPU without torch."""

from __future__ import annotations

import math
import os

import numpy as np

from .artifact import load_artifact_arrays
from .model_config import INFERENCE_LAMBDA, ModelConfig
from .scoring import beta_mean

# torch's exact GELU is x * Phi(x) with erf; numpy has no erf, so math.erf runs element-wise (in
# float64, then rounded to float32).  Measured in docs/lean-serving.md: its cost is small next to the
# tokenisation.
_erf = np.frompyfunc(math.erf, 1, 1)
_SQRT_HALF = 1.0 / math.sqrt(2.0)


def gelu(x: np.ndarray) -> np.ndarray:
    """torch.nn.GELU() (approximate='none'): 0.5 x (1 + erf(x / sqrt 2))."""
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + _erf(x64 * _SQRT_HALF).astype(np.float64))).astype(np.float32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp overflow -> 1/inf = 0, the right limit
        return (1.0 / (1.0 + np.exp(-x))).astype(np.float32, copy=False)


def softplus(x: np.ndarray) -> np.ndarray:
    """torch.nn.functional.softplus (beta 1, threshold 20: linear above it)."""
    with np.errstate(over="ignore"):
        return np.where(x > 20.0, x, np.log1p(np.exp(x))).astype(np.float32, copy=False)


class NumpyForward:
    """``forward(embeddings, policy_tau_norm) -> (p_all [B, K], mu [B])`` plus the learned
    ``boost`` [K] and ``gamma`` (0-d): everything the decision needs from the network."""

    runtime = "numpy"

    def __init__(self, artifact_dir: str | os.PathLike):
        weights, self.manifest = load_artifact_arrays(artifact_dir)
        self._w = w = {k: v.astype(np.float32, copy=False) for k, v in weights.items()}
        config: ModelConfig = self.manifest.architecture
        self.boost = w["boost"]
        if config.fixed_gamma is not None:
            self.gamma = np.float32(config.fixed_gamma)
        else:
            span = np.float32(config.gamma_max - config.gamma_min)
            self.gamma = np.float32(config.gamma_min) + span * sigmoid(w["gamma_raw"])

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self._w[f"{name}.weight"].T + self._w[f"{name}.bias"]

    def embed(self, embeddings: np.ndarray) -> np.ndarray:
        """z = GELU(W2 GELU(W1 e)) (``ProteusModel.projection``)."""
        return gelu(self._linear(gelu(self._linear(embeddings, "projection.0.0")), "projection.0.2"))

    def performance_logits(self, z: np.ndarray) -> np.ndarray:
        return self._linear(z, "performance_head")

    def policy_mean(self, z: np.ndarray, tau_norm: np.ndarray, lam: float = INFERENCE_LAMBDA) -> np.ndarray:
        """E[mu] of ``ProteusModel.policy(z, tau_norm, lam)``."""
        tau_norm = np.broadcast_to(np.asarray(tau_norm, dtype=np.float32).reshape(-1), (z.shape[0],))
        lam_col = np.full(z.shape[0], np.float32(lam) - np.float32(INFERENCE_LAMBDA), dtype=np.float32)
        cond = np.stack([np.float32(2.0) * tau_norm - np.float32(1.0), lam_col], axis=-1)
        hidden = gelu(self._linear(gelu(self._linear(np.concatenate([z, cond], axis=-1), "policy_trunk.0.0")), "policy_trunk.0.2"))
        gate = sigmoid(self._linear(cond, "lambda_gate.0"))
        raw = self._linear(np.concatenate([hidden * gate, cond], axis=-1), "beta_head.linear")
        return beta_mean(1.0 + softplus(raw[..., 0]), 1.0 + softplus(raw[..., 1]))

    def forward(self, embeddings: np.ndarray, policy_tau_norm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = self.embed(np.asarray(embeddings, dtype=np.float32))
        return sigmoid(self.performance_logits(z)), self.policy_mean(z, policy_tau_norm)
