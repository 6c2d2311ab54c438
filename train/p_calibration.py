"""Per-slot calibration of the performance head's p_i(x): isotonic or Platt, chosen by measurement.

For each slot, both methods (and the identity) are scored by 2-fold cross-validated log-loss on
the calibration rows (validation, plus out-of-fold training rows when ``proteus train`` has them);
the lowest wins and is refit on all rows.  The result is stored in the manifest
(``litellm_proteus.artifact.PCalibration``); the runtime applies it in numpy.  ``proteus
calibrate-p`` adds it to an existing artifact from its validation split, without retraining.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from litellm_proteus.artifact import MANIFEST_FILE, PCalibration, SlotCalibration, read_manifest

EPS = 1e-6


def expected_calibration_error(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """Mean |mean outcome - mean p| over equal-width p bins, weighted by the bins' row counts."""
    p, y = np.asarray(p, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    keep = np.isfinite(p) & np.isfinite(y)
    p, y = p[keep], y[keep]
    if len(p) == 0:
        return float("nan")
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        mask = which == b
        if mask.any():
            total += mask.sum() * abs(y[mask].mean() - p[mask].mean())
    return float(total / len(p))


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    """Mean binary log-loss; NaN for no rows (a slot no label ever scored)."""
    if len(p) == 0:
        return float("nan")
    p = np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def fit_isotonic(p: np.ndarray, y: np.ndarray) -> SlotCalibration:
    """Pool-adjacent-violators on rows sorted by p; knots at each block's (mean p, mean y).  Rows of
    equal p (a prompt asked again) are one point first, their mean y weighed by their count: split
    over blocks they would repeat a knot, and ``np.interp`` would take whichever block came last."""
    order = np.argsort(p, kind="stable")
    values, start, counts = np.unique(np.asarray(p, dtype=np.float64)[order], return_index=True, return_counts=True)
    totals = np.add.reduceat(np.asarray(y, dtype=np.float64)[order], start) if len(start) else np.zeros(0)
    means: list[float] = []
    weights: list[float] = []
    xs: list[float] = []
    for value, total, count in zip(values, totals, counts):
        means.append(float(total / count))
        weights.append(float(count))
        xs.append(float(value))
        while len(means) > 1 and means[-2] >= means[-1]:
            w = weights[-2] + weights[-1]
            means[-2] = (means[-2] * weights[-2] + means[-1] * weights[-1]) / w
            xs[-2] = (xs[-2] * weights[-2] + xs[-1] * weights[-1]) / w
            weights[-2] = w
            del means[-1], weights[-1], xs[-1]
    # a block's mean p lies between its ends; the running sums may round it one unit past its neighbour
    return SlotCalibration(method="isotonic", x=np.maximum.accumulate(np.asarray(xs)).tolist(),
                           y=np.maximum.accumulate(np.asarray(means)).tolist())


def fit_platt(p: np.ndarray, y: np.ndarray, iterations: int = 50) -> SlotCalibration:
    """Logistic regression of y on logit(p) (Newton steps, a tiny ridge for separable data)."""
    clipped = np.clip(p, EPS, 1 - EPS)
    x = np.stack([np.log(clipped / (1 - clipped)), np.ones_like(clipped)], axis=1)
    w = np.array([1.0, 0.0])
    for _ in range(iterations):
        q = SlotCalibration(method="platt", a=float(w[0]), b=float(w[1])).apply(p)  # the runtime's logistic
        grad = x.T @ (q - y) + 1e-6 * w
        hess = (x * (q * (1 - q))[:, None]).T @ x + 1e-6 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return SlotCalibration(method="platt", a=float(w[0]), b=float(w[1]))


FITTERS = {"isotonic": fit_isotonic, "platt": fit_platt}


def choose_slot(p: np.ndarray, y: np.ndarray, seed: int = 0) -> tuple[SlotCalibration, dict[str, float]]:
    """The method with the lowest 2-fold cross-validated log-loss (identity included), refit on all."""
    identity = SlotCalibration(method="identity")
    if len(p) < 20:  # too few outcomes to fit anything
        return identity, {"identity": log_loss(p, y)}
    folds = np.random.default_rng(seed).permutation(len(p)) % 2
    losses = {"identity": log_loss(p, y)}
    for name, fit in FITTERS.items():
        predicted = np.empty(len(p))
        for k in (0, 1):
            held = folds == k
            predicted[held] = fit(p[~held], y[~held]).apply(p[held])
        losses[name] = log_loss(predicted, y)
    best = min(losses, key=losses.__getitem__)
    return (identity if best == "identity" else FITTERS[best](p, y)), losses


def fit_p_calibration(p: np.ndarray, scores: np.ndarray, fitted_on: str, seed: int = 0) -> PCalibration:
    """``p``: [N, K] raw predictions, ``scores``: [N, K] outcomes in [0, 1] (NaN = not observed)."""
    slots, metrics = [], {}
    for k in range(p.shape[1]):
        seen = np.isfinite(scores[:, k])
        pk, yk = p[seen, k].astype(np.float64), scores[seen, k].astype(np.float64)
        cal, losses = choose_slot(pk, yk, seed)
        slots.append(cal)
        metrics[str(k)] = {
            "method": cal.method,
            "cv_log_loss": {name: round(v, 5) for name, v in losses.items()},
            "ece_before": round(expected_calibration_error(pk, yk), 5),
            "ece_after_in_sample": round(expected_calibration_error(cal.apply(pk), yk), 5),
        }
    return PCalibration(slots=slots, fitted_on=fitted_on, metrics={"per_slot": metrics})


def calibration_report(cal: PCalibration | None, p: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """ECE and log-loss of raw and calibrated p over all observed (row, slot) cells."""
    after = p if cal is None else cal.apply(p)
    seen = np.isfinite(scores)
    y = scores[seen]
    return {
        "ece_raw": round(expected_calibration_error(p[seen], y), 5),
        "ece_calibrated": round(expected_calibration_error(after[seen], y), 5),
        "log_loss_raw": round(log_loss(p[seen], y), 5),
        "log_loss_calibrated": round(log_loss(after[seen], y), 5),
        "cells": int(seen.sum()),
    }


def raw_p(model, embeddings: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        z = model.embed(torch.as_tensor(np.asarray(embeddings, dtype=np.float32)))
        return torch.sigmoid(model.performance_logits(z)).numpy().astype(np.float64)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--artifact", required=True, metavar="DIR", help="artifact to calibrate (its manifest is rewritten)")
    parser.add_argument("--data", nargs="+", metavar="PATH", help="training data (default: manifest.data.paths)")
    parser.add_argument("--reference-only", action="store_true",
                        help="keep the artifact's p_calibration; only store the validated reference p (p_reference.py)")
    parser.add_argument("--quiet", dest="progress", action="store_false", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    """``proteus calibrate-p``: fit on the artifact's validation split, report ECE on its test split,
    and store the reference p the compliance controller steers to without labels."""
    from .evaluation.inputs import load_inputs
    from .p_reference import with_reference_p

    inputs = load_inputs(args.artifact, data=args.data, progress=args.progress)
    manifest = read_manifest(args.artifact)
    test_p = raw_p(inputs.model, inputs.test.emb)
    if args.reference_only:
        if manifest.p_calibration is None:
            raise ValueError("--reference-only: the artifact has no p_calibration to keep; run without --reference-only")
        cal = manifest.p_calibration
    else:
        cal = fit_p_calibration(raw_p(inputs.model, inputs.val.emb), inputs.val.scores, fitted_on="validation")
        cal.metrics["test"] = calibration_report(cal, test_p, inputs.test.scores)
        manifest = manifest.model_copy(update={"p_calibration": cal})
    manifest = manifest.model_copy(
        update={"calibration": with_reference_p(inputs.model, manifest, inputs.val.emb, inputs.val.costs)}
    )
    path = Path(args.artifact) / MANIFEST_FILE
    path.write_text(json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n")
    print(json.dumps({"artifact": str(args.artifact), "methods": [s.method for s in cal.slots],
                      "test": calibration_report(cal, test_p, inputs.test.scores),
                      "requested_p_ref": manifest.calibration.requested_p_ref,
                      "frontier_p_ref": manifest.calibration.frontier_p_ref}, indent=2))
    return 0
