"""The Beta distribution over the quality preference mu in [0, 1].

mu is the policy's single action: 0 means "cheapest acceptable", 1 means "best quality".  A Beta
(rather than a squashed Gaussian) has its support exactly on [0, 1] and a learnable concentration
alpha + beta: low while exploring, high once the policy is sure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .scoring import beta_mean

# Samples are kept this far from 0 and 1: Beta log-densities diverge at the boundaries.
MU_EPS = 1e-4


@dataclass
class BetaPolicyOutput:
    """alpha, beta > 1 (unimodal); shapes [B]."""

    alpha: torch.Tensor
    beta: torch.Tensor

    @property
    def distribution(self) -> torch.distributions.Beta:
        return torch.distributions.Beta(self.alpha, self.beta)

    def sample(self) -> torch.Tensor:
        """Draw mu (deterministic under torch.manual_seed), clamped to (eps, 1 - eps)."""
        return self.distribution.sample().clamp(MU_EPS, 1 - MU_EPS)

    def log_prob(self, mu: torch.Tensor) -> torch.Tensor:
        return self.distribution.log_prob(mu.clamp(MU_EPS, 1 - MU_EPS))

    def entropy(self) -> torch.Tensor:
        return self.distribution.entropy()

    @property
    def mean(self) -> torch.Tensor:
        """The deterministic action used at inference: E[mu] = alpha / (alpha + beta)."""
        return beta_mean(self.alpha, self.beta)

    @property
    def concentration(self) -> torch.Tensor:
        return self.alpha + self.beta


class BetaHead(nn.Module):
    """Maps features to Beta(alpha, beta) with alpha, beta = 1 + softplus(.) (> 1: unimodal)."""

    def __init__(self, in_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, 2)
        nn.init.zeros_(self.linear.weight)
        # softplus(0.5413) = 1 -> alpha = beta = 2 at init: mean 0.5, broad exploration.
        nn.init.constant_(self.linear.bias, 0.5413)

    def forward(self, features: torch.Tensor) -> BetaPolicyOutput:
        raw = self.linear(features)
        alpha = 1.0 + F.softplus(raw[..., 0])
        beta = 1.0 + F.softplus(raw[..., 1])
        return BetaPolicyOutput(alpha=alpha, beta=beta)
