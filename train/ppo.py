"""PPO-Lagrangian training of PROTEUS (paper section 2), readable top to bottom.

Pipeline (``train(config)``):

1. load routing logs, assign train/val/test splits, embed every prompt with the frozen encoder
   (by default a static token table distilled from it once, ``train/distill.py``; on-disk cache);
2. derive the tau training range from the train/val data (never the test split);
3. fit the projection + performance head p_i(x) with masked BCE on the train split (early stopping on
   validation), and out-of-fold p_i(x) for every train row (5 folds).  PPO scores models with the
   out-of-fold predictions: on in-sample predictions the policy would learn that a cheap mu is
   "safe" because p is overfit, and miss its targets on new queries;
4. PPO over single-step episodes: per batch of 32 queries, one session tau (a session = several
   batches with the same tau, tau ~ U(tau range)), mu ~ Beta(policy(z, tau_norm, lambda)), reward
   eq. 4 taken in expectation over the model choice softmax(eq. 2 / T) -- exact, since the logs hold
   every model's outcome, and far less noisy than sampling one model -- and the dual update of eq. 3
   every 5 batches on the accuracy of deterministic (argmax) routing;
5. calibrate on validation + out-of-fold training rows: a monotone table requested tau -> policy tau
   such that accuracy meets the requested tau (+ margin); the declared tau range is where that is
   possible (never using the test split).  Also the cost frontier of those operating points: the
   runtime reaches a tau between two frontier points by routing a prompt-hash share of queries at
   each (``--no-mix-operating-points`` turns it off);
6. write the artifact (weights + manifest).

Hyper-parameters live in ``TrainConfig``; every one is a ``proteus train`` flag.  Paper defaults are
kept (AdamW 3e-4, batch 32, clip 1.0, eta_lambda 0.4, dual update every 5 batches) except where a
measurement on RouterBench-partial said otherwise -- each such choice is documented where it is
made: 3,000 PPO batches (x 8 mu samples per query, i.e. more action evaluations than the paper's
10,000 x 32) to fit the 2-minute CPU budget, one dual variable per tau bin started at 5, the
frozen-out-of-fold performance head, b fitted for quality, and the validation calibration.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from litellm_proteus import __version__
from litellm_proteus.artifact import DataRecord, EncoderSpec, Manifest, TauCalibration, save_artifact
from litellm_proteus.costs import SPACES as COST_SPACES
from litellm_proteus.costs import CostNormalizer
from litellm_proteus.encoder import DEFAULT_ENCODER, TRUNCATIONS, TextEncoder, resolve_device
from litellm_proteus.model import INFERENCE_LAMBDA, ModelConfig, ProteusModel, routing_scores

from .data import read_price_file
from .data.logs import RoutingLog
from .distill import cached_static_encoder, copy_static_encoder
from .fitting import fit_early_stopping
from .routing import fill_missing_costs

log = logging.getLogger("proteus.train")

DEFAULT_CACHE_DIR = os.environ.get("PROTEUS_CACHE_DIR", os.path.expanduser("~/.cache/proteus"))


@dataclass
class TrainConfig:
    # data
    data: list[str] = field(default_factory=list)
    format: str = "auto"
    prices: str | None = None  # JSON/YAML price table (USD per 1M tokens) for logs without costs
    skip_contaminated: bool = False  # RouteLLM: drop prompts listed in contaminated_prompts.jsonl
    seed: int = 0
    # encoder
    encoder: str = DEFAULT_ENCODER
    max_tokens: int = 256
    truncation: str = "tail"
    device: str = "auto"
    cache_dir: str | None = DEFAULT_CACHE_DIR
    # Route on a static token table distilled from `encoder` (train/distill.py; bundled in the
    # artifact) instead of running the transformer per request: same routing quality measured on
    # RouterBench-partial and MMLU, ~1 ms instead of ~15 ms per decision on 2 CPU cores.
    # --no-static-encoder keeps the transformer; --finetune-encoder implies it.
    static_encoder: bool = True
    finetune_encoder: bool = False
    encoder_lr: float = 2e-5
    finetune_epochs: int = 2
    # costs: "usd_per_call" (linear, paper) or "log10_usd_per_call" (see litellm_proteus/costs.py)
    cost_space: str = "usd_per_call"
    # architecture
    hidden_dim: int = 256
    use_critic: bool = True
    fixed_gamma: float | None = None
    use_lambda: bool = True
    selection_temperature: float = 0.05
    # performance head (supervised, masked BCE)
    perf_epochs: int = 80
    perf_lr: float = 1e-3
    perf_weight_decay: float = 1e-2
    perf_batch_size: int = 64
    perf_patience: int = 10
    oof_folds: int = 5
    # PPO
    steps: int = 3_000
    batch_size: int = 32
    lr: float = 3e-4
    weight_decay: float = 1e-2
    max_grad_norm: float = 1.0
    ppo_epochs: int = 4
    clip_eps: float = 0.2
    entropy_coef: float = 1e-2
    value_coef: float = 0.5
    scoring_coef: float = 1.0
    scoring_lr: float = 3e-3
    boost_steps: int = 300
    session_batches: int = 10
    group_size: int = 8
    # Lagrangian dual
    dual_lr: float = 0.4
    dual_every: int = 5
    lambda_init: float = 5.0
    lambda_bins: int = 5
    lambda_max: float = 20.0
    # tau range: None = derived from the data (see derive_tau_range)
    tau_range: tuple[float, float] | None = None
    tau_below_best: float = 0.10
    # validation calibration
    calibrate: bool = True
    calibration_margin: float = 0.005
    calibration_step: float = 0.0025
    calibration_extrapolate: float = 0.6
    calibration_val_slack: float = 0.0
    calibration_z: float = 1.2816
    # mix the two cost-frontier operating points around each tau per query (TauCalibration.frontier_*)
    mix_operating_points: bool = True
    log_every: int = 500
    progress: bool = True

    def __post_init__(self) -> None:
        """Reject values no run can use, naming the flag (``--steps 0`` must not fail mid-training)."""
        problems = []
        for f in fields(self):
            value, flag = getattr(self, f.name), "--" + f.name.replace("_", "-")
            if isinstance(value, bool) or value is None or f.name == "seed":
                continue
            if isinstance(value, int):
                least = _INT_AT_LEAST.get(f.name, 1)
                if value < least:
                    problems.append(f"{flag} must be an integer >= {least}; got {value}")
            elif isinstance(value, float):
                positive = f.name in _FLOAT_POSITIVE
                if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
                    problems.append(f"{flag} must be a number {'> 0' if positive else '>= 0'}; got {value}")
        if self.truncation not in TRUNCATIONS:
            problems.append(f"--truncation must be one of {list(TRUNCATIONS)}; got {self.truncation!r}")
        if self.cost_space not in COST_SPACES:
            problems.append(f"--cost-space must be one of {list(COST_SPACES)}; got {self.cost_space!r}")
        if problems:
            raise ValueError("; ".join(problems))


_INT_AT_LEAST = {"max_tokens": 8, "oof_folds": 2, "boost_steps": 0, "finetune_epochs": 0}
_FLOAT_POSITIVE = {"encoder_lr", "perf_lr", "lr", "scoring_lr", "max_grad_norm", "clip_eps", "selection_temperature",
                   "lambda_max", "tau_below_best", "calibration_step", "fixed_gamma"}


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------
def load_training_data(config: TrainConfig) -> RoutingLog:
    from .data import assign_splits, load_logs, read_price_file

    data = load_logs(
        config.data,
        format=config.format,
        prices=read_price_file(config.prices),
        seed=config.seed,
        skip_contaminated=config.skip_contaminated,
    )
    return assign_splits(data, seed=config.seed)


def oracle_accuracy(scores: np.ndarray) -> float:
    return float(np.nanmax(np.nan_to_num(scores, nan=0.0), axis=1).mean())


def best_single_accuracy(scores: np.ndarray) -> float:
    return float(np.nanmax(np.nanmean(scores, axis=0)))


def derive_tau_range(
    val_scores: np.ndarray, val_p: np.ndarray, below_best: float, headroom: float = 0.01
) -> tuple[float, float]:
    """Training tau range from validation data only (never the test split).

    The paper's range runs from the best single model's accuracy to just under the oracle's.  Above
    what a router can reach, eq. 3 only drives lambda up, so the upper end is instead the reachable
    ceiling -- validation accuracy of routing every query to argmax_i p_i(x), or the best single
    model, whichever is higher -- plus ``headroom`` (and at most 0.01 under the oracle).  The lower end
    sits ``below_best`` under the best single model so economy tiers are trained too.  The declared
    range is then narrowed by ``calibrate`` to what validation shows is met.
    """
    observed = np.nan_to_num(val_scores, nan=0.0)
    best = best_single_accuracy(val_scores)
    quality_max = float(observed[np.arange(len(observed)), np.argmax(val_p, axis=1)].mean())
    hi = min(max(best, quality_max) + headroom, oracle_accuracy(val_scores) - 0.01, 0.999)
    lo = max(best - below_best, 0.01)
    return round(lo, 4), round(max(hi, lo + 0.02), 4)


# --------------------------------------------------------------------------------------------
# performance head
# --------------------------------------------------------------------------------------------
def fit_boosts(
    model: ProteusModel, p_oof: torch.Tensor, outcomes: torch.Tensor, config: TrainConfig
) -> float:
    """Learn b as the paper describes it: systematic per-model quality advantages that matter when
    mu favours quality.  b maximises the accuracy of quality-seeking routing (mu = 1, where eq. 2 is
    p_i + b_i) on out-of-fold predictions: max_b E_{m ~ softmax((p + b) / T)} [outcome_m], starting
    from b_i = acc_i - max_j acc_j.

    The soft objective is a surrogate, so the fitted b is kept only if its deterministic mu = 1
    accuracy on the same out-of-fold rows is higher than that of b = 0 (plain argmax_i p_i(x));
    otherwise b = 0.  Measured on MMLU: the fitted b meant "always GPT-4" and routed 0.17 pp below
    b = 0 out-of-fold, 0.9 pp on validation and 0.4 pp on test, giving away the high-school
    mathematics questions that Mixtral answers and GPT-4 does not; on RouterBench-partial the
    fitted b wins (+0.17 pp) and is kept.  Learning b from the PPO reward instead lets b and mu swap
    roles (b absorbs cost preference, mu collapses to 1): on RouterBench-partial mu = 1 then routed
    to the cheapest model.  Returns the deterministic mu = 1 training accuracy (out-of-fold).
    """

    def accuracy(boost: torch.Tensor) -> float:
        return float(outcomes.gather(-1, (p_oof + boost).argmax(-1, keepdim=True)).mean())

    acc = torch.nanmean(torch.where(torch.isfinite(outcomes), outcomes, torch.nan), dim=0)
    with torch.no_grad():
        model.boost.copy_(acc - acc.max())
    optimizer = torch.optim.Adam([model.boost], lr=config.scoring_lr * 3)
    for _ in range(config.boost_steps):
        probs = torch.softmax((p_oof + model.boost) / config.selection_temperature, dim=-1)
        loss = -(probs * outcomes).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.boost.requires_grad_(False)
    with torch.no_grad():
        fitted, plain = accuracy(model.boost), accuracy(torch.zeros_like(model.boost))
        if plain >= fitted:
            log.info("boosts: b = 0 routes better at mu = 1 than the fitted b (%.4f vs %.4f): b = 0", plain, fitted)
            model.boost.zero_()
        return max(fitted, plain)


def masked_bce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """BCE over observed cells only (NaN target = not observed)."""
    observed = torch.isfinite(targets)
    return F.binary_cross_entropy_with_logits(logits[observed], targets[observed])


def fit_performance_head(
    model: ProteusModel,
    emb_train: torch.Tensor,
    y_train: torch.Tensor,
    emb_val: torch.Tensor,
    y_val: torch.Tensor,
    config: TrainConfig,
    generator: torch.Generator,
) -> float:
    """Train projection + performance head; keep the weights with the best validation loss."""
    return fit_early_stopping(
        model,
        lambda emb: model.performance_logits(model.embed(emb)),
        masked_bce,
        emb_train,
        y_train,
        emb_val,
        y_val,
        params=list(model.projection.parameters()) + list(model.performance_head.parameters()),
        epochs=config.perf_epochs,
        lr=config.perf_lr,
        weight_decay=config.perf_weight_decay,
        batch_size=config.perf_batch_size,
        patience=config.perf_patience,
        generator=generator,
    )


def out_of_fold_predictions(
    model_config: ModelConfig, emb: torch.Tensor, y: torch.Tensor, config: TrainConfig, generator: torch.Generator
) -> torch.Tensor:
    """p_i(x) for each train row from a head that never saw that row (k-fold cross-fitting)."""
    n = len(emb)
    folds = torch.randperm(n, generator=generator) % config.oof_folds
    oof = torch.zeros_like(y)
    for fold in range(config.oof_folds):
        held = folds == fold
        fold_model = ProteusModel(model_config)
        # the fold's own early-stopping split comes from its training part
        fit_idx = torch.nonzero(~held).squeeze(-1)
        stop = fit_idx[torch.randperm(len(fit_idx), generator=generator)[: max(len(fit_idx) // 8, 1)]]
        keep = fit_idx[~torch.isin(fit_idx, stop)]
        fit_performance_head(fold_model, emb[keep], y[keep], emb[stop], y[stop], config, generator)
        with torch.no_grad():
            oof[held] = torch.sigmoid(fold_model.performance_logits(fold_model.embed(emb[held])))
    return oof


# --------------------------------------------------------------------------------------------
# reward and dual update (eq. 3, eq. 4)
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# PPO
# --------------------------------------------------------------------------------------------
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
) -> tuple[CostNormalizer, list[dict[str, float]], np.ndarray]:
    """PPO with session-based tau sampling and the Lagrangian dual.

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
    normalizer = CostNormalizer(space=config.cost_space)
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


# --------------------------------------------------------------------------------------------
# validation calibration
# --------------------------------------------------------------------------------------------
@dataclass
class OperatingCurve:
    """Deterministic routing (lambda = 1) on some rows at each policy tau of a grid."""

    accuracy: np.ndarray
    mu_mean: np.ndarray
    cost_usd: np.ndarray  # mean logged cost per query

    @staticmethod
    def pooled(a: "OperatingCurve", n_a: int, b: "OperatingCurve", n_b: int) -> "OperatingCurve":
        """The curve over a's rows and b's rows together."""
        mix = lambda x, y: (x * n_a + y * n_b) / (n_a + n_b)  # noqa: E731
        return OperatingCurve(mix(a.accuracy, b.accuracy), mix(a.mu_mean, b.mu_mean), mix(a.cost_usd, b.cost_usd))


@torch.no_grad()
def accuracy_curve(
    model: ProteusModel,
    emb: torch.Tensor,
    scores: np.ndarray,
    costs_usd: np.ndarray,
    normalizer: CostNormalizer,
    policy_taus: np.ndarray,
    tau_range: tuple[float, float],
    p: torch.Tensor | None = None,
) -> OperatingCurve:
    """Accuracy, mean mu and mean cost of deterministic routing (lambda = 1) at each policy tau.

    ``p`` overrides the performance head (out-of-fold predictions for training rows)."""
    lo, hi = tau_range
    observed = np.nan_to_num(scores, nan=0.0)
    z = model.embed(emb)
    p = torch.sigmoid(model.performance_logits(z)) if p is None else p
    cost = torch.as_tensor(normalizer.normalize(costs_usd))
    rows = np.arange(len(observed))
    accs, mus, costs = [], [], []
    for tau in policy_taus:
        mu = model.policy(z, (tau - lo) / (hi - lo), INFERENCE_LAMBDA).mean
        choice = model.scores(p, mu, cost).argmax(-1).numpy()
        accs.append(observed[rows, choice].mean())
        mus.append(float(mu.mean()))
        costs.append(costs_usd[rows, choice].mean())
    return OperatingCurve(np.asarray(accs), np.asarray(mus), np.asarray(costs))


def cost_frontier(costs: np.ndarray, accuracies: np.ndarray) -> list[int]:
    """Indices of the points on the upper concave hull of (cost, accuracy), cheapest first, with
    strictly increasing accuracy.  Routing a share of queries at each of two adjacent hull points
    reaches any accuracy between them, and no mixture of the points reaches it for less."""
    hull: list[int] = []
    for i in np.lexsort((-accuracies, costs)):  # by cost, the more accurate first on ties
        if hull and accuracies[i] <= accuracies[hull[-1]]:
            continue  # costs as much as a kept point, no more accurate
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b on or under the chord a -> i: mixing a and i beats it
            if (accuracies[b] - accuracies[a]) * (costs[i] - costs[a]) <= (accuracies[i] - accuracies[a]) * (costs[b] - costs[a]) + 1e-12:
                hull.pop()
            else:
                break
        hull.append(int(i))
    return hull


def calibrate(
    policy_taus: np.ndarray,
    accuracies: np.ndarray,
    margin: float,
    step: float,
    costs_usd: np.ndarray | None = None,
) -> tuple[TauCalibration, tuple[float, float]]:
    """Monotone table requested tau -> smallest policy tau whose validation accuracy (made
    non-decreasing from above: acc_c(t) = min_{t' >= t} acc(t')) reaches requested + margin.
    Given the curve's ``costs_usd``, also the cost frontier of (cost, acc_c) for mixing.

    Declared range: from the training range's lower end up to the highest requested tau reachable.
    """
    conservative = np.minimum.accumulate(accuracies[::-1])[::-1]
    lo = float(policy_taus[0])
    top = float(conservative[-1] - margin)
    hi = max(top, lo + step)
    requested = np.round(np.arange(lo, hi + 1e-9, step), 6)
    mapped = []
    for target in requested:
        ok = np.nonzero(conservative >= target + margin)[0]
        mapped.append(float(policy_taus[ok[0]]) if ok.size else float(policy_taus[-1]))
    frontier = [] if costs_usd is None else cost_frontier(np.asarray(costs_usd), conservative)
    table = TauCalibration(
        requested=requested.tolist(),
        policy_tau=mapped,
        margin=margin,
        frontier_policy_tau=[float(policy_taus[i]) for i in frontier],
        frontier_accuracy=[float(conservative[i]) for i in frontier],
        frontier_cost_usd=[float(f"{costs_usd[i]:.6g}") for i in frontier] if costs_usd is not None else [],
    )
    return table, (round(lo, 4), round(float(requested[-1]), 4))


# --------------------------------------------------------------------------------------------
# the whole pipeline
# --------------------------------------------------------------------------------------------
def set_determinism(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def make_encoder(config: TrainConfig, name: str | None = None) -> TextEncoder:
    """The frozen encoder ``name`` (default: ``config.encoder``) with the embedding cache."""
    cache = os.path.join(config.cache_dir, "embeddings") if config.cache_dir else None
    return TextEncoder(
        name or config.encoder,
        device=config.device,
        max_tokens=config.max_tokens,
        truncation=config.truncation,  # type: ignore[arg-type]
        cache_dir=cache,
    )


BUNDLED_ENCODER_DIR = "encoder"  # a fine-tuned or static encoder travels inside the artifact


def finetune_encoder(
    encoder: TextEncoder, data: RoutingLog, train_idx: np.ndarray, config: TrainConfig, generator: torch.Generator
) -> None:
    """--finetune-encoder: adapt the encoder to the routing task with the performance loss.

    A temporary projection + performance head is trained jointly with the encoder (encoder_lr for
    the encoder, perf_lr for the head) for ``finetune_epochs`` epochs of masked BCE on the train
    split; the tuned encoder then re-embeds every prompt (its cache fingerprint changes, so cached
    frozen embeddings are never reused) and is saved inside the artifact.
    """
    encoder.name = f"{encoder.name}+finetuned(seed={config.seed})"
    encoder.cache = None
    head = ProteusModel(ModelConfig(embed_dim=encoder.embed_dim, n_models=len(data.models), hidden_dim=config.hidden_dim))
    head.to(encoder.device)
    optimizer = torch.optim.AdamW(
        [
            {"params": encoder.model.parameters(), "lr": config.encoder_lr},
            {"params": list(head.projection.parameters()) + list(head.performance_head.parameters()), "lr": config.perf_lr},
        ],
        weight_decay=config.perf_weight_decay,
    )
    targets = torch.as_tensor(data.scores, dtype=torch.float32)
    bar = None
    if config.progress:  # minutes per epoch on CPU: say so
        from tqdm.auto import tqdm

        per_epoch = -(-len(train_idx) // config.batch_size)
        bar = tqdm(total=config.finetune_epochs * per_epoch, desc="fine-tuning the encoder", unit="batch")
    encoder.model.train()
    for _epoch in range(config.finetune_epochs):
        order = train_idx[torch.randperm(len(train_idx), generator=generator).numpy()]
        for start in range(0, len(order), config.batch_size):
            idx = order[start : start + config.batch_size]
            emb = encoder.encode_tensor([data.prompts[i] for i in idx])
            loss = masked_bce(head.performance_logits(head.embed(emb)), targets[idx].to(encoder.device))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(encoder.model.parameters(), config.max_grad_norm)
            optimizer.step()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.4f}")
    if bar is not None:
        bar.close()
    encoder.model.eval()
    encoder.model.to("cpu" if encoder.device == "cpu" else encoder.device)


def average_tokens(data: RoutingLog, tokens: np.ndarray | None, default: float) -> dict[str, float]:
    if tokens is None:
        return {m: default for m in data.models}
    values = np.asarray(tokens, dtype=np.float64)
    if values.ndim == 1:
        values = np.repeat(values[:, None], len(data.models), axis=1)
    means = np.nanmean(np.where(np.isfinite(values), values, np.nan), axis=0)
    return {m: float(v) if np.isfinite(v) else default for m, v in zip(data.models, means)}


def train(config: TrainConfig, out_dir: str | os.PathLike) -> Manifest:
    threads = torch.get_num_threads()
    # The heads are tiny: thread synchronisation costs more than it saves (measured 30 ms vs 350 ms
    # per PPO batch on 2 busy cores).  The encoder, which has real matmuls, keeps all threads.
    try:
        return _train(config, out_dir, threads)
    finally:
        torch.set_num_threads(threads)


def _train(config: TrainConfig, out_dir: str | os.PathLike, encoder_threads: int) -> Manifest:
    started = time.perf_counter()
    set_determinism(config.seed)
    rng = np.random.default_rng(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    data = load_training_data(config)
    parts = {name: np.flatnonzero(data.split == name) for name in ("train", "val", "test")}
    static_dir = None
    if config.static_encoder and not config.finetune_encoder:  # fine-tuning trains the transformer itself
        static_dir = cached_static_encoder(config.encoder, config.cache_dir, device=config.device, progress=config.progress)
    encoder = make_encoder(config, str(static_dir) if static_dir else None)
    if config.finetune_encoder:
        finetune_encoder(encoder, data, parts["train"], config, generator)
    embeddings = encoder.encode(data.prompts, progress=config.progress)
    timings = {"encode_s": time.perf_counter() - started}
    torch.set_num_threads(1)
    if len(parts["train"]) < 10 or len(parts["val"]) < 5:
        raise ValueError(
            f"too little data after splitting: {({k: len(v) for k, v in parts.items()})} rows; training needs at least "
            "10 train and 5 validation rows (some 50+ rows with the default split; thousands to route well)"
        )
    train_idx, val_idx = parts["train"], parts["val"]
    emb_t = torch.as_tensor(embeddings)
    y = torch.as_tensor(data.scores, dtype=torch.float32)
    costs = fill_missing_costs(data.costs)

    model_config = ModelConfig(
        embed_dim=encoder.embed_dim,
        n_models=len(data.models),
        hidden_dim=config.hidden_dim,
        use_critic=config.use_critic,
        fixed_gamma=config.fixed_gamma,
        selection_temperature=config.selection_temperature,
    )
    model = ProteusModel(model_config)

    t0 = time.perf_counter()
    val_bce = fit_performance_head(model, emb_t[train_idx], y[train_idx], emb_t[val_idx], y[val_idx], config, generator)
    p_oof = out_of_fold_predictions(model_config, emb_t[train_idx], y[train_idx], config, generator)
    timings["performance_head_s"] = time.perf_counter() - t0
    train_scores = torch.as_tensor(data.scores[train_idx], dtype=torch.float32)
    quality_accuracy = fit_boosts(model, p_oof, torch.where(torch.isfinite(train_scores), train_scores, p_oof), config)
    log.info("boosts: mu=1 routing accuracy on train (out-of-fold) %.4f", quality_accuracy)
    log.info("performance head: validation BCE %.4f", val_bce)
    with torch.no_grad():
        val_p = torch.sigmoid(model.performance_logits(model.embed(emb_t[val_idx]))).numpy()
    tau_range = tuple(config.tau_range) if config.tau_range else derive_tau_range(
        data.scores[val_idx], val_p, config.tau_below_best
    )
    log.info("tau training range [%.4f, %.4f]", *tau_range)

    t0 = time.perf_counter()
    normalizer, history, lambdas = train_policy(
        model, emb_t[train_idx], data.scores[train_idx], costs[train_idx], p_oof, tau_range, config, rng
    )
    timings["ppo_s"] = time.perf_counter() - t0

    # The policy sees lambda = 1 at inference but larger multipliers in high-tau training sessions,
    # so its top operating points sit at policy taus a little past the training range: calibration
    # may use them (tau_norm up to 1 + calibration_extrapolate), validated like every other point.
    top = tau_range[1] + config.calibration_extrapolate * (tau_range[1] - tau_range[0])
    policy_taus = np.round(np.arange(tau_range[0], top + 1e-9, config.calibration_step), 6)
    val_curve = accuracy_curve(
        model, emb_t[val_idx], data.scores[val_idx], costs[val_idx], normalizer, policy_taus, tau_range
    )
    oof_curve = accuracy_curve(
        model, emb_t[train_idx], data.scores[train_idx], costs[train_idx], normalizer, policy_taus, tau_range, p_oof
    )
    # Calibrate on validation and out-of-fold training rows together (4-5x the rows of validation
    # alone, so the curve is far less noisy), taking the lower of the pooled and validation curves
    # (+ calibration_val_slack): the policy was trained on the training rows, and measured on MMLU
    # their curve runs 1.2-1.4 pp above validation, so it may only ever make the table stricter.
    n_val, n_oof = len(val_idx), len(train_idx)
    pooled = OperatingCurve.pooled(val_curve, n_val, oof_curve, n_oof)
    calibration_acc = np.minimum(pooled.accuracy, val_curve.accuracy + config.calibration_val_slack)
    # The margin makes the promise hold on *new* traffic, not just on the calibration rows: accuracy
    # measured over a future sample as large as the validation split stays >= tau with ~90 %
    # confidence when it covers both estimates' noise, z * sqrt(t (1 - t) (1/n_cal + 1/n_val))
    # (z = 1.28, t = best single model's validation accuracy), never below calibration_margin.
    # Measured: with 0.005 the MMLU artifact missed 7 of 11 test taus by 0.1-0.8 pp.
    level = best_single_accuracy(data.scores[val_idx])
    spread = math.sqrt(level * (1 - level) * (1 / (n_val + n_oof) + 1 / n_val))
    margin = max(config.calibration_margin, config.calibration_z * spread)
    if config.calibrate:
        frontier_costs = pooled.cost_usd if config.mix_operating_points else None
        calibration, declared = calibrate(policy_taus, calibration_acc, margin, config.calibration_step, frontier_costs)
    else:
        calibration, declared = TauCalibration(), tau_range
    timings["total_s"] = time.perf_counter() - started

    train_config = {k: v for k, v in asdict(config).items() if k not in ("progress",)}
    bundled = config.finetune_encoder or static_dir is not None
    manifest = Manifest(
        models=data.models,
        encoder=EncoderSpec(
            name=BUNDLED_ENCODER_DIR if bundled else config.encoder,
            bundled=bundled,
            static_from=config.encoder if static_dir else None,
            embed_dim=encoder.embed_dim,
            max_tokens=config.max_tokens,
            truncation=config.truncation,
        ),
        architecture=model_config,
        tau_range=declared,
        tau_train_range=tau_range,
        cost_normalization=normalizer.to_dict(),
        avg_input_tokens=average_tokens(data.subset(train_idx), None if data.input_tokens is None else data.input_tokens[train_idx], 500.0),
        avg_output_tokens=average_tokens(
            data.subset(train_idx), None if data.output_tokens is None else data.output_tokens[train_idx], 256.0
        ),
        calibration=calibration,
        training={
            "config": train_config,
            "device": resolve_device(config.device),
            "timings_s": {k: round(v, 2) for k, v in timings.items()},
            "final": history[-1] if history else {},
            "lambda_per_tau_bin": np.round(lambdas, 4).tolist(),
        },
        data=DataRecord(
            paths=[str(Path(p).resolve()) for p in config.data],
            sha256=data.sha256 or data.content_hash(),
            source=data.source,
            n_rows=len(data),
            split={k: int(len(v)) for k, v in parts.items()},
            split_method=data.split_method,
            split_seed=config.seed,
            prices=read_price_file(config.prices),
            skip_contaminated=config.skip_contaminated,
        ),
        metrics={
            "val_bce": round(val_bce, 5),
            "val_best_single_accuracy": round(best_single_accuracy(data.scores[val_idx]), 4),
            "val_oracle_accuracy": round(oracle_accuracy(data.scores[val_idx]), 4),
            "val_curve": {
                "policy_tau": policy_taus.tolist(),
                "accuracy": np.round(val_curve.accuracy, 4).tolist(),
                "mu_mean": np.round(val_curve.mu_mean, 4).tolist(),
                "cost_usd": np.round(val_curve.cost_usd, 8).tolist(),
                "train_oof_accuracy": np.round(oof_curve.accuracy, 4).tolist(),
                "calibration_accuracy": np.round(calibration_acc, 4).tolist(),
                "calibration_cost_usd": np.round(pooled.cost_usd, 8).tolist(),
            },
        },
        package_version=__version__,
    )
    # The encoder goes in first: save_artifact records its files' hashes in the manifest.
    if config.finetune_encoder:
        encoder.model.save_pretrained(Path(out_dir) / BUNDLED_ENCODER_DIR)
        encoder.tokenizer.save_pretrained(Path(out_dir) / BUNDLED_ENCODER_DIR)
    if static_dir is not None:
        copy_static_encoder(static_dir, Path(out_dir) / BUNDLED_ENCODER_DIR)
    save_artifact(out_dir, model, manifest)
    return manifest
