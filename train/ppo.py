"""PPO-Lagrangian training of the tau-conditioned policy (paper section 2.3), top to bottom.

Single-step episodes: per batch of 32 queries, one session tau (a session = several batches with the
same tau, tau ~ U(tau range)), mu ~ Beta(policy(z, tau_norm, lambda)), reward eq. 4 taken in
expectation over the model choice softmax(eq. 2 / T) -- exact where the logs hold every model's
outcome (an unobserved one, and every one of a decision log, is the out-of-fold p), and far less noisy
than sampling one model -- and the dual update of eq. 3 every 5 batches on the accuracy of
deterministic (argmax) routing.

``parallel_sessions`` sessions run side by side: each keeps its own tau, its own batches and its own
dual-update window, exactly as one session alone would, and one PPO step trains on all their batches
at once (``steps`` counts batches, so S sessions take steps / S iterations).  Every tensor lives on
the model's device; the host reads one small tensor per iteration (the sessions' accuracies).  The
whole pipeline around it is ``pipeline.py``.
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
    correct: torch.Tensor,
    cost_norm: torch.Tensor,
    tau: float | torch.Tensor,
    tau_norm: float | torch.Tensor,
    lam: float | torch.Tensor,
    use_lambda: bool = True,
) -> torch.Tensor:
    """Eq. 4: w_q(tau) p - w_c(tau) c_hat + lambda (p - tau), w_q = e^{2 tau_n}, w_c = e^{2 (1 - tau_n)}.

    tau, tau_norm, lam: numbers, or tensors broadcasting against ``correct`` ([R, 1] for [R, K])."""
    tau_norm = torch.as_tensor(tau_norm, dtype=correct.dtype, device=correct.device)
    r = torch.exp(2.0 * tau_norm) * correct - torch.exp(2.0 * (1.0 - tau_norm)) * cost_norm
    if use_lambda:
        r = r + lam * (correct - tau)
    return r


def dual_update(lam: float, tau: float, batch_accuracy: float, lr: float, lam_max: float = math.inf) -> float:
    """Eq. 3: lambda <- [lambda + eta (tau - p_batch)]_+ (also capped at lam_max for stability)."""
    return float(min(max(lam + lr * (tau - batch_accuracy), 0.0), lam_max))


@dataclass
class Rollout:
    """One PPO iteration's rows: S sessions x batch_size queries x group_size mu samples, session-major.

    Per-row conditioning ([R]) so that every session keeps its own tau and dual variable."""

    z: torch.Tensor  # [R, H] query representations (frozen)
    p: torch.Tensor  # [R, K] out-of-fold predicted correctness used in eq. 2
    outcomes: torch.Tensor  # [R, K] logged correctness (unobserved -> p)
    cost_norm: torch.Tensor  # [R, K] c_hat
    tau: torch.Tensor  # [R] the session's tau
    tau_norm: torch.Tensor  # [R]
    lam: torch.Tensor  # [R] dual variable in the reward
    lam_input: torch.Tensor  # [R] dual variable the policy sees (0 for --no-lambda)
    mu: torch.Tensor | None = None  # [R] sampled actions
    log_prob: torch.Tensor | None = None  # [R] log Beta(mu) at sampling time
    advantages: torch.Tensor | None = None  # [R]
    returns: torch.Tensor | None = None  # [R]


def expected_reward(model: ProteusModel, batch: Rollout, mu: torch.Tensor, config: TrainConfig) -> torch.Tensor:
    """E over the model choice m ~ softmax(eq. 2 / T) of the eq. 4 reward, exact because routing
    logs are full-information (every model's outcome is known).  Differentiable in gamma."""
    choice_probs = torch.softmax(
        routing_scores(batch.p, mu, model.boost, model.gamma, batch.cost_norm) / config.selection_temperature, dim=-1
    )
    per_model = reward(
        batch.outcomes, batch.cost_norm, batch.tau[:, None], batch.tau_norm[:, None], batch.lam[:, None], config.use_lambda
    )
    return (choice_probs * per_model).sum(-1)


@torch.no_grad()
def sample_actions(
    model: ProteusModel, batch: Rollout, sessions: int, config: TrainConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fill mu, log_prob, returns and advantages (normalised within each session's batch, as a lone
    session would).  Returns deterministic routing at the policy's mean mu, on the device: each
    session's accuracy [S] (the dual update reads it) and each query's choice [S * batch_size]."""
    model.eval()
    policy = model.policy(batch.z, batch.tau_norm, batch.lam_input)
    batch.mu = policy.sample()
    batch.log_prob = policy.log_prob(batch.mu)
    batch.returns = expected_reward(model, batch, batch.mu, config)
    if model.critic is not None:
        baseline = model.value(batch.z, batch.tau_norm, batch.lam_input)
    else:
        # G mu samples per query: the logs let us score every action, so each query is its own
        # baseline (leave-one-out mean of the other G-1 rewards) -- query difficulty cancels out.
        groups = batch.returns.view(-1, config.group_size)
        loo = (groups.sum(1, keepdim=True) - groups) / max(config.group_size - 1, 1)
        baseline = loo.reshape(-1)
    advantages = (batch.returns - baseline).view(sessions, -1)
    advantages = (advantages - advantages.mean(1, keepdim=True)) / (advantages.std(1, keepdim=True) + 1e-8)
    batch.advantages = advantages.reshape(-1)
    first = slice(None, None, config.group_size)  # one row per query
    mean_mu = policy.mean[first]
    choice = routing_scores(batch.p[first], mean_mu, model.boost, model.gamma, batch.cost_norm[first]).argmax(-1)
    correct = batch.outcomes[first].gather(-1, choice[:, None]).view(sessions, -1)
    return correct.mean(1), choice


def ppo_update(model: ProteusModel, optimizer, batch: Rollout, config: TrainConfig) -> dict[str, torch.Tensor]:
    """Clipped PPO on mu, plus the pathwise gradient of the expected reward for gamma.  Returns the
    last epoch's losses as device tensors (read them only when logging: each read is a sync)."""
    model.train()
    stats: dict[str, torch.Tensor] = {}
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
            stats["value_loss"] = value_loss.detach()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
    stats.update(policy_loss=policy_loss.detach(), entropy=entropy.detach())
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
    """PPO with session-based tau sampling and the Lagrangian dual, on the model's device.

    ``normalizer``: start from these cost bounds (a warm-started artifact's) instead of none.
    Returns the cost normaliser, a thinned training log and the final dual variables per tau bin."""
    lo, hi = tau_range
    device = next(model.parameters()).device
    sessions = config.parallel_sessions
    # Only the policy, critic and gamma move; projection, performance head and b are frozen.
    for module in (model.projection, model.performance_head):
        module.requires_grad_(False)
    scoring = [model.gamma_raw]
    network = [p for p in model.parameters() if p.requires_grad and all(p is not q for q in scoring)]
    # gamma is one scalar: at the network's 3e-4 it would barely move in a CPU-sized run, so it
    # gets its own (documented) learning rate.  b is fitted before PPO (fit_boosts) and frozen.
    # S sessions per step take S times fewer optimizer steps on S times larger batches: both rates
    # grow by sqrt(S) (at S = 16 and the plain rates, RouterBench-partial's policy ignored tau).
    lr_scale = math.sqrt(sessions)
    optimizer = torch.optim.AdamW(
        [
            {"params": network, "lr": config.lr * lr_scale, "weight_decay": config.weight_decay},
            {"params": scoring, "lr": config.scoring_lr * lr_scale, "weight_decay": 0.0},
        ]
    )
    with torch.no_grad():
        z_all = model.embed(emb.to(device))
    normalizer = CostNormalizer(space=config.cost_space) if normalizer is None else normalizer
    p_oof = p_oof.to(device)
    scores_t = torch.as_tensor(scores, dtype=torch.float32, device=device)
    outcomes_all = torch.where(torch.isfinite(scores_t), scores_t, p_oof)
    # One dual variable per tau bin: every tau is its own constraint (acc(tau) >= tau), and a single
    # lambda shared by all sessions can only track the current session's shortfall (measured: it
    # saturates and the policy ignores tau).  lambda_bins = 1 is the paper's single multiplier.
    lambdas = np.full(config.lambda_bins, config.lambda_init)
    taus = np.full(sessions, float(lo))
    tau_bins = np.zeros(sessions, dtype=np.int64)
    window_acc: list[np.ndarray] = []  # per iteration: each session's accuracy [S]
    history: list[dict[str, float]] = []
    iterations = -(-config.steps // sessions)
    bar = None
    if config.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=iterations * sessions, desc="training (PPO)", unit="batch")
    logged_at = 0
    for it in range(iterations):
        step = it * sessions  # batches done before this iteration
        if it % config.session_batches == 0:  # new sessions: one tau each for several batches
            taus = rng.uniform(lo, hi, size=sessions)
            tau_bins = np.minimum((((taus - lo) / (hi - lo)) * config.lambda_bins).astype(np.int64), config.lambda_bins - 1)
            window_acc.clear()
        tau_norms = (taus - lo) / (hi - lo)
        lams = lambdas[tau_bins]
        # The policy sees its bin's multiplier relative to the mean over bins: the inference value
        # lambda = 1.0 (paper) then means "typical constraint pressure" and is in-distribution.
        # Raw multipliers sit at 5-8 here, and at lambda = 1 the policy under-shot every target.
        lam_inputs = lams / max(float(lambdas.mean()), 1e-6) if config.use_lambda else np.zeros(sessions)
        idx = np.concatenate([rng.choice(len(emb), size=config.batch_size, replace=False) for _ in range(sessions)])
        for batch_idx in idx.reshape(sessions, -1):  # the EMA sees the sessions' batches in turn
            normalizer.update(costs[batch_idx])
        rows = np.repeat(idx, config.group_size)
        rows_t = torch.as_tensor(rows, device=device)
        per_row = config.batch_size * config.group_size

        def session_rows(values: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.repeat(values, per_row), dtype=torch.float32, device=device)

        batch = Rollout(
            z=z_all[rows_t],
            p=p_oof[rows_t],
            outcomes=outcomes_all[rows_t],
            cost_norm=torch.as_tensor(normalizer.normalize(costs[rows]), device=device),
            tau=session_rows(taus),
            tau_norm=session_rows(tau_norms),
            lam=session_rows(lams),
            lam_input=session_rows(lam_inputs),
        )
        accuracy_t, choice_t = sample_actions(model, batch, sessions, config)
        stats = ppo_update(model, optimizer, batch, config)
        accuracy = accuracy_t.cpu().numpy().astype(np.float64)
        window_acc.append(accuracy)
        if config.use_lambda and (it + 1) % config.dual_every == 0:
            window = np.mean(window_acc, axis=0)
            for s in range(sessions):  # in turn: sessions sharing a tau bin each move its multiplier
                lambdas[tau_bins[s]] = dual_update(
                    float(lambdas[tau_bins[s]]), float(taus[s]), float(window[s]), config.dual_lr, config.lambda_max
                )
            window_acc.clear()
        done = step + sessions
        if done // 50 > logged_at // 50 or it == 0:
            logged_at = done
            choice = choice_t.cpu().numpy()
            history.append(
                {
                    "step": done,
                    "tau": float(taus[0]),
                    "lambda": float(lams[0]),
                    "mu_mean": float(batch.mu.mean()),
                    "accuracy": float(accuracy.mean()),
                    "cost_usd": float(costs[idx, choice].mean()),
                    "gamma": float(model.gamma.detach()),
                    **{k: float(v) for k, v in stats.items()},
                }
            )
            if bar is not None:
                h = history[-1]
                bar.set_postfix(tau=f"{h['tau']:.3f}", lam=f"{h['lambda']:.2f}", mu=f"{h['mu_mean']:.2f}", acc=f"{h['accuracy']:.2f}")
        if bar is not None:
            bar.update(sessions)
        if config.log_every and done // config.log_every > step // config.log_every:
            recent = history[-max(config.log_every // 50, 1) :]
            log.info(
                "step %d  lambda %.3f  mean mu %.3f  batch acc %.3f  cost/call $%.5f  gamma %.2f",
                done,
                lams[0],
                np.mean([h["mu_mean"] for h in recent]),
                np.mean([h["accuracy"] for h in recent]),
                np.mean([h["cost_usd"] for h in recent]),
                history[-1]["gamma"],
            )
    if bar is not None:
        bar.close()
    return normalizer, history, lambdas
