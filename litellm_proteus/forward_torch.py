"""The network's inference forward pass on torch (``ProteusModel``): transformer-encoder artifacts
and CUDA.  Same interface as ``forward_numpy.NumpyForward``."""

from __future__ import annotations

import os

import numpy as np

from .artifact import load_artifact
from .model_config import INFERENCE_LAMBDA

# Largest batch one heads graph takes; bigger batches run in slices of it.
GRAPH_BATCH = 128


class TorchForward:
    """``forward(embeddings, policy_tau_norm) -> (p_all [B, K], mu [B])`` as numpy arrays, plus
    ``boost`` [K] and ``gamma`` (0-d)."""

    runtime = "torch"

    def __init__(self, artifact_dir: str | os.PathLike, device: str, *, cuda_graphs: bool = False):
        """``cuda_graphs``: replay the heads as captured CUDA graphs, one per padded batch
        (``cuda_graphs.py``; 15 kernel launches become one)."""
        import torch

        self._torch = torch
        self.device = device
        self.model, self.manifest = load_artifact(artifact_dir, map_location="cpu")
        self.model.to(device)
        self.boost = self.model.boost.detach().cpu().numpy()
        self.gamma = self.model.gamma.detach().cpu().numpy()
        self._graphs = None
        if cuda_graphs:
            from .cuda_graphs import ShapeGraphs

            if not device.startswith("cuda"):
                raise ValueError(f"cuda_graphs needs a CUDA device; this predictor runs on {device!r}")
            lam = torch.full((), INFERENCE_LAMBDA, device=device)  # a device tensor: no host copy inside a capture
            self._graphs = ShapeGraphs(lambda emb, tau_norm: self._heads(emb, tau_norm, lam), device)

    def _heads(self, emb, tau_norm, lam):
        z = self.model.embed(emb)
        return self._torch.sigmoid(self.model.performance_logits(z)), self.model.policy(z, tau_norm, lam).mean

    def forward(self, embeddings: np.ndarray, policy_tau_norm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        torch = self._torch
        emb = np.asarray(embeddings, dtype=np.float32)
        tau_norm = np.asarray(policy_tau_norm, dtype=np.float32)
        with torch.inference_mode():
            if self._graphs is not None:
                return self._graphed(emb, tau_norm)
            p_all, mu = self._heads(torch.as_tensor(emb, device=self.device),
                                    torch.as_tensor(tau_norm, device=self.device), INFERENCE_LAMBDA)
            return p_all.cpu().numpy(), mu.cpu().numpy()

    def _graphed(self, emb: np.ndarray, tau_norm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The heads through captured graphs: GRAPH_BATCH rows at a time, each padded to its bucket."""
        from .cuda_graphs import batch_bucket

        torch = self._torch
        p_parts, mu_parts = [], []
        for start in range(0, len(emb), GRAPH_BATCH):
            rows = emb[start : start + GRAPH_BATCH]
            bucket = batch_bucket(len(rows), GRAPH_BATCH)
            padded_emb = np.zeros((bucket, emb.shape[1]), dtype=np.float32)
            padded_emb[: len(rows)] = rows
            padded_tau = np.zeros(bucket, dtype=np.float32)
            padded_tau[: len(rows)] = tau_norm[start : start + GRAPH_BATCH]
            p_all, mu = self._graphs(torch.from_numpy(padded_emb), torch.from_numpy(padded_tau))
            p_parts.append(p_all[: len(rows)].numpy())
            mu_parts.append(mu[: len(rows)].numpy())
        return np.concatenate(p_parts), np.concatenate(mu_parts)
