"""The supervised parts of PROTEUS: the performance head p_i(x) and the quality boosts b.

- ``fit_performance_head``: projection + head with masked BCE (NaN = unobserved), early stopping;
- ``doubly_robust_targets`` / ``masked_squared_error``: the decision-log alternative, a head
  regressed on doubly robust pseudo-outcomes (``--propensity-weighting dr``);
- ``out_of_fold_predictions``: p_i(x) for each training row from a head that never saw it (what PPO
  scores models with, so the policy does not learn from overfit predictions);
- ``fit_boosts``: b fitted for quality-seeking routing (mu = 1).
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch.nn import functional as F

from litellm_proteus.model import ModelConfig, ProteusModel

from .config import TrainConfig
from .fitting import fit_early_stopping
from .off_policy import BanditRows

log = logging.getLogger("proteus.train")


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


def masked_bce(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """BCE over observed cells only (NaN target = not observed).

    ``weights`` ([N] per row): the weighted mean sum(w * bce) / sum(w) over observed cells --
    self-normalised, so the loss scale does not depend on the propensities' scale."""
    observed = torch.isfinite(targets)
    if weights is None:
        return F.binary_cross_entropy_with_logits(logits[observed], targets[observed])
    cell_weights = weights[:, None].expand_as(targets)[observed]
    losses = F.binary_cross_entropy_with_logits(logits[observed], targets[observed], reduction="none")
    return (cell_weights * losses).sum() / cell_weights.sum().clamp_min(1e-12)


def ips_weights(propensity: "np.ndarray | None", clip: float) -> torch.Tensor | None:
    """Per-row inverse-propensity weights min(1 / propensity, clip) for bandit rows, 1 for
    full-information rows (NaN propensity); None when no row has a propensity below 1 (then the
    loss is the plain masked BCE, bit for bit)."""
    if propensity is None:
        return None
    prop = np.asarray(propensity, dtype=np.float64)
    if not (np.isfinite(prop) & (prop < 1)).any():
        return None
    weights = np.where(np.isfinite(prop), np.minimum(1.0 / np.clip(prop, 1e-12, 1.0), clip), 1.0)
    return torch.as_tensor(weights, dtype=torch.float32)


def doubly_robust_targets(
    q: np.ndarray, scores: np.ndarray, logged_choice: np.ndarray | None, propensity: np.ndarray | None, clip: float
) -> np.ndarray:
    """Per cell, the doubly robust pseudo-outcome (``BanditRows.dr_matrix``) on bandit rows; the
    observed scores, NaN where unscored, on full-information rows (logged choice -1).

    ``q`` ([N, K]): predictions that never saw the row's outcome (out-of-fold, or a head fitted on
    other rows).  Every slot of every bandit row gets a target, and a slot's mean target is
    unbiased where q or the propensity is right (up to the clip)."""
    if logged_choice is None:
        return np.array(scores, dtype=np.float64, copy=True)
    rows = BanditRows(np.asarray(scores, dtype=np.float64), logged_choice, propensity, clip=clip)
    return np.where((rows.logged_choice >= 0)[:, None], rows.dr_matrix(np.asarray(q, dtype=np.float64)), scores)


def masked_squared_error(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean (sigmoid(logit) - target)^2 over observed cells: the loss for doubly robust targets,
    which may lie outside [0, 1] (BCE is defined on [0, 1] only)."""
    observed = torch.isfinite(targets)
    return (torch.sigmoid(logits[observed]) - targets[observed]).pow(2).mean()


def fit_performance_head(
    model: ProteusModel,
    emb_train: torch.Tensor,
    y_train: torch.Tensor,
    emb_val: torch.Tensor,
    y_val: torch.Tensor,
    config: TrainConfig,
    generator: torch.Generator,
    weights: torch.Tensor | None = None,
    weights_val: torch.Tensor | None = None,
    loss=masked_bce,
) -> float:
    """Train projection + performance head; keep the weights with the best validation loss.

    ``weights`` / ``weights_val``: per-row loss weights (``ips_weights``), None = unweighted;
    ``loss``: ``masked_bce`` on outcomes, ``masked_squared_error`` on doubly robust targets."""
    return fit_early_stopping(
        model,
        lambda emb: model.performance_logits(model.embed(emb)),
        loss,
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
        weights=weights,
        weights_val=weights_val,
        epoch_rows=config.perf_epoch_rows,
    )


def out_of_fold_predictions(
    model_config: ModelConfig, emb: torch.Tensor, y: torch.Tensor, config: TrainConfig, generator: torch.Generator,
    weights: torch.Tensor | None = None, init: dict[str, torch.Tensor] | None = None,
    groups: np.ndarray | None = None,
) -> torch.Tensor:
    """p_i(x) for each train row from a head that never saw that row (k-fold cross-fitting).

    ``groups`` ([N] ids, e.g. one per distinct prompt): rows of a group share a fold, so a prompt
    repeated in the traffic is never predicted by a head that trained on its repeat."""
    n = len(emb)
    if groups is None:
        folds = torch.randperm(n, generator=generator) % config.oof_folds
    else:
        _, group_index = np.unique(np.asarray(groups), return_inverse=True)
        group_fold = torch.randperm(int(group_index.max()) + 1, generator=generator) % config.oof_folds
        folds = group_fold[torch.as_tensor(group_index)]
    folds = folds.to(emb.device)
    oof = torch.zeros_like(y)
    for fold in range(config.oof_folds):
        held = folds == fold
        fold_model = ProteusModel(model_config).to(emb.device)
        if init is not None:  # --init: every fold starts from the initial artifact, like the main head
            fold_model.load_state_dict(init)  # load_state_dict copies onto the fold model's device
        # the fold's own early-stopping split comes from its training part
        fit_idx = torch.nonzero(~held).squeeze(-1)
        stop = fit_idx[torch.randperm(len(fit_idx), generator=generator).to(emb.device)[: max(len(fit_idx) // 8, 1)]]
        keep = fit_idx[~torch.isin(fit_idx, stop)]
        pick = (lambda rows: None) if weights is None else (lambda rows: weights[rows])  # noqa: E731
        fit_performance_head(fold_model, emb[keep], y[keep], emb[stop], y[stop], config, generator, pick(keep), pick(stop))
        with torch.no_grad():
            oof[held] = torch.sigmoid(fold_model.performance_logits(fold_model.embed(emb[held])))
    return oof


def fit_doubly_robust_head(
    model: ProteusModel,
    emb_train: torch.Tensor,
    emb_val: torch.Tensor,
    scores_train: np.ndarray,
    scores_val: np.ndarray,
    q_train: np.ndarray,
    bandit_train: tuple[np.ndarray, np.ndarray],
    bandit_val: tuple[np.ndarray, np.ndarray],
    config: TrainConfig,
    generator: torch.Generator,
) -> float:
    """``--propensity-weighting dr``, stage 2: refit the stage-1 head on doubly robust targets (squared error).

    ``q_train``: out-of-fold predictions for the training rows; the validation rows' q is the
    stage-1 head itself, which never trained on them.  ``bandit_*``: (logged choice, propensity)."""
    with torch.no_grad():
        q_val = torch.sigmoid(model.performance_logits(model.embed(emb_val))).cpu().numpy()

    def targets(q: np.ndarray, scores: np.ndarray, bandit: tuple[np.ndarray, np.ndarray]) -> torch.Tensor:
        t = doubly_robust_targets(q, scores, *bandit, clip=config.propensity_clip)
        return torch.as_tensor(t, dtype=torch.float32, device=emb_train.device)

    return fit_performance_head(
        model, emb_train, targets(q_train, scores_train, bandit_train), emb_val, targets(q_val, scores_val, bandit_val),
        config, generator, loss=masked_squared_error,
    )
