"""``proteus eval``: an artifact (+ its recorded data) in; metrics.json, report.md and figures out.

    proteus eval --artifact DIR [--data PATH ...] --out OUT [--seeds 5] [--ablation NAME=DIR ...]
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
from litellm_proteus.encoder import PRECISIONS


def _ablation(value: str) -> tuple[str, str]:
    name, sep, directory = value.partition("=")
    if not sep or not name.strip() or not directory.strip():
        raise argparse.ArgumentTypeError(
            f"--ablation takes NAME=DIR (e.g. Unconstrained=runs/no-lambda; a name starting with '-' needs "
            f"--ablation=-Critic=DIR); got {value!r}"
        )
    return name.strip(), directory.strip()


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1; got {value}")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .inputs import DEFAULT_CACHE_DIR

    parser.add_argument("--artifact", default=str(DEFAULT_ARTIFACT_DIR), metavar="DIR",
                        help="trained artifact directory (default: the packaged artifact)")
    parser.add_argument("--data", nargs="+", metavar="PATH",
                        help="routing logs to evaluate on (default: the paths recorded in the artifact's manifest)")
    parser.add_argument("--format", dest="data_format", metavar="FMT",
                        help="data format: auto, routerbench, sprout, routellm (default: as recorded at training)")
    parser.add_argument("--dataset", metavar="NAME", help="dataset name in the report (default: the data directory's name)")
    parser.add_argument("--out", required=True, metavar="OUT", help="output directory (metrics.json, report.md, *.png)")
    parser.add_argument("--seeds", type=_positive_int, default=5, help="seeds of the dynamic scenarios (default: 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the baselines' training and the bootstrap (default: 0)")
    parser.add_argument("--bootstrap", type=_positive_int, default=1000, help="bootstrap resamples (default: 1000)")
    parser.add_argument("--tau-step", type=float, default=0.01, help="tau grid step across tau_range (default: 0.01)")
    parser.add_argument("--headline-tau", type=float, metavar="TAU",
                        help="tau of the single-number rows of tau-capable routers (default: middle of tau_range)")
    parser.add_argument("--ablation", type=_ablation, action="append", default=[], metavar="NAME=DIR",
                        help="an ablated artifact for Table 4 (repeatable), e.g. NoCritic=runs/no-critic (paper names: Unconstrained, Fixed-Gamma, NoCritic)")
    parser.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR,
                        help="embedding cache root, shared with `proteus train` (PROTEUS_CACHE_DIR; '' disables)")
    parser.add_argument("--device", default="auto", help="encoder device: auto, cpu, cuda (default: auto)")
    parser.add_argument("--precision", default="auto", choices=list(PRECISIONS),
                        help="encoder precision, as the proxy's predictor_options.precision (default: auto, the proxy's "
                             "default: fp16 on CUDA, bf16 on CPUs with native bf16, else fp32); fp32 = training's numerics")
    parser.add_argument("--llm-latency-s", type=float, default=2.0, help="t_LLM of RPI in seconds (default: 2.0)")
    parser.add_argument("--latency-batch", type=_positive_int, default=8, help="batch size of the latency measurement (default: 8)")
    parser.add_argument("--dynamic-queries", type=_positive_int, default=1000, help="queries per dynamic scenario (default: 1000)")
    parser.add_argument("--window", type=_positive_int, default=100, help="rolling window of the dynamic floor check (default: 100)")
    parser.add_argument("--threads", type=_positive_int, default=1,
                        help="torch CPU threads (default: 1: the routers' small matrix products gain nothing from more, "
                             "and on a shared machine extra threads make latency and run time erratic)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--log", metavar="DIR", help="decision log: judge --artifact against --baseline-artifact "
                        "off-policy on it and print a promote / don't-promote verdict (promotion.md/json in --out); "
                        "exit status 0: promote, 3: do not promote (2: bad input)")
    parser.add_argument("--baseline-artifact", metavar="DIR", help="with --log: the artifact in production (default: bundled)")


def _check(args: argparse.Namespace) -> None:
    """Bad flags are ValueErrors: ``proteus`` prints ``error: ...`` and exits 2."""
    from ..config import SEED_MAX

    if not 0 <= args.seed <= SEED_MAX:  # the seed reaches numpy and torch, as proteus train's does
        raise ValueError(f"--seed must be an integer from 0 to {SEED_MAX} (2**32 - 1); got {args.seed}")
    if not 0 < args.tau_step < 1:
        raise ValueError(f"--tau-step must be in (0, 1); got {args.tau_step}")
    if args.headline_tau is not None and not 0 < args.headline_tau <= 1:
        raise ValueError(f"--headline-tau must be in (0, 1]; got {args.headline_tau}")
    if not (math.isfinite(args.llm_latency_s) and args.llm_latency_s > 0):
        raise ValueError(f"--llm-latency-s must be a finite number > 0; got {args.llm_latency_s}")
    names = [name for name, _ in args.ablation]
    if len(set(names)) != len(names) or "PROTEUS" in names:
        raise ValueError(f"--ablation names must be unique and not 'PROTEUS'; got {names}")
    for at in (Path(args.out), *Path(args.out).parents):  # before the evaluation runs, not after
        if at.exists():
            if not at.is_dir():
                raise ValueError(f"--out {args.out}: {'is' if at == Path(args.out) else f'lies under {str(at)!r}, which is'} "
                                 "a file; name a folder for the report")
            break


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run (non-default options only), for report.md."""
    parts = ["proteus", "eval", "--artifact", args.artifact]
    if args.data:
        parts += ["--data", *args.data]
    parts += ["--out", args.out]
    defaults = {"data_format": None, "dataset": None, "seeds": 5, "seed": 0, "bootstrap": 1000, "tau_step": 0.01, "headline_tau": None,
                "device": "auto", "precision": "auto", "threads": 1, "llm_latency_s": 2.0, "latency_batch": 8, "dynamic_queries": 1000, "window": 100}
    for key, default in defaults.items():
        value = getattr(args, key)
        if value != default:
            parts += ["--format" if key == "data_format" else "--" + key.replace("_", "-"), str(value)]
    for name, directory in args.ablation:
        parts += ["--ablation", f"{name}={directory}"]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    _check(args)
    if args.baseline_artifact and not args.log:
        raise ValueError("--baseline-artifact needs --log DIR (the decision log to judge both artifacts on)")
    if args.log:
        log = Path(args.log)
        if log.is_file():  # the shadow rows beside the decision log would be left out
            raise ValueError(f"--log {args.log} is a file; pass the decision log folder that holds it ({log.parent}): "
                             "its shadow rows are read with the decision log")
        if not log.is_dir():
            raise ValueError(f"--log {args.log}: decision log folder not found")
        from .promotion import exit_code, promotion_report, render, write

        report = promotion_report(args.artifact, args.baseline_artifact or str(DEFAULT_ARTIFACT_DIR), args.log,
                                  args.cache_dir or None, args.device)
        write(report, args.out)
        print(render(report))
        return exit_code(report)
    from litellm_proteus.artifact import load_artifact

    from .evaluate import EvalConfig, ProteusRouter, evaluate
    from .inputs import load_inputs, artifact_encoder, measure_encoder_ms
    from .metrics import json_safe
    from .plots import write_figures
    from .report import render

    import torch

    torch.set_num_threads(args.threads)
    say = (lambda msg: None) if args.quiet else (lambda msg: print(f"[proteus eval] {msg}", file=sys.stderr, flush=True))
    started = time.perf_counter()
    cache_dir = args.cache_dir or None
    say(f"loading {args.artifact} and its data")
    inputs = load_inputs(args.artifact, data=args.data, data_format=args.data_format, cache_dir=cache_dir,
                         device=args.device, precision=args.precision, progress=not args.quiet, dataset=args.dataset)
    test_prompts = [inputs.log.prompts[i] for i in inputs.test_rows]
    say("measuring encoder latency")
    timing_encoder = artifact_encoder(inputs.manifest.encoder, inputs.artifact_dir, None, args.device, args.precision)  # no cache
    encoder_ms = measure_encoder_ms(timing_encoder, test_prompts, batch=args.latency_batch)
    encoder_backend = str(getattr(timing_encoder, "backend", "hf"))
    del timing_encoder

    ablations = {}
    for name, directory in args.ablation:
        model, manifest = load_artifact(directory)
        if list(manifest.models) != list(inputs.manifest.models):
            raise ValueError(f"--ablation {name}={directory}: models {manifest.models} differ from the evaluated artifact's "
                             f"{inputs.manifest.models}")
        if manifest.encoder == inputs.manifest.encoder and not manifest.encoder.bundled:
            emb = inputs.test.emb
        else:
            emb = artifact_encoder(manifest.encoder, Path(directory), cache_dir, args.device, args.precision).encode(test_prompts)
        ablations[name] = (ProteusRouter(model, manifest, name=name), emb)
    if inputs.manifest.calibration.frontier_policy_tau:  # how much of PROTEUS's cost is the mixing
        ablations["No-Mixing"] = (ProteusRouter(inputs.model, inputs.manifest, name="No-Mixing", mix=False), inputs.test.emb)

    config = EvalConfig(
        seeds=args.seeds, seed=args.seed, tau_step=args.tau_step, bootstrap=args.bootstrap,
        llm_latency_s=args.llm_latency_s, latency_batch=args.latency_batch, dynamic_queries=args.dynamic_queries,
        dynamic_window=args.window, headline_tau=args.headline_tau,
    )
    result = evaluate(
        inputs.model, inputs.manifest, inputs.train, inputs.val, inputs.test,
        config=config, encoder_ms=encoder_ms, dataset=inputs.dataset, ablations=ablations, progress=say,
        extra={
            "n_test_excluded": inputs.n_test_excluded,
            "artifact": str(inputs.artifact_dir),
            "data": {"paths": list(args.data or inputs.manifest.data.paths), "split_method": inputs.log.split_method,
                     "sha256": inputs.log.sha256, "warnings": inputs.notes},
        },
    )
    metrics = result.metrics
    metrics["settings"]["wall_s"] = round(time.perf_counter() - started, 1)
    metrics["latency"]["torch_threads"] = args.threads
    metrics["latency"]["device"] = str(getattr(inputs.encoder, "device", args.device))
    metrics["latency"]["encoder_backend"] = encoder_backend
    metrics["latency"]["encoder_precision"] = inputs.encoder.precision

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    say("writing figures and report")
    figures = write_figures(metrics, result.plots, out)
    command = command_line(args)
    (out / "metrics.json").write_text(json.dumps(json_safe(metrics), indent=2) + "\n")
    (out / "report.md").write_text(
        render(metrics, command=command, artifact=str(inputs.artifact_dir), figures=[f.name for f in figures], notes=inputs.notes)
    )
    summary = {
        "out": str(out),
        "dataset": metrics["dataset"],
        "n_test": metrics["n_test"],
        "tau_range": metrics["tau_range"],
        "PROTEUS": {k: metrics["routers"]["PROTEUS"][k] for k in ("accuracy", "cost_per_1k", "oracle_gap_pp")},
        "adaptability": {k: metrics["adaptability"][k] for k in ("tau_mu_corr", "floor_compliance")},
        "max_compliant_tau": metrics["max_compliant_tau"],
        "wall_s": metrics["settings"]["wall_s"],
    }
    print(json.dumps(json_safe(summary), indent=2))
    return 0
