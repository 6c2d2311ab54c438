"""``proteus bench``: routing latency, throughput, proxy overhead and memory -> ``OUT/bench.json``.

Sections (each also printed as a table):
- ``table3``: ``ProteusPredictor.decide`` latency p50/p95/p99 and decisions/s per batch size and
  prompt length (paper Table 3 layout), real prompts cut to exact token lengths (``prompts.py``);
- ``concurrency``: the same decisions through the plugin's micro-batcher under N concurrent callers;
- ``proxy``: end-to-end p50/p99 through real ``litellm --config`` proxies, PROTEUS vs
  ``simple-shuffle``, against a mock upstream answering after ``--upstream-delay`` seconds;
- ``rss_mb``: peak resident memory of the PROTEUS proxy worker (of this process with
  ``--skip-proxy``; ``rss_source`` says which); ``proxy.shuffle_rss_mb`` the simple-shuffle
  worker's, ``proxy.startup_rss_mb`` both workers' before their first request.

Without LiteLLM installed (a GPU host with the trainer's dependencies only) every section but
``proxy`` runs (prompt tokens need no LiteLLM: ``litellm_proteus/token_count.py``) and the proxy
section is skipped with a message, recorded under ``skipped`` in bench.json.
Defaults finish in about 5 minutes on 2 CPU cores; ``--quick`` is a smoke run of a few seconds
(plus proxy start-up).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

from litellm_proteus.openmp import OMP_POLICIES, configure_openmp, openmp_settings

from .aggregate import median_proxy, median_rows
from .prompts import ROUTERBENCH_DIR

# Settings --quick changes, with their defaults and quick values; explicit flags win over both.
DEFAULTS: dict[str, object] = {
    "batches": [1, 8, 32, 64, 128], "tokens": [32, 128, 512], "callers": [1, 8, 32, 128],
    "cell_seconds": 2.5, "min_iters": 2, "max_iters": 200, "pool_size": 256, "concurrency_seconds": 4.0,
    "upstream_delay": 1.0, "proxy_callers": 8, "proxy_requests": 64,
}
QUICK: dict[str, object] = {
    "batches": [1, 8], "tokens": [32, 128], "callers": [1, 8],
    "cell_seconds": 0.0, "min_iters": 2, "max_iters": 2, "pool_size": 16, "concurrency_seconds": 0.3,
    "upstream_delay": 0.2, "proxy_callers": 2, "proxy_requests": 8,
}


def _int_list(flag: str):
    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes comma-separated positive integers; got {text!r}") from None
        if not values or any(v < 1 for v in values):
            raise argparse.ArgumentTypeError(f"{flag} takes comma-separated positive integers; got {text!r}")
        return values

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--artifact", default=None, help="artifact directory (default: the bundled one)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    parser.add_argument("--out", default="bench-out", help="output directory for bench.json and logs")
    parser.add_argument(
        "--data", default=None, help="shared data dir holding routerbench-partial/ (default: $PROTEUS_SHARED_DATA or "
        "../shared/data; 'none' = the bundled generic prompts)"
    )
    speed = parser.add_argument_group("decision path options (see litellm_proteus/encoder.py)")
    speed.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"],
                       help="encoder precision; auto (default, as the plugin) = fp16 on CUDA, bf16 on CPUs with "
                       "native bf16, else fp32")
    speed.add_argument("--quantize", default="none", choices=["none", "int8"], help="dynamic int8 encoder (CPU)")
    speed.add_argument("--backend", default="auto", choices=["auto", "hf", "fused"],
                       help="encoder implementation; auto = fused BERT where supported (default)")
    speed.add_argument("--runtime", default="auto", choices=["auto", "numpy", "torch"],
                       help="forward pass: auto (default, as the plugin) = numpy for a static table on the CPU, else torch")
    speed.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    speed.add_argument("--omp-wait-policy", default="short-spin", choices=list(OMP_POLICIES),
                       help="how idle OpenMP threads wait, for this process and the proxies, unless OMP_WAIT_POLICY or "
                       "GOMP_SPINCOUNT is already set: short-spin (default, the plugin's) spins ~0.2 ms then sleeps; "
                       "see litellm_proteus/openmp.py")
    speed.add_argument("--max-tokens", type=int, default=None, help="override the artifact's encoder max_tokens")
    speed.add_argument("--truncation", default=None, choices=["head", "tail", "head_tail"],
                       help="override the artifact's truncation policy")
    speed.add_argument("--max-batch-tokens", type=int, default=None,
                       help="padded tokens per encoder forward pass (default: 2048 on CPU, no limit on CUDA; 0 = no limit)")
    speed.add_argument("--cuda-graphs", default="on", choices=["on", "off"],
                       help="replay the encoder and heads as captured CUDA graphs on CUDA (default on, as the plugin)")
    speed.add_argument("--tokenizer-threads", type=int, default=None,
                       help="threads tokenising a batch (default, as the plugin: the usable cores, at most 8)")
    speed.add_argument("--compare-reference", action="store_true",
                       help="also report embedding cosine and decision agreement vs the default fp32 encoder")
    grid = parser.add_argument_group("what to measure")
    grid.add_argument("--batches", type=_int_list("--batches"), help="batch sizes (default 1,8,32,64,128)")
    grid.add_argument("--tokens", type=_int_list("--tokens"), help="prompt lengths in tokens (default 32,128,512)")
    grid.add_argument("--callers", type=_int_list("--callers"), help="concurrent callers (default 1,8,32,128)")
    grid.add_argument("--cell-seconds", type=float, help="time per table3 cell after min-iters (default 2.5)")
    grid.add_argument("--min-iters", type=int, help="timed calls per table3 cell, at least (default 2)")
    grid.add_argument("--max-iters", type=int, help="timed calls per table3 cell, at most (default 200)")
    grid.add_argument("--pool-size", type=int, help="distinct prompts per token length (default 256)")
    grid.add_argument("--concurrency-tokens", type=int, default=128, help="prompt length for the batcher runs")
    grid.add_argument("--concurrency-seconds", type=float, help="time per caller count (default 4)")
    grid.add_argument("--skip-concurrency", action="store_true")
    proxy = parser.add_argument_group("end-to-end proxy run")
    proxy.add_argument("--skip-proxy", action="store_true")
    proxy.add_argument("--upstream-delay", type=float, help="mock upstream answer delay, seconds (default 1)")
    proxy.add_argument("--proxy-callers", type=int, help="concurrent clients per round (default 8)")
    proxy.add_argument("--proxy-requests", type=int, help="requests per strategy (default 64)")
    proxy.add_argument("--proxy-tokens", type=int, default=128, help="prompt length sent through the proxies")
    proxy.add_argument("--prompt-tokens", default="chars", choices=["chars", "litellm"],
                       help="the PROTEUS proxy's routing_strategy_args.prompt_tokens (default chars)")
    proxy.add_argument("--load-nice", type=int, default=0, metavar="N",
                       help="run the load generator and mock upstream N (1-19) niceness steps below the proxies, "
                            "as if they ran on other machines (Linux; default 0: equal priority)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: batches 1,8; tokens 32,128; callers 1,8; tiny budgets; 0.2 s upstream "
                        "(explicit flags still win)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every section this many times and report per-cell medians (default 1; "
                        "a shared host moves single runs a lot)")
    parser.add_argument("--seed", type=int, default=0)


def _fill_defaults(args: argparse.Namespace) -> None:
    for name, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def device_description(device: str, threads: int) -> str:
    import torch

    if device.startswith("cuda"):
        return f"{device}: {torch.cuda.get_device_name(torch.device(device))} (torch {torch.__version__})"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu: {cpu}, {os.cpu_count()} cores, {threads} torch threads (torch {torch.__version__})"


def _print_table(title: str, rows: list[dict], columns: list[str]) -> None:
    print(f"\n{title}")
    widths = [max(len(c), *(len(f"{r.get(c, '')}") for r in rows)) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for row in rows:
        print("  ".join(f"{row.get(c, '')}".rjust(w) for c, w in zip(columns, widths)))


def print_report(result: dict) -> None:
    print(f"\ndevice: {result['device']}")
    print(f"prompts: {result['prompts_source']}")
    runs = ["p50_ms_runs", "qps_runs"] if result.get("repeat", 1) > 1 else []
    if runs:
        print(f"medians of {result['repeat']} runs (each run's p50 and qps in the last columns)")
    if result["table3"]:
        _print_table("decision latency (table 3)", result["table3"], ["tokens", "batch", "p50_ms", "p95_ms", "p99_ms", "qps", "n", *runs])
    if result["concurrency"]:
        _print_table("through the micro-batcher", result["concurrency"],
                     ["callers", "p50_ms", "p95_ms", "p99_ms", "qps", "mean_batch", "n", *runs])
    if result["proxy"]:
        p = result["proxy"]
        print(
            f"\nproxy (upstream {p['upstream_delay_ms']:.0f} ms, {p['callers']} callers): proteus p50 {p['proteus_p50_ms']:.1f} ms"
            f" vs simple-shuffle {p['shuffle_p50_ms']:.1f} ms -> p50 ratio {p['p50_ratio']:.4f}, p99 ratio {p['p99_ratio']:.4f}"
            + (f" (p50 ratio per run: {', '.join(f'{r:.4f}' for r in p['p50_ratio_runs'])})" if "p50_ratio_runs" in p else "")
        )
    for section, reason in result.get("skipped", {}).items():
        print(f"\n{section}: skipped ({reason})")
    print(f"repeated prompt (memory LRU hit), batch 1: p50 {result['cache_hit']['p50_ms']:.2f} ms")
    shuffle_rss = (result["proxy"] or {}).get("shuffle_rss_mb")
    print(f"peak RSS ({result['rss_source']}): {result['rss_mb']:.0f} MiB"
          + (f" vs simple-shuffle proxy worker {shuffle_rss:.0f} MiB (+{result['rss_mb'] - shuffle_rss:.0f} MiB)" if shuffle_rss else ""))
    startup = (result["proxy"] or {}).get("startup_rss_mb")
    if startup:
        print(f"proxy workers at start-up: proteus {startup['proteus']:.0f} MiB vs simple-shuffle {startup['shuffle']:.0f} MiB"
              f" (+{startup['proteus'] - startup['shuffle']:.0f} MiB)")
    if result.get("quality"):
        print(f"vs fp32 reference: {result['quality']}")


def predictor_options(args: argparse.Namespace) -> dict:
    """The bench's decision-path flags as ``routing_strategy_args.predictor_options`` for the proxy."""
    options = {
        "precision": args.precision,
        "quantize": None if args.quantize == "none" else args.quantize,
        "backend": args.backend,
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "truncation": args.truncation,
        "max_batch_tokens": args.max_batch_tokens,
        "runtime": None if args.runtime == "auto" else args.runtime,
        "cuda_graphs": args.cuda_graphs == "on",
        "tokenizer_threads": args.tokenizer_threads,
    }
    return {k: v for k, v in options.items() if v is not None}


def _self_peak_rss_mb() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)  # KiB on Linux


def litellm_importable() -> bool:
    """Whether the proxy section can start real LiteLLM proxies here."""
    try:
        import litellm  # noqa: F401
    except ImportError:  # also what ``sys.modules['litellm'] = None`` raises
        return False
    return True


def check_flags(args: argparse.Namespace) -> None:
    """Every flag a bad value of would surface later (or never): ValueError naming it, before any work."""
    for flag in ("min_iters", "max_iters", "pool_size", "proxy_callers", "proxy_requests", "repeat"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1; got {getattr(args, flag)}")
    for flag in ("cell_seconds", "concurrency_seconds", "upstream_delay"):
        value = getattr(args, flag)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"--{flag.replace('_', '-')} must be a number of seconds >= 0; got {value}")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1; got {args.threads}")
    if not 0 <= args.load_nice <= 19:
        raise ValueError(f"--load-nice must be 0-19; got {args.load_nice}")
    if args.load_nice and not sys.platform.startswith("linux"):
        raise ValueError("--load-nice needs Linux (per-thread niceness); use 0 elsewhere")
    if args.data not in (None, "none") and not any((Path(args.data) / ROUTERBENCH_DIR).glob("*.csv")):
        raise ValueError(f"--data {args.data} holds no {ROUTERBENCH_DIR}/*.csv: pass the shared data folder that holds "
                         f"{ROUTERBENCH_DIR}/ (e.g. ../shared/data), or 'none' for the bundled generic prompts")


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    _fill_defaults(args)
    configure_openmp(args.omp_wait_policy)  # read once, when torch loads
    check_flags(args)

    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR, ArtifactError
    from litellm_proteus.model_thread import run_on_model_thread
    from litellm_proteus.predictor import ProteusPredictor

    from .measure import CellBudget, cache_hit, table3
    from .prompts import cut_prompts, default_data_dir, load_prompts

    def progress(message: str) -> None:
        print(f"[bench] {message}", file=sys.stderr, flush=True)

    artifact = Path(args.artifact) if args.artifact else DEFAULT_ARTIFACT_DIR
    out = Path(args.out)
    started = time.time()
    load_before = os.getloadavg()
    try:
        predictor = run_on_model_thread(  # the plugin's threading: all torch work on one thread
            ProteusPredictor,
            artifact,
            device=args.device,
            precision=args.precision,
            quantize=None if args.quantize == "none" else args.quantize,
            threads=args.threads,
            max_tokens=args.max_tokens,
            truncation=args.truncation,
            backend=args.backend,
            max_batch_tokens=args.max_batch_tokens,
            runtime=args.runtime,
            cuda_graphs=args.cuda_graphs == "on",
            tokenizer_threads=args.tokenizer_threads,
            memory_cache=0,  # every measured decision encodes; cache hits are measured separately
        )
    except ArtifactError as exc:
        raise ValueError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)  # once the flags and the artifact are known good: no empty folder
    import torch

    data_dir = None if args.data == "none" else (args.data or default_data_dir())
    prompts, source = load_prompts(data_dir, seed=args.seed)
    lengths = sorted(set(args.tokens) | ({args.concurrency_tokens} if not args.skip_concurrency else set())
                     | ({args.proxy_tokens} if not args.skip_proxy else set()))
    pools = {n: cut_prompts(prompts, predictor.encoder.content_offsets, n, args.pool_size) for n in lengths}
    progress(f"{len(prompts)} prompts from {source}; artifact {artifact}; device {predictor.device}")

    skipped: dict[str, str] = {}
    if not args.skip_proxy and not litellm_importable():
        skipped["proxy"] = "LiteLLM is not installed: the proxy section runs real LiteLLM proxies (pip install 'litellm[proxy]')"
        progress(f"skipping the proxy section: {skipped['proxy']}")
        args.skip_proxy = True
    budget = CellBudget(seconds=args.cell_seconds, min_iters=args.min_iters, max_iters=max(args.min_iters, args.max_iters))
    settings = None
    if not args.skip_proxy:
        from .proxy import ProxySettings, proxy_bench

        settings = ProxySettings(
            callers=args.proxy_callers,
            requests=args.proxy_requests,
            delay_s=args.upstream_delay,
            device=predictor.device,
            artifact=str(artifact.resolve()),
            threads=args.threads,
            strategy_args={"predictor_options": predictor_options(args), "prompt_tokens": args.prompt_tokens},
            load_nice=args.load_nice,
        )
    if not args.skip_concurrency:
        from .concurrency import concurrency
    table3_runs, concurrency_runs, proxy_runs, rss_runs = [], [], [], []
    for run_index in range(args.repeat):
        if args.repeat > 1:
            progress(f"run {run_index + 1} of {args.repeat}")
        table3_runs.append(
            run_on_model_thread(table3, predictor, {n: pools[n] for n in args.tokens}, args.batches, budget, progress=progress)
        )
        if not args.skip_concurrency:
            rows = concurrency(
                predictor, pools[args.concurrency_tokens], args.callers, seconds=args.concurrency_seconds, progress=progress
            )
            for row in rows:
                row["tokens"] = args.concurrency_tokens
            concurrency_runs.append(rows)
        if settings is not None:
            workdir = out / ("proxy" if run_index == 0 else f"proxy-run{run_index + 1}")
            section, rss = proxy_bench(pools[args.proxy_tokens], predictor.models, settings, workdir, progress=progress)
            section["tokens"] = args.proxy_tokens
            proxy_runs.append(section)
            rss_runs.append(rss)
    rows = median_rows(table3_runs, ("tokens", "batch"))
    concurrency_rows = median_rows(concurrency_runs, ("callers",)) if concurrency_runs else []
    hit = run_on_model_thread(cache_hit, predictor, pools[min(args.tokens)][0], budget)

    quality = None
    if args.compare_reference:
        from .quality import compare_reference

        quality = run_on_model_thread(compare_reference, predictor, artifact, prompts[: max(64, args.pool_size)], progress=progress)

    proxy_section, rss_mb, rss_source = None, _self_peak_rss_mb(), "bench process"
    if proxy_runs:
        proxy_section, rss_mb, rss_source = median_proxy(proxy_runs), max(rss_runs), "proteus proxy worker"

    result = {
        "device": device_description(predictor.device, torch.get_num_threads()),
        "table3": rows,
        "concurrency": concurrency_rows,
        "proxy": proxy_section,
        "rss_mb": rss_mb,
        "rss_source": rss_source,
        "cache_hit": hit,
        "prompts_source": source,
        "repeat": args.repeat,
        "skipped": skipped,
        "settings": {
            "artifact": str(artifact),
            "precision": predictor.encoder.precision,
            "quantize": predictor.encoder.quantize,
            "threads": torch.get_num_threads(),
            "max_tokens": predictor.encoder.max_tokens,
            "truncation": predictor.encoder.truncation,
            "backend": predictor.encoder.backend,
            "max_batch_tokens": predictor.encoder.max_batch_tokens,
            "cuda_graphs": predictor.cuda_graphs,
            "tokenizer_threads": predictor.encoder.tokenizer_threads,
            "openmp": openmp_settings(),
            "command": "proteus bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 and sys.argv[1] == "bench" else None,
        },
        "host": {"cpus": os.cpu_count(), "loadavg_start": load_before, "loadavg_end": os.getloadavg()},
        "elapsed_s": round(time.time() - started, 1),
    }
    if quality is not None:
        result["quality"] = quality
    (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print_report(result)
    print(f"\nwrote {out / 'bench.json'} ({result['elapsed_s']:.0f} s)")
    return 0
