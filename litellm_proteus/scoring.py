"""Formulas shared by the torch model and the numpy runtime, written once for both array types
(torch tensors and numpy arrays support the same operators used here)."""

from __future__ import annotations

from typing import TypeVar

A = TypeVar("A")  # torch.Tensor or numpy.ndarray


def routing_scores(p: A, mu: A, boost: A, gamma: A, cost_norm: A) -> A:
    """Eq. 2 for [B, M] candidates: s = p + mu * b - (1 - mu)^gamma * c_hat (mu is [B])."""
    mu = mu[..., None]  # type: ignore[index]
    return p + mu * boost - (1.0 - mu) ** gamma * cost_norm  # type: ignore[operator]


def beta_mean(alpha: A, beta: A) -> A:
    """E[mu] under Beta(alpha, beta): the deterministic action used at inference."""
    return alpha / (alpha + beta)  # type: ignore[operator]
