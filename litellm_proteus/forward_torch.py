"""The network's inference forward pass on torch (``ProteusModel``): transformer-encoder artifacts
and CUDA.  Same interface as ``forward_numpy.NumpyForward``."""

from __future__ import annotations

import os

import numpy as np

from .artifact import load_artifact
from .model_config import INFERENCE_LAMBDA


class TorchForward:
    """``forward(embeddings, policy_tau_norm) -> (p_all [B, K], mu [B])`` as numpy arrays, plus
    ``boost`` [K] and ``gamma`` (0-d)."""

    runtime = "torch"

    def __init__(self, artifact_dir: str | os.PathLike, device: str):
        import torch

        self._torch = torch
        self.device = device
        self.model, self.manifest = load_artifact(artifact_dir, map_location="cpu")
        self.model.to(device)
        self.boost = self.model.boost.detach().cpu().numpy()
        self.gamma = self.model.gamma.detach().cpu().numpy()

    def forward(self, embeddings: np.ndarray, policy_tau_norm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        torch = self._torch
        with torch.inference_mode():
            emb = torch.as_tensor(np.asarray(embeddings, dtype=np.float32), device=self.device)
            tau_norm = torch.as_tensor(np.asarray(policy_tau_norm, dtype=np.float32), device=self.device)
            z = self.model.embed(emb)
            p_all = torch.sigmoid(self.model.performance_logits(z)).cpu().numpy()
            mu = self.model.policy(z, tau_norm, INFERENCE_LAMBDA).mean.cpu().numpy()
        return p_all, mu
