"""``proteus replay``: a test split streamed through the serving code path under task-mix shift.

Each request goes through ``ProteusPredictor.decide_embeddings`` (the proxy's predictor, micro-
batched like the proxy's batcher) and a ``ComplianceController`` (local state), in arrival order:
control -> decide at calibrated(tau + delta) -> record the chosen deployment's calibrated p; a
share of requests gets its outcome back as a feedback label ``--label-delay`` requests later.

Streams (logs carry no timestamps: arrival order is a seeded shuffle, rows drawn again in fresh
shuffles once a pool is used up):
  (a) ``as-is``: the test mix;
  (b) ``hardest``: the test mix, then from ``--shift-at`` on only the hardest task;
  (c) ``drift``: from the easiest task to the hardest, the hardest's share rising linearly;
  (d) ``degrade``: the test mix as is, but from ``--shift-at`` on the model the tier's static
      routing serves most often succeeds ``--degrade-drop`` less often (its outcomes are thinned at
      random, seeded), while the head's predictions stay as they were: only labels can see it.
A task's difficulty is its mean outcome over all models on the train and validation rows (never
test); where single tasks hold fewer than ``--min-group-rows`` test rows (MMLU subjects), the
hardest (easiest) tasks are pooled until they do.

Per scenario, tier and label share (plus ``static``: the controller off, today's calibration) it
reports accuracy over the stream and after the shift, trailing-window accuracy against tau,
requests until compliance returns after the shift, cost per 1K against static, the share of
requests flagged infeasible, and the shares served silently short (trailing window below tau by
more than its noise, no infeasible flag) and flagged while the window met tau; ``top_accuracy`` is
what routing every post-shift request at the controller's highest offset reaches (is the tau
reachable at all?).  Writes ``metrics.json`` and one PNG per scenario.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from litellm_proteus.compliance import ComplianceController, ComplianceSettings, state_key_for

SCENARIOS = ("as-is", "hardest", "drift", "degrade")
MAX_LENGTH = 1_000_000  # requests per stream: each holds a row per request and tier in memory


@dataclass
class Pools:
    """Test-row indices (into the eval split) of the whole mix, the easiest and the hardest tasks."""

    mix: np.ndarray
    easiest: np.ndarray
    hardest: np.ndarray
    easiest_tasks: list[str]
    hardest_tasks: list[str]


def task_pools(
    tasks_test: list[str], tasks_known: list[str], scores_known: np.ndarray, min_rows: int
) -> Pools:
    """Group test rows by task difficulty measured on the train/validation rows."""
    known = np.asarray(tasks_known)
    test = np.asarray(tasks_test)
    names = sorted(set(tasks_test))
    if len(names) < 2:
        raise ValueError(f"replay needs at least 2 tasks in the test split to shift the mix; found {names}")
    difficulty = {t: float(np.nanmean(scores_known[known == t])) if (known == t).any() else math.nan for t in names}
    ordered = sorted((t for t in names if math.isfinite(difficulty[t])), key=difficulty.__getitem__)
    if not ordered:  # difficulty is measured on train/val rows only: no test task has any to rank it by
        raise ValueError(f"replay ranks the test tasks by their outcomes on the train/validation rows, but none of the "
                         f"test tasks {names} appears there (train/validation tasks: {sorted(set(tasks_known))}): "
                         f"the hardest and easiest pools would be empty")

    def pool(order: list[str]) -> tuple[np.ndarray, list[str]]:
        chosen: list[str] = []
        for task in order:
            chosen.append(task)
            if np.isin(test, chosen).sum() >= min_rows:
                break
        return np.flatnonzero(np.isin(test, chosen)), chosen

    hardest, hardest_tasks = pool(ordered)
    easiest, easiest_tasks = pool(ordered[::-1])
    return Pools(np.arange(len(test)), easiest, hardest, easiest_tasks, hardest_tasks)


def shuffled_draws(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` rows from ``pool``: a fresh shuffle each time the pool is used up."""
    out = [rng.permutation(pool) for _ in range(-(-n // len(pool)))]
    return np.concatenate(out)[:n]


def build_stream(scenario: str, pools: Pools, length: int, shift_at: int, seed: int) -> tuple[np.ndarray, int]:
    """(rows in arrival order, index of the first shifted request)."""
    rng = np.random.default_rng(seed)
    if scenario in ("as-is", "degrade"):  # degrade: the same mix; its outcomes change (Degradation)
        return shuffled_draws(pools.mix, length, rng), length if scenario == "as-is" else shift_at
    if scenario == "hardest":
        head = shuffled_draws(pools.mix, shift_at, rng)
        return np.concatenate([head, shuffled_draws(pools.hardest, length - shift_at, rng)]), shift_at
    if scenario == "drift":
        easy, hard = shuffled_draws(pools.easiest, length, rng), shuffled_draws(pools.hardest, length, rng)
        take_hard = rng.random(length) < np.linspace(0.0, 1.0, length)
        return np.where(take_hard, hard, easy), 0
    raise ValueError(f"scenario must be one of {SCENARIOS}; got {scenario!r}")


@dataclass
class Trace:
    correct: np.ndarray
    cost: np.ndarray
    delta: np.ndarray
    infeasible: np.ndarray
    p_chosen: np.ndarray
    slot: np.ndarray | None = None  # the chosen slot per request
    p_offset: np.ndarray | None = None  # the chosen deployment's correction, included in p_chosen


@dataclass(frozen=True)
class Degradation:
    """From request ``start`` on, slot ``slot`` succeeds ``drop`` less often: each of its outcomes is
    kept with probability 1 - drop / ``rate`` (``rate``: its mean outcome before), by a seeded draw
    per request, so every run of a stream degrades the same requests."""

    slot: int
    start: int
    drop: float
    rate: float
    seed: int

    def __post_init__(self) -> None:
        if not 0 < self.drop < self.rate:
            raise ValueError(f"--degrade-drop must be in (0, {self.rate:.3f}) (the model's success rate); got {self.drop}")

    def keep(self, n: int) -> np.ndarray:
        """[n] per request: 1.0 where its outcome stands, 0.0 where the degradation fails it."""
        kept = np.random.default_rng(self.seed).random(n) >= self.drop / self.rate
        kept[: self.start] = True
        return kept.astype(np.float64)


def degradation_for(static: Trace, split, rows: np.ndarray, start: int, drop: float, seed: int) -> Degradation:
    """Degrade the slot the static run serves most often from ``start`` on."""
    served = static.slot[start:]
    slot = int(np.bincount(served).argmax())
    rate = float(np.nanmean(split.scores[rows[start:][served == slot], slot]))
    return Degradation(slot, start, drop, rate, seed)


def replay_stream(
    predictor,
    controller: ComplianceController | None,
    rows: np.ndarray,
    split,
    tau: float,
    tier: str,
    label_fraction: float,
    label_delay: int,
    batch: int,
    seed: int,
    fixed_delta: float = 0.0,
    degradation: Degradation | None = None,
) -> Trace:
    """Serve ``rows`` of ``split`` (embeddings, scores, costs, draws) at ``tau``; ``controller``
    None routes every request at ``fixed_delta``.  ``degradation``: the outcomes a degraded slot
    realises (predictions unchanged).  With the controller's ``breaker`` or ``correction`` enabled,
    each slot plays one deployment (its id: the slot number)."""
    from litellm_proteus.deployment_correction import DeploymentCorrection, alarm_best_p
    from litellm_proteus.predictor import Candidate
    from litellm_proteus.quality_breaker import QualityBreaker

    n, k = len(rows), split.scores.shape[1]
    labelled = np.random.default_rng(seed).random(n) < label_fraction
    key = state_key_for(tier, "default", tau, 0.01)
    out = Trace(np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n), np.zeros(n, dtype=np.int64),
                np.zeros(n))
    kept = degradation.keep(n) if degradation is not None else None
    delivered = 0
    step = batch if controller is not None else n
    breaker = QualityBreaker(controller.settings.breaker, controller) if controller is not None else None
    corrector = DeploymentCorrection(controller.settings.correction, controller) if controller is not None else None
    offsets = alarm = {str(s): 0.0 for s in range(k)}
    p_ref = predictor.taus.reference_p(predictor.taus.effective(tau)[0], predictor.mix_operating_points)
    for start in range(0, n, step):
        if controller is not None:
            # only requests already decided (< start) have an outcome to report, even at --label-delay 0
            while delivered < start and delivered + label_delay <= start:
                if labelled[delivered]:
                    controller.record_feedback(key, tau, out.p_chosen[delivered], out.correct[delivered])
                    residual = out.correct[delivered] - out.p_chosen[delivered]
                    breaker.record(str(out.slot[delivered]), residual)
                    corrector.record(str(out.slot[delivered]), residual + out.p_offset[delivered])
                delivered += 1
            control = controller.control(key, tau)
            delta, infeasible = control.delta, control.infeasible
            left_out = breaker.open_ids([str(s) for s in range(k)])
            offsets, alarm = corrector.offsets([str(s) for s in range(k)])
        else:
            delta, infeasible, left_out = fixed_delta, False, set()
        slots = [s for s in range(k) if str(s) not in left_out] or list(range(k))
        idx = rows[start : start + step]
        decisions = predictor.decide_embeddings(
            split.emb[idx],
            [tau] * len(idx),
            [[Candidate(s, float(split.costs[r, s]), offsets[str(s)]) for s in slots] for r in idx],
            split.draws[idx] if predictor.mix_operating_points else None,
            [delta] * len(idx),
        )
        for j, (r, d) in enumerate(zip(idx, decisions)):
            i = start + j
            out.correct[i] = split.scores[r, d.slot]
            if kept is not None and d.slot == degradation.slot:
                out.correct[i] *= kept[i]
            out.slot[i] = d.slot
            out.cost[i] = split.costs[r, d.slot]
            out.delta[i], out.infeasible[i] = delta, infeasible
            out.p_chosen[i] = d.p[d.index]
            out.p_offset[i] = d.p_correction[d.index] if d.p_correction else 0.0
            if controller is not None:
                p_best = alarm_best_p(d.p, d.p_correction, [alarm[str(s)] for s in slots])
                controller.record_decision(key, d.tau_effective, d.p[d.index], p_best, p_ref)
    return out


def trailing(values: np.ndarray, window: int) -> np.ndarray:
    """Mean over the last ``window`` values at each position (NaN before a full window)."""
    sums = np.concatenate([[0.0], np.cumsum(values)])
    out = np.full(len(values), np.nan)
    if len(values) >= window:
        out[window - 1 :] = (sums[window:] - sums[:-window]) / window
    return out


def summarize(trace: Trace, tau: float, shift: int, window: int, static_cost: float | None) -> dict:
    """Figures of one run; ``shift`` = first shifted request (len = no shift)."""
    n = len(trace.correct)
    roll = trailing(trace.correct, window)
    after = slice(shift if shift < n else 0, n)
    settled = slice(min((shift if shift < n else 0) + window, n), n)
    # Compliance has returned at the first full window ending after the shift that meets tau and
    # after which no window falls below tau by more than a 500-request window's sampling noise.
    noise = 1.96 * math.sqrt(tau * (1 - tau) / window)
    recovered = None
    start = max(shift if shift < n else 0, window - 1)
    ok = roll >= tau
    low = roll < tau - noise
    for i in range(start, n):
        if ok[i] and not low[i:].any():
            recovered = i - (shift if shift < n else 0)
            break
    cost = float(trace.cost.mean() * 1000)
    full = roll[window - 1 :]
    # The promise an operator is sold: a request is served either within noise of tau or flagged.
    # A silent shortfall is a request whose trailing window is below tau by more than that noise
    # while its response said nothing (no infeasible flag); a false alarm is a flag on a request
    # whose window meets tau.
    served_low = low[window - 1 :]
    flagged = trace.infeasible[window - 1 :]
    return {
        "accuracy": round(float(trace.correct.mean()), 4),
        "accuracy_after_shift": round(float(trace.correct[after].mean()), 4),
        "accuracy_settled": round(float(trace.correct[settled].mean()), 4) if settled.start < n else None,
        "met_after_shift": bool(trace.correct[after].mean() >= tau),
        "met_settled": bool(trace.correct[settled].mean() >= tau) if settled.start < n else None,
        "windows_met": round(float(np.mean(full >= tau)), 4) if len(full) else None,
        "worst_window": round(float(np.nanmin(roll)), 4) if len(full) else None,
        "requests_to_compliance": recovered,
        "cost_per_1k": round(cost, 5),
        "cost_vs_static": None if not static_cost else round(cost / static_cost - 1, 4),
        "infeasible_share_after_shift": round(float(trace.infeasible[after].mean()), 4),
        "silent_shortfall_share": round(float(np.mean(served_low & ~flagged)), 4) if len(full) else None,
        "false_alarm_share": round(float(np.mean(flagged & (full >= tau))), 4) if len(full) else None,
        "delta_mean": round(float(trace.delta.mean()), 4),
        "delta_max": round(float(trace.delta.max()), 4),
        "mean_p_chosen_after_shift": round(float(trace.p_chosen[after].mean()), 4),
    }


def default_tiers(tau_range: tuple[float, float]) -> dict[str, float]:
    """Economy / Standard / Premium: the middles of the tau range's thirds (as ``proteus eval``)."""
    lo, hi = tau_range
    third = (hi - lo) / 3
    return {name: round(lo + third * (i + 0.5), 4) for i, name in enumerate(("Economy", "Standard", "Premium"))}


def plot_scenario(path: Path, scenario: str, runs: dict, tiers: dict[str, float], shift: int, window: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tiers), figsize=(5 * len(tiers), 4), squeeze=False)
    for ax, (tier, tau) in zip(axes[0], tiers.items()):
        for label, trace in runs[tier].items():
            ax.plot(trailing(trace.correct, window) * 100, label=label, lw=1.2 if label != "static" else 2, alpha=0.9)
        ax.axhline(tau * 100, color="black", ls="--", lw=1, label=f"tau = {tau:.3f}")
        if 0 < shift < len(next(iter(runs[tier].values())).correct):
            ax.axvline(shift, color="grey", ls=":", lw=1)
        ax.set_title(f"{scenario}: {tier}")
        ax.set_xlabel("request")
        ax.set_ylabel(f"accuracy over trailing {window} (%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--artifact", default=None, metavar="DIR", help="artifact (default: the bundled one)")
    parser.add_argument("--data", nargs="+", metavar="PATH", help="its training data (default: manifest.data.paths)")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for metrics.json and the PNGs")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--labels", nargs="+", type=float, default=[0.0, 0.05, 1.0], metavar="SHARE",
                        help="shares of requests whose outcome comes back as feedback (default: 0 0.05 1)")
    parser.add_argument("--label-delay", type=int, default=200, help="requests between a decision and its label (default: %(default)s)")
    parser.add_argument("--length", type=int, default=4000, help="requests per stream (default: %(default)s)")
    parser.add_argument("--shift-at", type=int, default=1000, help="scenarios hardest, degrade: first shifted request (default: %(default)s)")
    parser.add_argument("--degrade-drop", type=float, default=0.15,
                        help="scenario degrade: how much less often the degraded model succeeds (0.15 = 15 pp)")
    parser.add_argument("--window", type=int, default=500, help="trailing window for accuracy against tau (default: %(default)s)")
    parser.add_argument("--min-group-rows", type=int, default=100, help="test rows the easiest/hardest pools hold at least (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=8, help="requests per micro-batch (one control read each) (default: %(default)s)")
    parser.add_argument("--tiers", nargs="+", metavar="NAME=TAU", help="tiers (default: middles of tau_range's thirds)")
    parser.add_argument("--fixed-deltas", nargs="+", type=float, default=[], metavar="DELTA",
                        help="also route every request at these fixed offsets (controller off): the cost-accuracy slope near tau")
    parser.add_argument("--compliance", default="{}", metavar="JSON", help="ComplianceSettings fields, e.g. '{\"step\": 0.05}'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", dest="progress", action="store_false", help="no progress bars")


def parse_tiers(values: list[str] | None, tau_range: tuple[float, float]) -> dict[str, float]:
    if not values:
        return default_tiers(tau_range)
    tiers = {}
    for value in values:
        name, _, tau = value.partition("=")
        if name in tiers:
            raise ValueError(f"--tiers: tier {name!r} is given twice ({tiers[name]:g} and {tau})")
        try:
            tiers[name] = float(tau)
        except ValueError:
            raise ValueError(f"--tiers: expected NAME=TAU with TAU a number in (0, 1]; got {value!r}") from None
        if not (name and 0 < tiers[name] <= 1):
            raise ValueError(f"--tiers: expected NAME=TAU with TAU a number in (0, 1]; got {value!r}")
    return tiers


def run(args: argparse.Namespace) -> int:
    import torch

    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
    from litellm_proteus.predictor import ProteusPredictor

    from .evaluation.inputs import load_inputs
    from .p_calibration import calibration_report, raw_p

    broken = [rule for rule, ok in ((f"0 < --shift-at ({args.shift_at}) < --length ({args.length})", 0 < args.shift_at < args.length),
                                    (f"1 <= --window ({args.window}) <= --length ({args.length})", 1 <= args.window <= args.length),
                                    (f"--batch ({args.batch}) >= 1", args.batch >= 1),
                                    (f"--length ({args.length}) <= {MAX_LENGTH}", args.length <= MAX_LENGTH),
                                    (f"--label-delay ({args.label_delay}) >= 0", args.label_delay >= 0),
                                    (f"--seed ({args.seed}) >= 0", args.seed >= 0),
                                    (f"--min-group-rows ({args.min_group_rows}) >= 1", args.min_group_rows >= 1)) if not ok]
    if broken:
        raise ValueError(f"need {'; '.join(broken)}")
    if any(not math.isfinite(offset) for offset in args.fixed_deltas or ()):
        raise ValueError(f"--fixed-deltas: offsets must be finite numbers; got {args.fixed_deltas}")
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {args.out} is a file: pass a folder for metrics.json and the figures")
    if any(not 0 <= share <= 1 for share in args.labels):
        raise ValueError(f"--labels: shares must be in [0, 1]; got {args.labels}")
    try:
        settings = ComplianceSettings(**json.loads(args.compliance))
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"--compliance: expected a JSON object of ComplianceSettings fields ({exc})") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"--compliance: {problems} (fields: {', '.join(ComplianceSettings.model_fields)})") from None
    torch.set_num_threads(1)  # the heads are tiny: threads cost more than they save
    artifact = args.artifact or str(DEFAULT_ARTIFACT_DIR)
    inputs = load_inputs(artifact, data=args.data, progress=args.progress)
    if inputs.log.task is None:
        raise ValueError("replay shifts the task mix: the data has no task column (RouterBench eval_name, SPROUT dataset ...)")
    predictor = ProteusPredictor(artifact)
    tiers = parse_tiers(args.tiers, tuple(inputs.manifest.tau_range))
    task = np.asarray(inputs.log.task)
    known = np.flatnonzero(np.isin(inputs.log.split, ["train", "val"]))
    pools = task_pools(list(task[inputs.test_rows]), list(task[known]), inputs.log.scores[known], args.min_group_rows)
    if set(pools.hardest_tasks) & set(pools.easiest_tasks):  # the shifted streams would replay (part of) the same mix
        print(f"warning: --min-group-rows {args.min_group_rows} pools tasks into both the hardest and the easiest pool "
              f"({len(pools.hardest)} and {len(pools.easiest)} test rows): the shift scenarios do not shift the mix",
              file=sys.stderr)
    test = inputs.test
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics: dict = {
        "artifact": artifact,
        "dataset": inputs.dataset,
        "tiers": tiers,
        "settings": settings.model_dump(),
        "stream": {k: getattr(args, k) for k in ("length", "shift_at", "window", "label_delay", "batch", "seed")},
        "tasks": {"hardest": pools.hardest_tasks, "easiest": pools.easiest_tasks,
                  "hardest_rows": int(len(pools.hardest)), "easiest_rows": int(len(pools.easiest))},
        "p_calibration_test": calibration_report(inputs.manifest.p_calibration, raw_p(inputs.model, test.emb), test.scores),
        "scenarios": {},
    }
    for scenario in args.scenarios:
        rows, shift = build_stream(scenario, pools, args.length, args.shift_at, args.seed)
        runs: dict[str, dict[str, Trace]] = {}
        report: dict[str, dict] = {}
        for tier, tau in tiers.items():
            static = replay_stream(predictor, None, rows, test, tau, tier, 0.0, args.label_delay, args.batch, args.seed)
            degradation = None
            if scenario == "degrade":  # static routing never reads outcomes: degrade its outcomes afterwards
                degradation = degradation_for(static, test, rows, shift, args.degrade_drop, args.seed + 2)
                static.correct *= np.where(static.slot == degradation.slot, degradation.keep(len(rows)), 1.0)
            top = replay_stream(predictor, None, rows, test, tau, tier, 0.0, args.label_delay, args.batch, args.seed,
                                fixed_delta=settings.delta_max, degradation=degradation)
            runs[tier] = {"static": static}
            static_cost = float(static.cost.mean() * 1000)
            tier_report = {"tau": tau, "static": summarize(static, tau, shift, args.window, None),
                           "p_ref": predictor.taus.reference_p(predictor.taus.effective(tau)[0], predictor.mix_operating_points)}
            after = slice(shift if shift < len(rows) else 0, len(rows))
            tier_report["top_accuracy_after_shift"] = round(float(top.correct[after].mean()), 4)
            tier_report["top_reaches_tau"] = bool(top.correct[after].mean() >= tau)
            if degradation is not None:
                tier_report["degraded"] = {"model": inputs.manifest.models[degradation.slot], "slot": degradation.slot,
                                           "success_rate": round(degradation.rate, 4), "drop": degradation.drop,
                                           "static_share": round(float(np.mean(static.slot[shift:] == degradation.slot)), 4)}
            for offset in args.fixed_deltas:
                fixed = replay_stream(predictor, None, rows, test, tau, tier, 0.0, args.label_delay, args.batch, args.seed,
                                      fixed_delta=offset, degradation=degradation)
                tier_report.setdefault("fixed_delta", {})[f"{offset:g}"] = summarize(fixed, tau, shift, args.window, static_cost)
            for share in args.labels:
                controller = ComplianceController(settings, artifact_margin=inputs.manifest.calibration.margin)
                trace = replay_stream(predictor, controller, rows, test, tau, tier, share, args.label_delay, args.batch,
                                      args.seed + 1, degradation=degradation)
                label = f"labels {share:g}"
                runs[tier][label] = trace
                tier_report[label] = summarize(trace, tau, shift, args.window, static_cost)
            report[tier] = tier_report
        metrics["scenarios"][scenario] = {"shift_at": shift if shift < len(rows) else None, "tiers": report}
        plot_scenario(out_dir / f"replay_{scenario}.png", scenario, runs, tiers, shift, args.window)
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(headline(metrics), indent=2))
    return 0


def headline(metrics: dict) -> dict:
    """Per scenario and tier: tau, accuracy after the shift static vs at the top operating point, and per
    label share with the controller: accuracy after the shift, requests to compliance, cost vs static,
    share flagged infeasible."""
    out = {}
    for scenario, body in metrics["scenarios"].items():
        for tier, r in body["tiers"].items():
            row = {"tau": r["tau"], "static": r["static"]["accuracy_after_shift"], "top": r["top_accuracy_after_shift"]}
            for label, s in r.items():
                if label.startswith("labels"):
                    row[label] = {"accuracy": s["accuracy_after_shift"], "requests_to_compliance": s["requests_to_compliance"],
                                  "cost_vs_static": s["cost_vs_static"], "infeasible_share": s["infeasible_share_after_shift"],
                                  "silent_shortfall_share": s["silent_shortfall_share"]}
            out[f"{scenario}/{tier}"] = row
    return out
