"""The parts of a trained artifact's manifest that record where it came from and how it did:
the encoder spec, the training record, the data record (with a decision log's provenance and
off-policy support) and the validation metrics.  ``pipeline.py`` assembles them."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from litellm_proteus.artifact import DataRecord, EncoderSpec, Manifest

from .calibration import best_single_accuracy, oracle_accuracy
from .config import TrainConfig
from .data import read_price_file
from .data.logs import RoutingLog
from .encoding import BUNDLED_ENCODER_DIR


def encoder_spec(config: TrainConfig, embed_dim: int, static_dir: Path | None, init: Manifest | None) -> EncoderSpec:
    """A warm start keeps its initial artifact's encoder (hashes recomputed on save); otherwise a
    static table or fine-tuned transformer travels in the artifact, a frozen transformer by name."""
    if init is not None:
        return init.encoder.model_copy(update={"files_sha256": {}})
    bundled = config.finetune_encoder or static_dir is not None
    return EncoderSpec(
        name=BUNDLED_ENCODER_DIR if bundled else config.encoder,
        bundled=bundled,
        static_from=config.encoder if static_dir else None,
        embed_dim=embed_dim,
        max_tokens=config.max_tokens,
        truncation=config.truncation,
    )


def average_tokens(models: list[str], tokens: np.ndarray | None, rows: np.ndarray, default: float) -> dict[str, float]:
    """Mean tokens per slot over ``rows``; ``default`` where unknown."""
    if tokens is None:
        return {m: default for m in models}
    values = np.asarray(tokens, dtype=np.float64)[rows]
    if values.ndim == 1:
        values = np.repeat(values[:, None], len(models), axis=1)
    means = np.nanmean(np.where(np.isfinite(values), values, np.nan), axis=0)
    return {m: float(v) if np.isfinite(v) else default for m, v in zip(models, means)}


def average_costs(models: list[str], costs: np.ndarray, output_tokens: np.ndarray | None, rows: np.ndarray) -> dict[str, float]:
    """Mean cost per request per slot over ``rows``: the training-price reference the runtime
    compares live prices with (``engine.DecisionEngine.price_ratio``).  Only for slots whose output
    tokens were measured: the runtime prices the slot's average request from ``avg_output_tokens``,
    and a default there (no response text in the log) would make the ratio compare unlike requests."""
    if output_tokens is None:
        return {}
    tokens = np.asarray(output_tokens, dtype=np.float64)[rows]
    measured = np.isfinite(tokens).any(axis=0) if tokens.ndim == 2 else np.full(len(models), np.isfinite(tokens).any())
    means = np.asarray(costs, dtype=np.float64)[rows].mean(axis=0)
    return {m: float(c) for m, c, ok in zip(models, means, measured) if ok and np.isfinite(c)}


def training_record(config: TrainConfig, device: str, timings: dict, history: list, lambdas: np.ndarray) -> dict[str, Any]:
    return {
        "config": {k: v for k, v in asdict(config).items() if k not in ("progress",)},
        "device": device,
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
        "final": history[-1] if history else {},
        "lambda_per_tau_bin": np.round(lambdas, 4).tolist(),
    }


def data_record(config: TrainConfig, data: RoutingLog, parts: dict, off_policy: Any, init: Manifest | None) -> DataRecord:
    bandit = {} if not data.bandit else {
        "provenance": data.provenance,
        "off_policy": None if off_policy is None else off_policy.support.to_dict(),
        "init": None if init is None else {"path": str(Path(config.init).resolve()), "weights_sha256": init.weights_sha256},
    }
    return DataRecord(
        paths=[str(Path(p).resolve()) for p in config.data],
        sha256=data.sha256 or data.content_hash(),
        source=data.source,
        n_rows=len(data),
        split={k: int(len(v)) for k, v in parts.items()},
        split_method=data.split_method,
        split_seed=config.seed,
        prices=read_price_file(config.prices),
        skip_contaminated=config.skip_contaminated,
        **bandit,
    )


def validation_metrics(
    val_bce: float, val_scores: np.ndarray, policy_taus: np.ndarray, val_curve: Any, oof_curve: Any,
    calibration_acc: np.ndarray, pooled: Any, candidates: list, models: list[str], off_policy: Any,
    calibration_rows: dict[str, int],
) -> dict[str, Any]:
    return {
        "val_bce": round(val_bce, 5),
        "calibration_rows": calibration_rows,  # what the curves were measured on (capped by --calibration-rows)
        "val_best_single_accuracy": round(best_single_accuracy(val_scores), 4),
        "val_oracle_accuracy": round(oracle_accuracy(val_scores), 4),
        "val_curve": {
            "policy_tau": policy_taus.tolist(),
            "accuracy": np.round(val_curve.accuracy, 4).tolist(),
            "mu_mean": np.round(val_curve.mu_mean, 4).tolist(),
            "cost_usd": np.round(val_curve.cost_usd, 8).tolist(),
            "train_oof_accuracy": np.round(oof_curve.accuracy, 4).tolist(),
            "calibration_accuracy": np.round(calibration_acc, 4).tolist(),
            "calibration_cost_usd": np.round(pooled.cost_usd, 8).tolist(),
        },
        "operating_point_candidates": [
            {"rule": c.rule.label(models), "policy_tau": c.policy_tau, "accuracy": round(c.accuracy, 4),
             "cost_usd": float(f"{c.cost_usd:.6g}")}
            for c in candidates
        ],
        **({} if off_policy is None else {"off_policy_curve": off_policy.estimates}),
    }
