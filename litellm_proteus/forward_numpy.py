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

# torch's exact GELU is x * Phi(x) with erf, which numpy lacks (math.erf element by element cost
# 28 ms per [128, 256] activation on 2 cores).  erf here is a cubic Hermite interpolation of a table
# of math.erf values and their derivatives on [0, 4.5] in steps of 1/128: the interpolation error is
# below h^4 max|erf^(4)| / 384 = 4e-11, far under float32's resolution; beyond 4.5, erf = +-erf(4.5)
# (1 - 2e-10).
_STEP = 1.0 / 128.0
_GRID = np.arange(0.0, 4.5 + _STEP / 2, _STEP)
_ERF = np.array([math.erf(v) for v in _GRID])
_ERF_SLOPE = _STEP * 2.0 / math.sqrt(math.pi) * np.exp(-(_GRID**2))  # derivative x step
_SQRT_HALF = 1.0 / math.sqrt(2.0)


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64, to ~1e-10 (see above)."""
    pos = np.minimum(np.abs(x), _GRID[-1]) / _STEP
    i = np.minimum(pos.astype(np.intp), len(_GRID) - 2)
    t = pos - i
    u = 1.0 - t
    y = (1.0 + 2.0 * t) * u * u * _ERF[i] + t * u * u * _ERF_SLOPE[i] + t * t * (3.0 - 2.0 * t) * _ERF[i + 1] - t * t * u * _ERF_SLOPE[i + 1]
    return np.copysign(y, x)


def gelu(x: np.ndarray) -> np.ndarray:
    """torch.nn.GELU() (approximate='none'): 0.5 x (1 + erf(x / sqrt 2)), computed in float64."""
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + erf(x64 * _SQRT_HALF))).astype(np.float32)


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
        from threadpoolctl import ThreadpoolController

        self._blas = ThreadpoolController()
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
        # One BLAS thread: the matrices are 256 x 384; on a proxy's busy cores OpenBLAS's thread
        # team made a [8, 384] product take 100 ms instead of 0.03 ms (docs/lean-serving.md).
        with self._blas.limit(limits=1, user_api="blas"):
            z = self.embed(np.asarray(embeddings, dtype=np.float32))
            return sigmoid(self.performance_logits(z)), self.policy_mean(z, policy_tau_norm)
