"""``proteus train``: routing logs in, a validated artifact out (paper section 2), top to bottom.

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
   eq. 4 taken in expectation over the model choice softmax(eq. 2 / T) -- exact where the logs hold
   every model's outcome, and far less noisy than sampling one model; on a decision log every
   outcome is the out-of-fold p, so that no training label reaches the reward and every
   calibration row can certify the policy -- and the dual update of eq. 3 every 5 batches on the
   accuracy of deterministic (argmax) routing;
5. calibrate on validation + out-of-fold training rows: each slot's p_i(x) (isotonic or Platt,
   ``p_calibration.py``) and a monotone table requested tau -> policy tau
   such that accuracy meets the requested tau (+ margin); the declared tau range is where that is
   possible (never using the test split).  Also the cost frontier of those operating points: the
   runtime reaches a tau between two frontier points by routing a prompt-hash share of queries at
   each (``--no-mix-operating-points`` turns it off);
6. write the artifact (weights + manifest).

Hyper-parameters live in ``TrainConfig`` (``config.py``); every one is a ``proteus train`` flag.  Paper defaults are
kept (AdamW 3e-4, batch 32, clip 1.0, eta_lambda 0.4, dual update every 5 batches) except where a
measurement on RouterBench-partial said otherwise -- each such choice is documented where it is
made: 1,500 PPO batches (x 8 mu samples per query) in 8 tau sessions trained side by side, the
learning rates scaled by sqrt(8) (docs/training-speed.md), one dual variable per tau bin started at 5, the
frozen-out-of-fold performance head, b fitted for quality, and the validation calibration.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import replace as replace_config
from pathlib import Path
from typing import Any

import numpy as np
import torch

from litellm_proteus import __version__
from litellm_proteus.artifact import MANIFEST_FILE, Manifest, TauCalibration, load_artifact, read_manifest, save_artifact
from litellm_proteus.costs import CostNormalizer
from litellm_proteus.encoder import resolve_device
from litellm_proteus.model import ModelConfig, ProteusModel
from litellm_proteus.operating_points import POLICY

from .calibration import (
    CalibrationRows,
    CandidatePoint,
    OperatingCurve,
    UnreachableTauRange,
    accuracy_curve,
    best_single_accuracy,
    calibrate,
    calibration_sample,
    cluster_ladders,
    derive_tau_range,
    kmeans,
    rule_points,
)
from .config import TrainConfig
from .data.logs import RoutingLog
from .distill import cached_static_encoder, copy_static_encoder
from .encoding import BUNDLED_ENCODER_DIR, finetune_encoder, training_encoder
from .manifest import average_costs, average_tokens, data_record, encoder_spec, training_record, validation_metrics
from .heads import (
    fit_boosts,
    fit_doubly_robust_head,
    fit_performance_head,
    ips_weights,
    masked_bce,
    out_of_fold_predictions,
)
from .off_policy import BanditRows
from .off_policy_calibration import off_policy_calibration, require_validation_rows
from .p_calibration import fit_p_calibration
from .p_reference import with_reference_p
from .ppo import train_policy
from .routing import fill_missing_costs

log = logging.getLogger("proteus.train")


def load_training_data(config: TrainConfig) -> RoutingLog:
    from .data import assign_splits, load_logs, read_price_file

    data = load_logs(
        config.data,
        format=config.format,
        prices=read_price_file(config.prices),
        seed=config.seed,
        skip_contaminated=config.skip_contaminated,
        validation_share=config.validation_share,
    )
    if config.init:  # the initial artifact's slots, in its head order
        data = data.with_models(read_manifest(config.init).models)
    # A decision log brings its own split (by prompt hash, val: --validation-share); it has no test part.
    # A validation part carved by row would put a repeated prompt on both sides: refused instead.
    if data.bandit and not (np.asarray(data.split) == "val").any():
        prompts = len(set(data.prompts))
        raise ValueError(
            f"no prompt of the decision log falls into the validation share ({config.validation_share:g} of prompts, "
            f"by prompt hash; {prompts} distinct prompts): the tau table can only be vouched for on prompts no fit "
            "has seen. Collect traffic with more distinct prompts, or pass a larger --validation-share")
    ratios = (1 - config.validation_share, config.validation_share, 0.0) if data.bandit else (0.7, 0.15, 0.15)
    return assign_splits(data, seed=config.seed, ratios=ratios)


def set_determinism(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def operating_point_candidates(
    model: ProteusModel,
    emb_t: torch.Tensor,
    embeddings: np.ndarray,
    scores: np.ndarray,
    costs: np.ndarray,
    train_idx: np.ndarray,
    val_idx: np.ndarray,
    p_oof: torch.Tensor,
    val_p: np.ndarray,
    normalizer,
    policy_taus: np.ndarray,
    tau_range: tuple[float, float],
    config: TrainConfig,
) -> tuple[list[CandidatePoint], np.ndarray | None]:
    """The operating points beside the policy grid (``calibration.rule_points``), measured like the
    grid: validation + out-of-fold training rows pooled, no higher than validation + the slack.

    The policy past the grid (up to tau = 1, where quality lives when the trained range stops short
    of it), each single model, quality-greedy argmax p + b, and cluster ladders: k-means of the
    training embeddings, each ladder a slot per cluster fitted on the training rows."""
    n_val, n_oof = len(val_idx), len(train_idx)
    beyond = policy_taus[-1] < 1.0
    extra: list[CandidatePoint] = []
    if beyond:
        taus = np.round(np.linspace(policy_taus[-1], 1.0, 6)[1:], 6)
        val_curve = accuracy_curve(model, emb_t[val_idx], scores[val_idx], costs[val_idx], normalizer, taus, tau_range)
        oof_curve = accuracy_curve(
            model, emb_t[train_idx], scores[train_idx], costs[train_idx], normalizer, taus, tau_range, p_oof
        )
        pooled = OperatingCurve.pooled(val_curve, n_val, oof_curve, n_oof)
        acc = np.minimum(pooled.accuracy, val_curve.accuracy + config.calibration_val_slack)
        extra += [CandidatePoint(POLICY, float(a), float(c), float(t)) for t, a, c in zip(taus, acc, pooled.cost_usd)]
    centroids, ladders = None, None
    if config.calibration_clusters > 1 and len(train_idx) >= 10 * config.calibration_clusters:
        centroids = kmeans(embeddings[train_idx], config.calibration_clusters, config.seed)
        ladders = cluster_ladders(embeddings[train_idx], scores[train_idx], costs[train_idx], centroids)
    val_rows = CalibrationRows(embeddings[val_idx], scores[val_idx], costs[val_idx], val_p)
    train_rows = CalibrationRows(embeddings[train_idx], scores[train_idx], costs[train_idx], p_oof.cpu().numpy())
    boost = model.boost.detach().cpu().numpy()
    extra += rule_points([val_rows, train_rows], boost, centroids, ladders, val_rows, config.calibration_val_slack)
    return extra, centroids


INIT_ARCHITECTURE_FLAGS = {"hidden_dim": "--hidden-dim", "use_critic": "--no-critic", "fixed_gamma": "--fixed-gamma",
                           "selection_temperature": "--selection-temperature"}


def init_architecture(config: TrainConfig, architecture: ModelConfig) -> dict[str, Any]:
    """The architecture fields of ``config`` as the ``--init`` artifact has them (its weights fix
    them), so the run and its record use what the model is.  A flag set to another value is an error
    naming it: it would be ignored."""
    defaults = TrainConfig()
    clash = [f"{flag} {getattr(config, name)!r} (the artifact's: {getattr(architecture, name)!r})"
             for name, flag in INIT_ARCHITECTURE_FLAGS.items()
             if getattr(config, name) != getattr(defaults, name) and getattr(config, name) != getattr(architecture, name)]
    if clash:
        raise ValueError(f"--init {config.init}: the initial artifact fixes the architecture; leave out {', '.join(clash)}")
    return {name: getattr(architecture, name) for name in INIT_ARCHITECTURE_FLAGS}


def unreachable_range_message(exc: UnreachableTauRange, tau_range: tuple[float, float], config: TrainConfig,
                              from_init: bool, n_val: int, n_oof: int) -> str:
    """The error for a tau range no operating point meets: what was reached, where the range came
    from, and what to try."""
    source = ("--tau-range" if config.tau_range else "the --init artifact's training range" if from_init
              else "the range derived from the validation data")
    reach = exc.reachable
    if config.tau_range or from_init:
        fix = (f"pass a lower --tau-range, LO at most {reach:.4f} (e.g. --tau-range {max(reach - 0.1, 0.01):.2f} "
               f"{max(reach, 0.02):.2f})" if reach > 0.01 else "check the routing log's scores")
        if config.tau_range:
            fix += ", or leave --tau-range out for the range derived from the data"
    else:
        fix = (f"pass --tau-range with LO at most {reach:.4f}, or train on more rows (a larger validation split "
               "narrows the margin)" if reach > 0.01 else
               "no model is right often enough for any accuracy target: check the routing log's scores (all 0?)")
    return (f"the declared tau range cannot be met: the best operating point reaches validation accuracy {exc.best:.4f} "
            f"({n_val} validation + {n_oof} out-of-fold rows), under the bottom of {source} "
            f"[{tau_range[0]:.4f}, {tau_range[1]:.4f}] + margin {exc.margin:.4f}; {fix}")


def check_out_dir(out_dir: str | os.PathLike) -> None:
    """Refuse an ``--out`` that cannot become the artifact directory before any work: an existing
    file, a path under one, or a folder that holds files but no artifact (training writes the
    artifact's files over whatever is there: an artifact is replaced, nothing else is)."""
    path = Path(out_dir)
    if path.is_dir() and any(path.iterdir()) and not (path / MANIFEST_FILE).is_file():
        raise ValueError(f"--out {str(path)!r} holds files but no PROTEUS artifact ({MANIFEST_FILE}): training would "
                         "write over them; name a new or empty folder, or an artifact to replace")
    for at in (path, *path.parents):
        if at.exists():
            if not at.is_dir():
                where = "is a file" if at == path else f"lies under {str(at)!r}, which is a file"
                raise ValueError(f"--out {str(path)!r} {where}, not a directory: name a directory (new or existing) "
                                 "to write the artifact into")
            return


def check_split_sizes(sizes: dict[str, int], batch_size: int) -> None:
    """Refuse, before any encoding, a log whose parts cannot train.  A PPO batch is ``batch_size``
    distinct training rows.  A log with fewer is an error rather than a batch clipped to the rows:
    clipping would silently change the optimisation the flags asked for (every batch the same rows,
    so the dual update's batch accuracy stops being a sample), and an operator who wants that can
    say so with --batch-size."""
    if sizes["train"] < 10 or sizes["val"] < 5:
        raise ValueError(
            f"too little data after splitting: {sizes} rows; training needs at least "
            "10 train and 5 validation rows (some 50+ rows with the default split; thousands to route well)"
        )
    if sizes["train"] < batch_size:
        raise ValueError(
            f"--batch-size {batch_size} is more than the {sizes['train']} training rows of this log "
            f"(split {sizes}): each PPO batch draws --batch-size distinct training rows. Pass --batch-size "
            f"{sizes['train']} or less, or train on a larger log (thousands of rows to route well)"
        )


def train(config: TrainConfig, out_dir: str | os.PathLike) -> Manifest:
    check_out_dir(out_dir)
    threads = torch.get_num_threads()
    # The heads are tiny: thread synchronisation costs more than it saves (measured 30 ms vs 350 ms
    # per PPO batch on 2 busy cores).  The encoder, which has real matmuls, keeps all threads.
    try:
        return _train(config, out_dir)
    finally:
        torch.set_num_threads(threads)


def _train(config: TrainConfig, out_dir: str | os.PathLike) -> Manifest:
    started = time.perf_counter()
    set_determinism(config.seed)
    rng = np.random.default_rng(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    data = load_training_data(config)
    parts = {name: np.flatnonzero(data.split == name) for name in ("train", "val", "test")}
    check_split_sizes({k: len(v) for k, v in parts.items()}, config.batch_size)
    static_dir = None
    init_model, init_manifest = load_artifact(config.init) if config.init else (None, None)
    if init_manifest is not None:  # the initial artifact's encoder and architecture, exactly
        config = replace_config(config, max_tokens=init_manifest.encoder.max_tokens,
                                truncation=init_manifest.encoder.truncation, finetune_encoder=False,
                                **init_architecture(config, init_manifest.architecture))
        encoder = training_encoder(config, init_manifest.encoder.resolve(config.init))
        if init_manifest.encoder.bundled:
            static_dir = Path(init_manifest.encoder.resolve(config.init))
    elif config.static_encoder and not config.finetune_encoder:  # fine-tuning trains the transformer itself
        static_dir = cached_static_encoder(config.encoder, config.cache_dir, device=config.device, progress=config.progress)
    if init_manifest is None:
        encoder = training_encoder(config, str(static_dir) if static_dir else None)
    if config.finetune_encoder:
        finetune_encoder(encoder, data, parts["train"], config, generator)
    embeddings = encoder.encode(data.prompts, progress=config.progress)
    timings = {"encode_s": time.perf_counter() - started}
    torch.set_num_threads(1)
    train_idx, val_idx = parts["train"], parts["val"]
    # Heads, PPO and the operating curves run on config.device (where the encoder ran); the artifact is saved from the CPU.
    device = resolve_device(config.device)
    emb_t = torch.as_tensor(embeddings, device=device)
    y = torch.as_tensor(data.scores, dtype=torch.float32, device=device)
    costs = fill_missing_costs(data.costs)

    model_config = init_manifest.architecture if init_manifest is not None else ModelConfig(
        embed_dim=encoder.embed_dim,
        n_models=len(data.models),
        hidden_dim=config.hidden_dim,
        use_critic=config.use_critic,
        fixed_gamma=config.fixed_gamma,
        selection_temperature=config.selection_temperature,
    )
    model = ProteusModel(model_config)
    init_state = None
    if init_model is not None:
        init_state = {k: v.detach().clone() for k, v in init_model.state_dict().items()}
        model.load_state_dict(init_state)
    model.to(device)
    weights = ips_weights(data.propensity, config.propensity_clip) if config.propensity_weighting == "ips" else None
    weights = None if weights is None else weights.to(device)
    w_train, w_val = (None, None) if weights is None else (weights[train_idx], weights[val_idx])

    t0 = time.perf_counter()
    val_bce = fit_performance_head(model, emb_t[train_idx], y[train_idx], emb_t[val_idx], y[val_idx], config, generator,
                                   w_train, w_val)
    groups = np.asarray([data.prompts[i] for i in train_idx], dtype=object) if data.bandit else None  # repeats
    p_oof = out_of_fold_predictions(model_config, emb_t[train_idx], y[train_idx], config, generator, w_train, init_state,
                                    groups)
    if config.propensity_weighting == "dr" and data.bandit:
        # stage 2 refits the served head; PPO keeps scoring with the stage-1 out-of-fold head (direct method)
        dr_error = fit_doubly_robust_head(
            model, emb_t[train_idx], emb_t[val_idx], data.scores[train_idx], data.scores[val_idx], p_oof.cpu().numpy(),
            (data.logged_choice[train_idx], data.propensity[train_idx]), (data.logged_choice[val_idx], data.propensity[val_idx]),
            config, generator,
        )
        with torch.no_grad():  # the served head's BCE is what the manifest reports
            stage1_bce, val_bce = val_bce, float(masked_bce(model.performance_logits(model.embed(emb_t[val_idx])), y[val_idx]))
        log.info("performance head: doubly robust refit, validation squared error %.4f (stage-1 BCE %.4f)", dr_error,
                 stage1_bce)
    timings["performance_head_s"] = time.perf_counter() - t0
    train_scores = torch.as_tensor(data.scores[train_idx], dtype=torch.float32, device=device)
    quality_accuracy = fit_boosts(model, p_oof, torch.where(torch.isfinite(train_scores), train_scores, p_oof), config)
    log.info("boosts: mu=1 routing accuracy on train (out-of-fold) %.4f", quality_accuracy)
    log.info("performance head: validation BCE %.4f", val_bce)
    with torch.no_grad():
        val_p = torch.sigmoid(model.performance_logits(model.embed(emb_t[val_idx]))).cpu().numpy()
    # bandit rows: the head's prediction stands in for every unlabelled slot (direct method)
    val_scores = np.where(np.isfinite(data.scores[val_idx]), data.scores[val_idx], val_p) if data.bandit \
        else data.scores[val_idx]
    if config.tau_range:
        tau_range = tuple(config.tau_range)
    elif init_manifest is not None:  # the initial policy's tau_norm is defined on its training range
        tau_range = tuple(init_manifest.tau_train_range)
    else:
        tau_range = derive_tau_range(val_scores, val_p, config.tau_below_best)
    log.info("tau training range [%.4f, %.4f]", *tau_range)
    # Calibrated p (what decisions report and the compliance controller steers by): validation and
    # out-of-fold training rows, the same rows the tau table is calibrated on.
    # Past config.calibration_rows rows (each part) calibration measures on a seeded sample of them.
    val_pos = calibration_sample(len(val_idx), config.calibration_rows, config.seed)
    oof_pos = calibration_sample(len(train_idx), config.calibration_rows, config.seed + 1)
    cal_val, cal_train = val_idx[val_pos], train_idx[oof_pos]
    cal_val_p = val_p[val_pos]
    cal_p_oof = p_oof if isinstance(oof_pos, slice) else p_oof[torch.as_tensor(oof_pos, device=p_oof.device)]
    p_calibration = fit_p_calibration(
        np.concatenate([cal_val_p, cal_p_oof.cpu().numpy()]),
        np.concatenate([data.scores[cal_val], data.scores[cal_train]]),
        fitted_on="validation+out-of-fold",
        seed=config.seed,
    )

    bandit_rows = None
    if config.calibrate and data.bandit:  # a log too thin to vouch for any point is refused before PPO
        calib_idx = np.concatenate([cal_val, cal_train])
        bandit_rows = BanditRows(data.scores[calib_idx], data.logged_choice[calib_idx], data.propensity[calib_idx],
                                 clip=config.propensity_clip, groups=np.asarray(data.prompts, dtype=object)[calib_idx],
                                 inclusion=None if data.inclusion is None else data.inclusion[calib_idx])
        require_validation_rows(bandit_rows, len(cal_val), data.models)

    t0 = time.perf_counter()
    # On a decision log PPO scores every slot with the out-of-fold head, never a training label: a
    # policy rewarded with the labels keeps the logged choices that were right and leaves the wrong
    # ones, so only rows it never trained on could certify it.  Label-blind, every calibration row
    # bounds it (off_policy_calibration.py says what of the labels still reaches a choice).
    policy_scores = np.full_like(data.scores[train_idx], np.nan) if data.bandit else data.scores[train_idx]
    normalizer, history, lambdas = train_policy(
        model, emb_t[train_idx], policy_scores, costs[train_idx], p_oof, tau_range, config, rng,
        None if init_manifest is None else CostNormalizer.from_dict(init_manifest.cost_normalization),
    )
    timings["ppo_s"] = time.perf_counter() - t0

    # The policy sees lambda = 1 at inference but larger multipliers in high-tau training sessions,
    # so its top operating points sit at policy taus a little past the training range: calibration
    # may use them (tau_norm up to 1 + calibration_extrapolate), validated like every other point.
    top = tau_range[1] + config.calibration_extrapolate * (tau_range[1] - tau_range[0])
    policy_taus = np.round(np.arange(tau_range[0], top + 1e-9, config.calibration_step), 6)
    val_curve = accuracy_curve(
        model, emb_t[cal_val], data.scores[cal_val], costs[cal_val], normalizer, policy_taus, tau_range
    )
    oof_curve = accuracy_curve(
        model, emb_t[cal_train], data.scores[cal_train], costs[cal_train], normalizer, policy_taus, tau_range, cal_p_oof
    )
    # Calibrate on validation and out-of-fold training rows together (4-5x the rows of validation
    # alone, so the curve is far less noisy), taking the lower of the pooled and validation curves
    # (+ calibration_val_slack): the policy was trained on the training rows, and measured on MMLU
    # their curve runs 1.2-1.4 pp above validation, so it may only ever make the table stricter.
    n_val, n_oof = len(cal_val), len(cal_train)
    pooled = OperatingCurve.pooled(val_curve, n_val, oof_curve, n_oof)
    calibration_acc = np.minimum(pooled.accuracy, val_curve.accuracy + config.calibration_val_slack)
    # The margin makes the promise hold on *new* traffic, not just on the calibration rows: accuracy
    # measured over a future sample as large as the validation split stays >= tau with ~95 %
    # confidence when it covers both estimates' noise, z * sqrt(t (1 - t) (1/n_cal + 1/n_val))
    # (z = 1.645, t = best single model's validation accuracy), never below calibration_margin.
    # Measured over 3 seeds x 3 datasets (docs/frontier.md): z = 1.28 (~90 %) missed 2 MMLU test
    # floors by 0.1-0.4 pp; z = 1.645 misses none, and the operator baselines, tuned with the same
    # margin, pay for it as well.
    level = best_single_accuracy(val_scores)
    spread = math.sqrt(level * (1 - level) * (1 / (n_val + n_oof) + 1 / n_val))
    margin = max(config.calibration_margin, config.calibration_z * spread)
    off_policy = None
    extra: list[CandidatePoint] = []
    centroids = None
    if bandit_rows is not None:
        off_policy = off_policy_calibration(
            model, emb_t[calib_idx], torch.cat([torch.as_tensor(cal_val_p, device=device), cal_p_oof]), bandit_rows,
            costs[calib_idx], normalizer, policy_taus, tau_range, data.models, config, n_val=len(cal_val),
            # an initial artifact, or an encoder fine-tuned on every training label, leaves no prediction out-of-fold
            validation_cap=init_manifest is not None or config.finetune_encoder,
        )
        calibration, declared = off_policy.calibration, off_policy.declared
        calibration_acc, pooled, extra = off_policy.lower, off_policy.curve, off_policy.candidates
        off_policy.support.warn()
    elif config.calibrate:
        if config.operating_point_rules:
            extra, centroids = operating_point_candidates(
                model, emb_t, embeddings, data.scores, costs, cal_train, cal_val, cal_p_oof, cal_val_p, normalizer,
                policy_taus, tau_range, config,
            )
        frontier_costs = pooled.cost_usd if (config.mix_operating_points or extra) else None
        arguments = (policy_taus, calibration_acc, margin, config.calibration_step, frontier_costs, extra)
        options = dict(frontier=config.mix_operating_points, centroids=centroids)
        try:
            calibration, declared = calibrate(*arguments, **options)
        except UnreachableTauRange as exc:
            message = unreachable_range_message(exc, tau_range, config, init_manifest is not None, n_val, n_oof)
            if config.tau_range or init_manifest is not None:  # a range the operator asked for: refuse it
                raise ValueError(f"{message}. No artifact was written") from exc
            # the range derived from small data: the artifact is written, and says what it cannot keep
            calibration, declared = calibrate(*arguments, **options, strict=False)
            log.warning("%s. The artifact declares [%.4f, %.4f], which its validation rows cannot vouch for",
                        message, *declared)
    else:
        calibration, declared = TauCalibration(), tau_range
    model.to("cpu")
    timings["total_s"] = time.perf_counter() - started

    manifest = Manifest(
        models=data.models,
        encoder=encoder_spec(config, encoder.embed_dim, static_dir, init_manifest),
        architecture=model_config,
        tau_range=declared,
        tau_train_range=tau_range,
        cost_normalization=normalizer.to_dict(),
        avg_input_tokens=average_tokens(data.models, data.input_tokens, train_idx, 500.0),
        avg_output_tokens=average_tokens(data.models, data.output_tokens, train_idx, 256.0),
        avg_cost_usd=average_costs(data.models, costs, data.output_tokens, train_idx),
        calibration=calibration,
        p_calibration=p_calibration,
        training=training_record(config, device, timings, history, lambdas),
        data=data_record(config, data, parts, off_policy, init_manifest),
        metrics=validation_metrics(
            val_bce, val_scores, policy_taus, val_curve, oof_curve, calibration_acc, pooled, extra, data.models, off_policy,
            {"val": n_val, "out_of_fold": n_oof},
        ),
        package_version=__version__,
    )
    # The mean calibrated p each tau-table entry and hull point chose on validation: the compliance
    # controller's label-free target (train/p_reference.py).
    manifest = manifest.model_copy(
        update={"calibration": with_reference_p(model, manifest, embeddings[val_idx], costs[val_idx])}
    )
    write_artifact(out_dir, model, manifest, static_dir, encoder if config.finetune_encoder else None)
    return manifest


def write_artifact(out_dir: str | os.PathLike, model: ProteusModel, manifest: Manifest, static_dir: Path | None,
                   tuned_encoder=None) -> None:
    """Write the artifact into a staging folder beside ``out_dir``, then put it in place: an artifact
    being replaced (a proxy may serve it) is never left half-written by a failed or killed run."""
    import shutil

    out = Path(out_dir)
    staging = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        # The encoder goes in first: save_artifact records its files' hashes in the manifest.
        if tuned_encoder is not None:
            tuned_encoder.model.save_pretrained(staging / BUNDLED_ENCODER_DIR)
            tuned_encoder.tokenizer.save_pretrained(staging / BUNDLED_ENCODER_DIR)
        target = staging / manifest.encoder.name
        # a shared table ('../' name) may already be where the name points: never copied onto itself
        if static_dir is not None and target.resolve() != Path(static_dir).resolve():
            copy_static_encoder(static_dir, target)
        save_artifact(staging, model, manifest)
        if out.exists():  # two renames: the old artifact is whole until the new one takes its name
            retired = out.parent / f".{out.name}.replaced-{os.getpid()}"
            os.rename(out, retired)
            os.rename(staging, out)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.rename(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
