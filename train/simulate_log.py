"""``proteus simulate-log``: a production decision log simulated from a full-information routing log.

Each request is a prompt of the chosen split, sent at one of the strategy config's tiers (uniformly);
the artifact routes it exactly as the proxy would (``routing.route_log``: calibrated tau, prompt-hash
mixing), every artifact slot being a deployed candidate priced at the row's logged cost;
exploration (``litellm_proteus.exploration``) may then move it; only the chosen model's recorded
outcome exists, and it is revealed as feedback for ``--label-share`` of the requests, ``--delay-s``
seconds (uniform 0..delay) after the decision.  On ``--shadow-share`` of the requests every model's
recorded outcome is revealed as a shadow row (what the proxy's shadow evaluation writes,
``litellm_proteus.shadow_rows``).  Tiers: the proxy config's (``--config``, validated by the proxy's
parser) or ``--tiers NAME=TAU ...``; each tier's requests come from one API key whose metadata names
it.  Every flag is checked before anything is read or written.
Output: decision-log JSONL in the proxy's schema (``decisions-<UTC>-<pid>-<n>.jsonl``, ``--rotate`` records per
file) and shadow rows (``shadow-<UTC>-<pid>-<n>.jsonl``), the files ``proteus train --data DIR`` reads.
``--out`` must be empty or new: call ids repeat from run to run (``sim-<seed>-<n>``), so two simulations
in one folder would be read as one log with each call's records mixed.  ``--force`` deletes the
``decisions-*.jsonl`` and ``shadow-*.jsonl`` files there first (what this command writes; other files stay),
only in a folder this command wrote (it leaves ``MARKER`` there): a proxy's own log is never deleted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import numpy as np
import yaml

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR, load_artifact
from litellm_proteus.config import CONFIG_PATH, ProteusConfig, ProteusConfigError
from litellm_proteus.decision_log import (FILE_PREFIX, FILE_SUFFIX, LoggedCandidate, decision_record, feedback_record,
                                          log_file_name, outcome_record)
from litellm_proteus.compliance import state_key_for
from litellm_proteus.exploration import explore
from litellm_proteus.predictor import mixing_draw
from litellm_proteus.shadow_rows import SHADOW_PREFIX, shadow_row
from litellm_proteus.tiers import hash_key

from .data import assign_splits, load_logs
from .data.decision_log import MAX_TS
from .evaluation.inputs import artifact_encoder
from .routing import fill_missing_costs, route_log

START_TS = 1_790_000_000.0  # simulated clock start (2026-09-21 UTC); one request per `--interval-s`
# Each tier's requests come from one API key whose metadata names the tier: what the proxy logs for
# such a request (litellm_proteus.engine.TAU_SOURCES) is tau_source "key_metadata" and that key's hash.
TAU_SOURCE = "key_metadata"


def config_tiers(path: str | os.PathLike) -> dict[str, float]:
    """``router_settings.routing_strategy_args.tiers`` of a LiteLLM proxy config, validated by the
    proxy's own parser (``ProteusConfig``: a tau in (0, 1], ``default_tier`` one of them), whose
    errors name the file and field.  Only the tier fields are parsed: the rest of the block (a Redis
    URL from the environment, say) does not matter to a simulation."""
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"--config {path}: not YAML ({exc})") from None
    settings = config.get("router_settings") if isinstance(config, dict) else None
    block = settings.get("routing_strategy_args") if isinstance(settings, dict) else None
    if not isinstance(block, dict) or block.get("tiers") is None:
        raise ValueError(f"--config {path}: no router_settings.routing_strategy_args.tiers "
                         "(a mapping tier -> tau in (0, 1])")
    tiers = block["tiers"]
    fields = {"tiers": tiers}
    if "default_tier" in block:
        fields["default_tier"] = block["default_tier"]
    elif isinstance(tiers, dict) and tiers:  # the default "standard" need not be one of this file's tiers
        fields["default_tier"] = str(next(iter(tiers)))
    try:
        parsed = ProteusConfig.parse(fields, where=f"--config {path}: {CONFIG_PATH}")
    except ProteusConfigError as exc:
        message = str(exc)
        raise ValueError(message if "(0, 1]" in message else f"{message}; a tier's tau is a number in (0, 1]") from None
    return {name: float(tau) for name, tau in parsed.tiers.items()}


def parse_tiers(items: list[str]) -> dict[str, float]:
    """``["premium=0.85", "economy=0.79"]`` -> ``{"premium": 0.85, "economy": 0.79}``."""
    tiers: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            tau = float(value)
        except ValueError:
            tau = float("nan")
        if not sep or not name or not 0 < tau <= 1:
            raise ValueError(f"--tiers: {item!r} is not NAME=TAU with TAU in (0, 1]")
        if name in tiers:  # a second value would silently win: one tau per tier, as in a proxy config
            raise ValueError(f"--tiers: tier {name!r} is given twice ({name}={tiers[name]:g} and {item}); "
                             "give each tier once")
        tiers[name] = tau
    return tiers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", nargs="+", required=True, metavar="PATH", help="full-information routing log(s)")
    parser.add_argument("--split", default="train", choices=("train", "val", "test"), help="rows to draw prompts from (default: %(default)s)")
    parser.add_argument("--artifact", default=str(DEFAULT_ARTIFACT_DIR), help="the logging router (default: bundled)")
    tiers = parser.add_mutually_exclusive_group(required=True)
    tiers.add_argument("--config", help="LiteLLM proxy config whose tiers the requests use")
    tiers.add_argument("--tiers", nargs="+", metavar="NAME=TAU", help="the requests' tiers, e.g. low=0.72 high=0.78")
    parser.add_argument("--out", required=True, metavar="DIR", help="decision-log directory to write (new or empty)")
    parser.add_argument("--force", action="store_true",
                        help="--out holds an earlier simulation: delete its decisions-*.jsonl and shadow-*.jsonl files first")
    parser.add_argument("--requests", type=int, default=0, help="requests to simulate (0: each prompt of the split once)")
    parser.add_argument("--label-share", type=float, default=0.05, help="share of requests that get feedback (default: %(default)s)")
    parser.add_argument("--shadow-share", type=float, default=0.0,
                        help="share of requests whose every model's outcome is revealed as a shadow row (default: %(default)s)")
    parser.add_argument("--exploration-rate", type=float, default=0.02, help="exploration rate on every tier (default: %(default)s)")
    parser.add_argument("--delay-s", type=float, default=3600.0, help="feedback arrives up to this long after a decision (default: %(default)s)")
    parser.add_argument("--start-ts", type=float, default=START_TS, help="unix time of the first request")
    parser.add_argument("--interval-s", type=float, default=1.0, help="seconds between simulated requests (default: %(default)s)")
    parser.add_argument("--rotate", type=int, default=10_000, help="records per JSONL file (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=os.environ.get("PROTEUS_CACHE_DIR", os.path.expanduser("~/.cache/proteus")))


def check_flags(args: argparse.Namespace) -> dict[str, float]:
    """Every flag, before anything is read or written: the request tiers (``--config`` / ``--tiers``)."""
    for name in ("label_share", "exploration_rate", "shadow_share"):
        value = getattr(args, name)
        if not 0 <= value <= 1:
            raise ValueError(f"--{name.replace('_', '-')} must lie in [0, 1]; got {value}")
    for name, least in (("requests", 0), ("rotate", 1), ("seed", 0)):
        if getattr(args, name) < least:
            raise ValueError(f"--{name} must be an integer >= {least}; got {getattr(args, name)}")
    for name in ("delay_s", "interval_s", "start_ts"):  # a negative interval or delay runs the clock backwards
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"--{name.replace('_', '-')} must be a number >= 0 (seconds); got {value}")
    # every record's ts must be a date (the readers refuse one past 9999-12-31)
    last = args.start_ts + max(args.requests, 1) * args.interval_s + args.delay_s + 1.0
    if last > MAX_TS:
        raise ValueError(f"--start-ts + --requests x --interval-s + --delay-s reaches {last:g}, past 9999-12-31 "
                         f"({MAX_TS:.0f} s); use smaller values")
    return config_tiers(args.config) if args.config else parse_tiers(args.tiers)


def run(args: argparse.Namespace) -> int:
    tiers = check_flags(args)
    check_out(Path(args.out), args.force)
    summary = simulate(args, tiers)
    print(json.dumps(summary, indent=2))
    return 0


MARKER = ".proteus-simulate-log"  # in every --out this command writes: --force clears only such folders


def written_files(out: Path) -> list[Path]:
    """The files of ``out`` that this command writes (by name)."""
    return sorted(p for pattern in (f"{FILE_PREFIX}*{FILE_SUFFIX}", f"{SHADOW_PREFIX}*{FILE_SUFFIX}")
                  for p in out.glob(pattern) if p.is_file())


def check_out(out: Path, force: bool) -> None:
    """Refuse an ``--out`` that exists and is not empty, unless ``force``."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a directory")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if force:
        if not (out / MARKER).exists():
            raise ValueError(f"--out {out}: --force deletes only a folder simulate-log wrote (with its {MARKER} file); "
                             "this one has none, and may hold a proxy's own decision log. Use a new folder")
        return
    ours = written_files(out)
    raise ValueError(f"--out {out} is not empty ({len(ours)} decision-log / shadow files, "
                     f"{sum(1 for e in out.iterdir() if e.name != MARKER) - len(ours)} other entries): a second simulation there would be "
                     "read as one log with the first (call ids repeat). Use a new folder, or --force to delete its "
                     "decisions-*.jsonl and shadow-*.jsonl files first")


def clear_out(out: Path) -> int:
    """Delete the files of ``out`` named as this command names its output; how many."""
    ours = written_files(out)
    for path in ours:
        path.unlink()
    return len(ours)


def simulate(args: argparse.Namespace, tiers: dict[str, float]) -> dict:
    rng = np.random.default_rng(args.seed)
    model, manifest = load_artifact(args.artifact)
    data = assign_splits(load_logs(args.data), seed=0)
    data = data.part(args.split).with_models(manifest.models)
    if not len(data):
        raise ValueError(f"--split {args.split}: the data has no {args.split} rows; choose another split")
    n = len(data) if args.requests == 0 else args.requests
    rows = rng.permutation(len(data)) if args.requests == 0 else rng.integers(0, len(data), n)
    encoder = artifact_encoder(manifest.encoder, Path(args.artifact), args.cache_dir, "cpu", precision="fp32")
    embeddings = encoder.encode(data.prompts, progress=False)
    tier_names = list(tiers)
    tier_of = rng.integers(0, len(tier_names), n)
    taus = np.array([tiers[tier_names[t]] for t in tier_of])
    costs = fill_missing_costs(data.costs)
    prompts = [data.prompts[i] for i in rows]
    routed = route_log(model, manifest, embeddings[rows], costs[rows], taus, draws=np.array([mixing_draw(p) for p in prompts]))
    weights_sha = manifest.weights_sha256
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cleared = clear_out(out) if args.force else 0
    (out / MARKER).write_text("written by proteus simulate-log: --force may replace its decisions-*.jsonl and shadow-*.jsonl\n")
    records: list[tuple[float, dict]] = []
    shadows: list[dict] = []
    shadow_rng = np.random.default_rng([args.seed, 1])  # its own stream: the log is the same for every share
    key_hashes = {tier: hash_key(f"sk-simulated-{tier}") for tier in tier_names}  # one API key per tier
    explored = labelled = 0
    policy_cost = chosen_cost = other_cost = 0.0
    for r in range(n):
        i, ts = int(rows[r]), args.start_ts + r * args.interval_s
        call_id = f"sim-{args.seed}-{r}"
        p = routed.p[r].tolist()
        step = explore(p, int(routed.choice[r]), args.exploration_rate, float(rng.random()), float(rng.random()))
        explored += int(step.index != routed.choice[r])
        policy_cost += costs[rows[r], routed.choice[r]]
        chosen_cost += costs[i, step.index]
        other_cost += float(np.delete(costs[i], step.index).mean())  # a shadow call to one other candidate
        tier = tier_names[tier_of[r]]
        candidates = [LoggedCandidate(f"sim-{m}", j, m, float(costs[i, j]), round(p[j], 6)) for j, m in enumerate(manifest.models)]
        records.append((ts, decision_record(
            call_id=call_id, key_hash=key_hashes[tier], tier=tier, tau_source=TAU_SOURCE,
            state_key=state_key_for(tier, TAU_SOURCE, float(taus[r]), 0.01), tau=float(taus[r]),
            tau_requested=None, tau_effective=float(taus[r]), delta=0.0, mu=float(routed.mu[r]), model_group="proteus-auto",
            candidates=candidates, chosen=step.index, propensity=step.propensity, prompt=prompts[r], artifact=weights_sha,
            log_prompt=True, ts=ts,
        )))
        records.append((ts + 0.5, outcome_record(
            call_id=call_id, deployment_id=f"sim-{manifest.models[step.index]}", success=True, response_cost=float(costs[i, step.index]), latency_ms=500.0, error=None, ts=ts + 0.5,
        )))
        score = data.scores[i, step.index]
        if rng.random() < args.label_share and np.isfinite(score):
            labelled += 1
            fts = ts + float(rng.uniform(0, args.delay_s))
            records.append((fts, feedback_record(call_id, float(score), "simulation", ts=fts)))
        if shadow_rng.random() < args.shadow_share:
            known = lambda v: float(v) if np.isfinite(v) else None  # noqa: E731
            shadows.append(shadow_row(
                call_id=call_id, prompt=prompts[r], tier=tier, tau=float(taus[r]), models=manifest.models, served=manifest.models[step.index], call_share=1.0,
                scores={m: known(data.scores[i, j]) for j, m in enumerate(manifest.models)},
                costs={m: known(costs[i, j]) for j, m in enumerate(manifest.models)}, ts=ts + 1.0,
            ))
    records.sort(key=lambda item: item[0])
    for part, start in enumerate(range(0, len(records), args.rotate)):
        chunk = records[start:start + args.rotate]
        with open(out / log_file_name(os.getpid(), part, chunk[0][0]), "w", encoding="utf-8") as handle:
            for _, record in chunk:
                handle.write(json.dumps(record) + "\n")
    for part, start in enumerate(range(0, len(shadows), args.rotate)):
        chunk = shadows[start:start + args.rotate]
        with open(out / log_file_name(os.getpid(), part, chunk[0]["ts"], prefix=SHADOW_PREFIX), "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in chunk)
    return {"out": str(out), **({"deleted_files": cleared} if cleared else {}), "requests": n, "labelled": labelled, "explored": explored, "shadow_rows": len(shadows),
            "tiers": tiers,
            "exploration_cost_overhead": round(chosen_cost / policy_cost - 1, 6) if policy_cost else 0.0,
            "other_candidate_cost_ratio": round(other_cost / chosen_cost, 6) if chosen_cost else 0.0}
