"""The PROTEUS network: one definition for the trainer and the runtime (paper section 2).

Symbols (each documented once, here):

- ``tau``    the accuracy target, a fraction in (0, 1]; fed to the policy normalised to the
             artifact's tau range: tau_norm = (tau - tau_lo) / (tau_hi - tau_lo).
- ``lambda`` the Lagrangian dual variable (>= 0) that grows while batch accuracy is below tau
             during training; an input of the policy; fixed at 1.0 at inference.
- ``mu``     the quality preference in [0, 1] drawn from the Beta policy (0: cost, 1: quality).
- ``b``      learned per-model quality boosts, one per trained model slot.
- ``gamma``  the cost-sensitivity exponent, learnable and bounded to [2, 8].
- ``p``      predicted correctness probability of each model for the query (performance head).
- ``c_hat``  the per-call cost of each model normalised to [0, 1] (see ``costs.py``).

Routing score (eq. 2): s_i = p_i(x) + mu * b_i - (1 - mu)^gamma * c_hat_i, route to argmax_i s_i.

Choices where the paper is silent (also in the README):
- z = GELU(W2 GELU(W1 e)) with e the frozen sentence embedding, z in R^256;
- the policy reads z *detached*: the projection is learned by the performance loss only, so RL
  noise cannot degrade p_i(x);
- lambda-gating: the policy trunk's hidden units are multiplied by sigmoid(W_g [tau_norm, lambda]),
  letting constraint pressure switch features on and off; [tau_norm, lambda] also feed the Beta
  head directly (a skip connection);
- gamma = 2 + 6 * sigmoid(g_raw) keeps gamma in [2, 8] by construction;
- b is fitted to maximise the accuracy of quality-seeking routing (mu = 1), gamma by the pathwise
  gradient of the reward's expectation over the model choice softmax(s / T)
  (T = ``selection_temperature``); see train/ppo.py.  Inference takes the argmax, the T -> 0 limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .distributions import BetaHead, BetaPolicyOutput
from .model_config import INFERENCE_LAMBDA, ModelConfig
from .scoring import routing_scores


@dataclass
class RoutingOutput:
    """Everything one forward pass decides, batch-first."""

    p: torch.Tensor  # [B, K] predicted correctness
    policy: BetaPolicyOutput  # Beta(alpha, beta) over mu, [B]
    mu: torch.Tensor  # [B] the mu used for scoring
    scores: torch.Tensor  # [B, K] eq. 2 (masked entries = -inf)
    choice: torch.Tensor  # [B] argmax slot index


def _mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, out_dim))


class ProteusModel(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        h, k = config.hidden_dim, config.n_models
        self.projection = nn.Sequential(_mlp(config.embed_dim, h, h), nn.GELU())
        self.performance_head = nn.Linear(h, k)
        self.boost = nn.Parameter(torch.zeros(k))
        self.gamma_raw = nn.Parameter(torch.zeros(()))  # gamma = 5.0 at init
        self.policy_trunk = nn.Sequential(_mlp(h + 2, h, h), nn.GELU())
        self.lambda_gate = nn.Sequential(nn.Linear(2, h), nn.Sigmoid())
        self.beta_head = BetaHead(h + 2)
        self.critic = _mlp(h + 2, h, 1) if config.use_critic else None

    # -- components -------------------------------------------------------------------------
    @property
    def gamma(self) -> torch.Tensor:
        if self.config.fixed_gamma is not None:
            return torch.tensor(self.config.fixed_gamma, device=self.gamma_raw.device)
        span = self.config.gamma_max - self.config.gamma_min
        return self.config.gamma_min + span * torch.sigmoid(self.gamma_raw)

    def embed(self, embeddings: torch.Tensor) -> torch.Tensor:
        """z: the 256-d query representation shared by both heads."""
        return self.projection(embeddings)

    def performance_logits(self, z: torch.Tensor) -> torch.Tensor:
        return self.performance_head(z)

    @staticmethod
    def _conditioning(tau_norm: torch.Tensor | float, lam: torch.Tensor | float, z: torch.Tensor) -> torch.Tensor:
        """[B, 2] policy conditioning on z's device (tau_norm, lam: scalars or [B])."""
        batch, device = z.shape[0], z.device
        tau_norm = torch.as_tensor(tau_norm, dtype=torch.float32, device=device).reshape(-1).expand(batch)
        lam = torch.as_tensor(lam, dtype=torch.float32, device=device).reshape(-1).expand(batch)
        # Centred features (tau_norm in [0, 1] -> [-1, 1]; lambda around its inference value 1), so
        # low- and high-tau sessions push a tau weight the same way instead of both moving a bias.
        return torch.stack([2.0 * tau_norm - 1.0, lam - INFERENCE_LAMBDA], dim=-1)

    def policy(self, z: torch.Tensor, tau_norm, lam) -> BetaPolicyOutput:
        cond = self._conditioning(tau_norm, lam, z)
        hidden = self.policy_trunk(torch.cat([z.detach(), cond], dim=-1))
        # The conditioning also reaches the Beta head directly: a monotone tau -> mu response is
        # then one weight away, instead of having to be carved out of 256 gated features.
        return self.beta_head(torch.cat([hidden * self.lambda_gate(cond), cond], dim=-1))

    def value(self, z: torch.Tensor, tau_norm, lam) -> torch.Tensor:
        if self.critic is None:
            raise RuntimeError("this model was built with use_critic=False")
        cond = self._conditioning(tau_norm, lam, z)
        return self.critic(torch.cat([z.detach(), cond], dim=-1)).squeeze(-1)

    def scores(
        self,
        p: torch.Tensor,
        mu: torch.Tensor,
        cost_norm: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Eq. 2: s_i = p_i + mu * b_i - (1 - mu)^gamma * c_hat_i; masked slots get -inf.

        p, cost_norm, mask: [B, K] (cost_norm may be [K]); mu: [B].
        """
        s = routing_scores(p, mu, self.boost, self.gamma, cost_norm)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return s

    # -- inference ----------------------------------------------------------------------------
    def route(
        self,
        embeddings: torch.Tensor,
        tau_norm,
        cost_norm: torch.Tensor,
        mask: torch.Tensor | None = None,
        lam: float = INFERENCE_LAMBDA,
    ) -> RoutingOutput:
        """Deterministic routing: mu = E[Beta], model = argmax of eq. 2 over the allowed slots."""
        z = self.embed(embeddings)
        p = torch.sigmoid(self.performance_logits(z))
        policy = self.policy(z, tau_norm, lam)
        mu = policy.mean
        s = self.scores(p, mu, cost_norm, mask)
        return RoutingOutput(p=p, policy=policy, mu=mu, scores=s, choice=s.argmax(dim=-1))
