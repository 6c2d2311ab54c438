"""PPO-Lagrangian training of the tau-conditioned policy (paper section 2.3), top to bottom.

Single-step episodes: per batch of 32 queries, one session tau (a session = several batches with the
same tau, tau ~ U(tau range)), mu ~ Beta(policy(z, tau_norm, lambda)), reward eq. 4 taken in
expectation over the model choice softmax(eq. 2 / T) -- exact, since the logs hold every model's
outcome, and far less noisy than sampling one model -- and the dual update of eq. 3 every 5 batches
on the accuracy of deterministic (argmax) routing.  The whole pipeline around it is ``pipeline.py``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from litellm_proteus.costs import CostNormalizer
from litellm_proteus.model import ProteusModel, routing_scores

from .config import TrainConfig

log = logging.getLogger("proteus.train")


def reward(
    correct: torch.Tensor, cost_norm: torch.Tensor, tau: float, tau_norm: float, lam: float, use_lambda: bool = True
) -> torch.Tensor:
    """Eq. 4: w_q(tau) p - w_c(tau) c_hat + lambda (p - tau), w_q = e^{2 tau_n}, w_c = e^{2 (1 - tau_n)}."""
    w_q = math.exp(2.0 * tau_norm)
    w_c = math.exp(2.0 * (1.0 - tau_norm))
    r = w_q * correct - w_c * cost_norm
    if use_lambda:
        r = r + lam * (correct - tau)
    return r


def dual_update(lam: float, tau: float, batch_accuracy: float, lr: float, lam_max: float = math.inf) -> float:
    """Eq. 3: lambda <- [lambda + eta (tau - p_batch)]_+ (also capped at lam_max for stability)."""
    return float(min(max(lam + lr * (tau - batch_accuracy), 0.0), lam_max))


@dataclass
class Rollout:
    z: torch.Tensor  # [B, H] query representations (frozen)
    p: torch.Tensor  # [B, K] out-of-fold predicted correctness used in eq. 2
    outcomes: torch.Tensor  # [B, K] logged correctness (unobserved -> p)
    cost_norm: torch.Tensor  # [B, K] c_hat
    tau: float
    tau_norm: float
    lam: float  # dual variable in the reward
    lam_input: float  # dual variable the policy sees (0 for --no-lambda)
    mu: torch.Tensor  # [B] sampled actions
    log_prob: torch.Tensor  # [B] log Beta(mu) at sampling time
    advantages: torch.Tensor  # [B]
    returns: torch.Tensor  # [B]


def expected_reward(model: ProteusModel, batch: Rollout, mu: torch.Tensor, config: TrainConfig) -> torch.Tensor:
    """E over the model choice m ~ softmax(eq. 2 / T) of the eq. 4 reward, exact because routing
    logs are full-information (every model's outcome is known).  Differentiable in gamma."""
    choice_probs = torch.softmax(
        routing_scores(batch.p, mu, model.boost, model.gamma, batch.cost_norm) / config.selection_temperature, dim=-1
    )
    per_model = reward(batch.outcomes, batch.cost_norm, batch.tau, batch.tau_norm, batch.lam, config.use_lambda)
    return (choice_probs * per_model).sum(-1)


def ppo_update(model: ProteusModel, optimizer, batch: Rollout, config: TrainConfig) -> dict[str, float]:
    """Clipped PPO on mu, plus the pathwise gradient of the expected reward for gamma."""
    stats: dict[str, float] = {}
    for _ in range(config.ppo_epochs):
        policy = model.policy(batch.z, batch.tau_norm, batch.lam_input)
        ratio = torch.exp(policy.log_prob(batch.mu) - batch.log_prob)
        clipped = torch.clamp(ratio, 1 - config.clip_eps, 1 + config.clip_eps)
        policy_loss = -torch.min(ratio * batch.advantages, clipped * batch.advantages).mean()
        entropy = policy.entropy().mean()
        scoring_loss = -expected_reward(model, batch, batch.mu, config).mean()
        loss = policy_loss - config.entropy_coef * entropy + config.scoring_coef * scoring_loss
        if model.critic is not None:
            value_loss = F.mse_loss(model.value(batch.z, batch.tau_norm, batch.lam_input), batch.returns)
            loss = loss + config.value_coef * value_loss
            stats["value_loss"] = value_loss.item()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
    stats.update(policy_loss=float(policy_loss.detach()), entropy=float(entropy.detach()))
    return stats


def train_policy(
    model: ProteusModel,
    emb: torch.Tensor,
    scores: np.ndarray,
    costs: np.ndarray,
    p_oof: torch.Tensor,
    tau_range: tuple[float, float],
    config: TrainConfig,
    rng: np.random.Generator,
    normalizer: CostNormalizer | None = None,
) -> tuple[CostNormalizer, list[dict[str, float]], np.ndarray]:
    """PPO with session-based tau sampling and the Lagrangian dual.

    ``normalizer``: start from these cost bounds (a warm-started artifact's) instead of none.
    Returns the cost normaliser, a thinned training log and the final dual variables per tau bin."""
    lo, hi = tau_range
    # Only the policy, critic and gamma move; projection, performance head and b are frozen.
    for module in (model.projection, model.performance_head):
        module.requires_grad_(False)
    scoring = [model.gamma_raw]
    network = [p for p in model.parameters() if p.requires_grad and all(p is not q for q in scoring)]
    # gamma is one scalar: at the network's 3e-4 it would barely move in a CPU-sized run, so it
    # gets its own (documented) learning rate.  b is fitted before PPO (fit_boosts) and frozen.
    optimizer = torch.optim.AdamW(
        [
            {"params": network, "lr": config.lr, "weight_decay": config.weight_decay},
            {"params": scoring, "lr": config.scoring_lr, "weight_decay": 0.0},
        ]
    )
    with torch.no_grad():
        z_all = model.embed(emb)
    normalizer = CostNormalizer(space=config.cost_space) if normalizer is None else normalizer
    scores_t = torch.as_tensor(scores, dtype=torch.float32)
    outcomes_all = torch.where(torch.isfinite(scores_t), scores_t, p_oof)
    # One dual variable per tau bin: every tau is its own constraint (acc(tau) >= tau), and a single
    # lambda shared by all sessions can only track the current session's shortfall (measured: it
    # saturates and the policy ignores tau).  lambda_bins = 1 is the paper's single multiplier.
    lambdas = np.full(config.lambda_bins, config.lambda_init)
    tau, tau_norm, tau_bin = lo, 0.0, 0
    window_acc: list[float] = []
    history: list[dict[str, float]] = []
    bar = None
    if config.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.steps, desc="training (PPO)", unit="batch")
    for step in range(config.steps):
        if step % config.session_batches == 0:  # new session: one tau for several batches
            tau = float(rng.uniform(lo, hi))
            tau_norm = (tau - lo) / (hi - lo)
            tau_bin = min(int(tau_norm * config.lambda_bins), config.lambda_bins - 1)
            window_acc.clear()
        lam = float(lambdas[tau_bin])
        idx = rng.choice(len(emb), size=config.batch_size, replace=False)
        normalizer.update(costs[idx])
        # The policy sees its bin's multiplier relative to the mean over bins: the inference value
        # lambda = 1.0 (paper) then means "typical constraint pressure" and is in-distribution.
        # Raw multipliers sit at 5-8 here, and at lambda = 1 the policy under-shot every target.
        lam_input = lam / max(float(lambdas.mean()), 1e-6) if config.use_lambda else 0.0
        model.eval()
        with torch.no_grad():
            # G mu samples per query: the logs let us score every action, so each query is its own
            # baseline (leave-one-out mean of the other G-1 rewards) -- query difficulty cancels out.
            rows = np.repeat(idx, config.group_size)
            batch = Rollout(
                z=z_all[rows],
                p=p_oof[rows],
                outcomes=outcomes_all[rows],
                cost_norm=torch.as_tensor(normalizer.normalize(costs[rows])),
                tau=tau,
                tau_norm=tau_norm,
                lam=lam,
                lam_input=lam_input,
                mu=torch.empty(0),
                log_prob=torch.empty(0),
                advantages=torch.empty(0),
                returns=torch.empty(0),
            )
            policy = model.policy(batch.z, tau_norm, lam_input)
            batch.mu = policy.sample()
            batch.log_prob = policy.log_prob(batch.mu)
            batch.returns = expected_reward(model, batch, batch.mu, config)
            if model.critic is not None:
                baseline = model.value(batch.z, tau_norm, lam_input)
            else:
                groups = batch.returns.view(-1, config.group_size)
                loo = (groups.sum(1, keepdim=True) - groups) / max(config.group_size - 1, 1)
                baseline = loo.reshape(-1)
            advantages = batch.returns - baseline
            batch.advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            # what deterministic routing at the policy's mean mu scores (dual update and the log)
            mean_mu = policy.mean.view(-1, config.group_size)[:, 0]
            first = slice(None, None, config.group_size)
            choice = routing_scores(batch.p[first], mean_mu, model.boost, model.gamma, batch.cost_norm[first]).argmax(-1)
            accuracy = float(batch.outcomes[first].gather(-1, choice[:, None]).mean())
            cost_usd = float(costs[idx, choice.numpy()].mean())
        model.train()
        stats = ppo_update(model, optimizer, batch, config)
        window_acc.append(accuracy)
        if config.use_lambda and (step + 1) % config.dual_every == 0:
            lambdas[tau_bin] = dual_update(lam, tau, float(np.mean(window_acc)), config.dual_lr, config.lambda_max)
            window_acc.clear()
        if (step + 1) % 50 == 0 or step == 0:
            history.append(
                {
                    "step": step + 1,
                    "tau": tau,
                    "lambda": lam,
                    "mu_mean": float(batch.mu.mean()),
                    "accuracy": accuracy,
                    "cost_usd": cost_usd,
                    "gamma": float(model.gamma.detach()),
                    **stats,
                }
            )
        if bar is not None:
            bar.update(1)
            if (step + 1) % 50 == 0:
                h = history[-1]
                bar.set_postfix(tau=f"{tau:.3f}", lam=f"{lam:.2f}", mu=f"{h['mu_mean']:.2f}", acc=f"{h['accuracy']:.2f}")
        if config.log_every and (step + 1) % config.log_every == 0:
            recent = history[-max(config.log_every // 50, 1) :]
            log.info(
                "step %d  lambda %.3f  mean mu %.3f  batch acc %.3f  cost/call $%.5f  gamma %.2f",
                step + 1,
                lam,
                np.mean([h["mu_mean"] for h in recent]),
                np.mean([h["accuracy"] for h in recent]),
                np.mean([h["cost_usd"] for h in recent]),
                history[-1]["gamma"],
            )
    if bar is not None:
        bar.close()
    return normalizer, history, lambdas
