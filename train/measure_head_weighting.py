"""Measure the performance head's propensity weighting on held-out full-information data.

``python -m proteus_train.measure_head_weighting --log DECISION_LOG --data FULL_INFO --init ARTIFACT``
fits the head on the decision log's labelled rows (from ``--init``'s weights, its encoder, the
trainer's head settings, as ``proteus train`` does) once per ``--propensity-weighting`` choice, and scores each on the full
information split (every model's outcome known): masked BCE, and per model the gap between mean
predicted and observed accuracy (the bias the weighting is meant to remove).  Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from litellm_proteus.artifact import load_artifact

from .config import PROPENSITY_WEIGHTINGS, TrainConfig
from .data import assign_splits, load_logs
from .data.decision_log import VALIDATION_SHARE
from .evaluation.inputs import artifact_encoder
from .heads import fit_doubly_robust_head, fit_performance_head, ips_weights, masked_bce, out_of_fold_predictions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proteus_train.measure_head_weighting", description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", required=True)
    parser.add_argument("--data", nargs="+", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--init", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--validation-share", type=float, default=VALIDATION_SHARE,
                        help="the log's prompts held out for early stopping (as proteus train --validation-share)")
    parser.add_argument("--from-scratch", action="store_true",
                        help="heads start from fresh weights (a log-alone training); --init then names the encoder only")
    parser.add_argument("--cache-dir", default=os.environ.get("PROTEUS_CACHE_DIR", os.path.expanduser("~/.cache/proteus")))
    args = parser.parse_args(argv)
    if not 0 < args.validation_share < 1:
        parser.error(f"--validation-share must be a number in (0, 1); got {args.validation_share}")
    torch.set_num_threads(1)
    model0, manifest = load_artifact(args.init)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log = load_logs(args.log, validation_share=args.validation_share).with_models(manifest.models)
        log = assign_splits(log, seed=args.seed, ratios=(1 - args.validation_share, args.validation_share, 0.0))
        held = assign_splits(load_logs(args.data), seed=0).part(args.split).with_models(manifest.models)
    encoder = artifact_encoder(manifest.encoder, Path(args.init), args.cache_dir, "cpu", precision="fp32")
    emb = torch.as_tensor(encoder.encode(log.prompts, progress=False))
    emb_held = torch.as_tensor(encoder.encode(held.prompts, progress=False))
    y, y_held = torch.as_tensor(log.scores, dtype=torch.float32), torch.as_tensor(held.scores, dtype=torch.float32)
    tr, va = np.flatnonzero(log.split == "train"), np.flatnonzero(log.split == "val")
    results = {}
    for weighting in PROPENSITY_WEIGHTINGS:
        config = TrainConfig(seed=args.seed, propensity_weighting=weighting)
        generator = torch.Generator().manual_seed(args.seed)
        torch.manual_seed(args.seed)
        model = type(model0)(manifest.architecture)
        if not args.from_scratch:
            model.load_state_dict(model0.state_dict())
        w = ips_weights(log.propensity, config.propensity_clip) if weighting == "ips" else None
        fit_performance_head(model, emb[tr], y[tr], emb[va], y[va], config, generator,
                             None if w is None else w[tr], None if w is None else w[va])
        if weighting == "dr":  # as the pipeline: out-of-fold q for the training rows, then the refit
            q = out_of_fold_predictions(manifest.architecture, emb[tr], y[tr], config, generator, None,
                                        None if args.from_scratch else model0.state_dict(), np.asarray(log.prompts, dtype=object)[tr])
            fit_doubly_robust_head(model, emb[tr], emb[va], log.scores[tr], log.scores[va], q.numpy(),
                                   (log.logged_choice[tr], log.propensity[tr]), (log.logged_choice[va], log.propensity[va]),
                                   config, generator)
        with torch.no_grad():
            logits = model.performance_logits(model.embed(emb_held))
            p = torch.sigmoid(logits).numpy()
        observed = np.nanmean(held.scores, axis=0)
        gap = np.nanmean(np.where(np.isfinite(held.scores), p, np.nan), axis=0) - observed
        results[weighting] = {"heldout_bce": round(float(masked_bce(logits, y_held)), 5),
                              "mean_abs_accuracy_gap": round(float(np.nanmean(np.abs(gap))), 5),
                              "accuracy_gap_per_model": {m: round(float(g), 4) for m, g in zip(manifest.models, gap)}}
    print(json.dumps({"log": args.log, "from_scratch": args.from_scratch, "labelled_rows": len(log), "heldout_rows": len(held), **results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
