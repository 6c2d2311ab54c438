"""``proteus compliance --log DIR``: is each tier's accuracy floor kept on live traffic?

Per compliance state of the decision log (``litellm_proteus/decision_log.py``; the decisions'
``state_key``, as the controller and its gauges keep them: ``tier:<name>@<tau>`` for a tier's own τ,
``tau:<bucket>`` for requests that sent theirs, so one row holds one τ): requests (calls), failed (calls
whose last PROTEUS pick did not answer: a fallback group did, or nothing), predicted accuracy (mean
calibrated p of the chosen deployments), realised accuracy over the labelled requests (mean
feedback score; ``LoggedDecision.label``: a score for a call whose pick failed, answered by a
fallback group, is not the pick's and is left out) with a 95 % Wilson interval, cost per 1K
requests (``request_cost``) and the controller's δ over time (mean per quarter of the state's
requests).  The figure (``--png``) plots, per state, τ (the decision's ``tau``),
the predicted and the realised accuracy over trailing windows of ``--window`` requests.

Per deployment PROTEUS picked: picks (every attempt, a retried call's failed ones included), failed
picks, labels, the mean calibrated p of its labelled
decisions *before* the deployment correction (what the quality breaker and the correction judge
against), the realised accuracy with its Wilson interval, their difference (the residual) and the
correction its latest decision carried (``p_correction``).  A deployment far below its predictions
is one a provider may have changed behind its name.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from litellm_proteus.compliance import realised_bounds
from litellm_proteus.decision_log import (LoggedDecision, chosen_deployment_id, chosen_p, iter_records, join_records, log_files,
                                          uncorrected_p)
from litellm_proteus.request import short_repr

DELTA_SEGMENTS = 4


def wilson_interval(successes: float, n: int) -> tuple[float, float]:
    """The controller's Wilson 95 % interval (``compliance.realised_bounds``), clipped to [0, 1];
    fractional scores count as fractional successes."""
    if n <= 0:
        return (math.nan, math.nan)
    _, lower, upper = realised_bounds(n, successes)
    return (max(0.0, lower), min(1.0, upper))


@dataclass
class StateCompliance:
    state_key: str
    tier: str
    requests: int
    failed: int  # calls whose last PROTEUS pick did not answer
    tau: float  # mean promised tau
    predicted_accuracy: float
    labels: int
    realised_accuracy: float | None
    realised_ci95: tuple[float, float] | None
    cost_per_1k_usd: float | None  # over the requests whose cost is known (None: no such request)
    delta_over_time: list[float]  # mean delta per quarter of the state's requests, in time order


def request_cost(row: LoggedDecision) -> float | None:
    """What the call's PROTEUS pick was billed: LiteLLM's ``response_cost`` where its outcome has one;
    else 0 for a failed pick (an error answer is not billed) and the routing estimate for the rest
    (None where the decision logged none: unknown, as the trainer reads it).  A fallback group's
    answer is not PROTEUS's pick and is not in its log."""
    cost = (row.outcome or {}).get("response_cost")
    if isinstance(cost, (int, float)):
        return float(cost)
    if row.failed:
        return 0.0
    decision = row.decision
    return decision["candidates"][decision["chosen"]]["cost_usd"]


def target_tau(row: LoggedDecision) -> float:
    """The accuracy the request's state answers for: ``tau_served`` (the promise clamped into the
    artifact's range, recorded where clamping moved it), else ``tau``; records without either:
    tau_effective - delta."""
    decision = row.decision
    for field in ("tau_served", "tau"):
        if isinstance(decision.get(field), (int, float)):
            return float(decision[field])
    return float(decision["tau_effective"]) - float(decision.get("delta") or 0.0)


def state_compliance(state_key: str, rows: list[LoggedDecision]) -> StateCompliance:
    scores = [row.label for row in rows if row.label is not None]
    costs = [cost for cost in map(request_cost, rows) if cost is not None]
    n = len(rows)
    segments = [rows[i * n // DELTA_SEGMENTS : (i + 1) * n // DELTA_SEGMENTS] for i in range(DELTA_SEGMENTS)]
    return StateCompliance(
        state_key=state_key,
        tier=str(rows[-1].decision.get("tier") or ""),
        requests=n,
        failed=sum(r.failed for r in rows),
        tau=sum(target_tau(r) for r in rows) / n,
        predicted_accuracy=sum(chosen_p(r.decision) for r in rows) / n,
        labels=len(scores),
        realised_accuracy=sum(scores) / len(scores) if scores else None,
        realised_ci95=wilson_interval(sum(scores), len(scores)) if scores else None,
        cost_per_1k_usd=1000.0 * sum(costs) / len(costs) if costs else None,
        delta_over_time=[sum(float(r.decision.get("delta") or 0.0) for r in s) / len(s) for s in segments if s],
    )


@dataclass
class DeploymentFeedback:
    deployment_id: str
    model: str
    picks: int  # decisions that chose it, every attempt of a retried call included
    failed: int  # of those, the ones that did not answer
    labels: int
    predicted_accuracy: float | None  # mean p before correction over its labelled decisions
    realised_accuracy: float | None
    realised_ci95: tuple[float, float] | None
    residual: float | None  # realised - predicted
    p_correction: float  # the correction its latest decision carried


def deployment_feedback(rows: list[LoggedDecision], picks: list[LoggedDecision]) -> list[DeploymentFeedback]:
    """Per chosen deployment, most picks first: ``picks`` (``join_records(..., every_pick=True)``) count
    attempts and failures, the calls' ``rows`` the labels (a label scores a call's answer)."""
    attempts: dict[str, list[LoggedDecision]] = {}
    for pick in picks:
        attempts.setdefault(str(chosen_deployment_id(pick.decision)), []).append(pick)
    answered: dict[str, list[LoggedDecision]] = {}
    for row in rows:
        answered.setdefault(str(chosen_deployment_id(row.decision)), []).append(row)
    report = []
    for deployment, tried in attempts.items():
        calls = answered.get(deployment, [])
        chosen = [r.decision["candidates"][r.decision["chosen"]] for r in calls]
        labelled = [(c, r.label) for c, r in zip(chosen, calls) if r.label is not None]
        predicted = realised = None
        if labelled:
            predicted = sum(uncorrected_p(c) for c, _ in labelled) / len(labelled)
            realised = sum(score for _, score in labelled) / len(labelled)
        latest = tried[-1].decision["candidates"][tried[-1].decision["chosen"]]
        report.append(DeploymentFeedback(
            deployment_id=deployment,
            model=str(latest["model"]),
            picks=len(tried),
            failed=sum(p.failed for p in tried),
            labels=len(labelled),
            predicted_accuracy=predicted,
            realised_accuracy=realised,
            realised_ci95=wilson_interval(sum(score for _, score in labelled), len(labelled)) if labelled else None,
            residual=None if realised is None else realised - predicted,
            p_correction=float(latest.get("p_correction", 0.0)),
        ))
    return sorted(report, key=lambda d: (-d.picks, d.deployment_id))


def state_of(row: LoggedDecision) -> str:
    """The decision's compliance state (records written without one: its tier's)."""
    return str(row.decision.get("state_key") or f"tier:{row.decision['tier']}")


def by_state(rows: list[LoggedDecision]) -> dict[str, list[LoggedDecision]]:
    states: dict[str, list[LoggedDecision]] = {}
    for row in rows:
        states.setdefault(state_of(row), []).append(row)
    return dict(sorted(states.items()))


def format_report(report: list[StateCompliance]) -> str:
    lines = [f"{'state':<24} {'requests':>8} {'failed':>6} {'tau':>6} {'predicted':>9} {'labels':>6} {'realised [95% CI]':>24} {'cost/1K $':>10}  delta over time"]
    for t in report:
        realised = (
            f"{t.realised_accuracy:.3f} [{t.realised_ci95[0]:.3f}, {t.realised_ci95[1]:.3f}]"
            if t.realised_accuracy is not None and t.realised_ci95 is not None
            else "-"
        )
        deltas = " ".join(f"{d:+.3f}" for d in t.delta_over_time)
        cost = "-" if t.cost_per_1k_usd is None else f"{t.cost_per_1k_usd:.4f}"
        lines.append(
            f"{t.state_key:<24} {t.requests:>8} {t.failed:>6} {t.tau:>6.3f} {t.predicted_accuracy:>9.3f} {t.labels:>6} {realised:>24} "
            f"{cost:>10}  {deltas}"
        )
    return "\n".join(lines)


def format_deployments(report: list[DeploymentFeedback]) -> str:
    # whole ids and names, however long (a cut one can name two deployments alike)
    wide_id = max([len("deployment"), *(len(d.deployment_id) for d in report)])
    wide_model = max([len("model"), *(len(d.model) for d in report)])
    lines = [f"{'deployment':<{wide_id}} {'model':<{wide_model}} {'picks':>8} {'failed':>6} {'labels':>6} {'predicted':>9} "
             f"{'realised [95% CI]':>24} {'residual':>8} {'correction':>10}"]
    for d in report:
        labelled = d.labels > 0
        realised = f"{d.realised_accuracy:.3f} [{d.realised_ci95[0]:.3f}, {d.realised_ci95[1]:.3f}]" if labelled else "-"
        lines.append(
            f"{d.deployment_id:<{wide_id}} {d.model:<{wide_model}} {d.picks:>8} {d.failed:>6} {d.labels:>6} "
            f"{f'{d.predicted_accuracy:.3f}' if labelled else '-':>9} {realised:>24} "
            f"{f'{d.residual:+.3f}' if labelled else '-':>8} {d.p_correction:>+10.3f}"
        )
    return "\n".join(lines)


def trailing_mean(values: list[float | None], window: int) -> list[float]:
    """Mean of the non-missing values among the last ``window`` (NaN where there are none)."""
    out = []
    for i in range(len(values)):
        seen = [v for v in values[max(0, i + 1 - window) : i + 1] if v is not None]
        out.append(sum(seen) / len(seen) if seen else math.nan)
    return out


def plot(states: dict[str, list[LoggedDecision]], window: int, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(states), 1, figsize=(9, 3 * len(states)), squeeze=False)
    for ax, (state_key, rows) in zip(axes[:, 0], states.items()):
        x = range(1, len(rows) + 1)
        ax.plot(x, [target_tau(r) for r in rows], label="τ", color="black", linestyle="--")
        ax.plot(x, trailing_mean([chosen_p(r.decision) for r in rows], window), label="predicted")
        ax.plot(x, trailing_mean([r.label for r in rows], window), label="realised (labels)")
        ax.set_title(state_key)
        ax.set_xlabel("request (time order)")
        ax.set_ylabel(f"accuracy, trailing {window}")
        ax.legend(loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    path = path if path.suffix else path.with_suffix(".png")  # what matplotlib writes for a name without one
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log", metavar="DIR", required=True, help="decision log directory")
    parser.add_argument("--png", default="compliance.png", help="figure path (default: compliance.png)")
    parser.add_argument("--window", type=int, default=500, help="trailing window of the figure, in requests")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the report as JSON")


def figure_formats() -> list[str]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return sorted(FigureCanvasAgg.get_supported_filetypes())


def number(record: dict, field: str, allowed: str, low: float = -math.inf, high: float = math.inf,
           name: str | None = None) -> float:
    """A record's numeric field by the trainer's rule (``train/data/decision_log.py: _number``): a
    number or numeric text, never a bool; here also finite and in [low, high].  ``name``: the field
    as the error names it (default ``field``)."""
    value = record.get(field)
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        parsed = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON integer past float's range
        parsed = math.nan
    if not (math.isfinite(parsed) and low <= parsed <= high):
        raise ValueError(f"field {name or field!r} must be {allowed}; got {short_repr(value) if field in record else 'nothing'}")
    return parsed


def checked_decision(record: dict) -> dict:
    """The decision fields this report reads, converted (numbers from text as the trainer takes them)."""
    candidates = record.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        raise ValueError(f"field 'candidates' must be a non-empty list of {{deployment_id, model, cost_usd, p}}; got "
                         f"{short_repr(candidates) if 'candidates' in record else 'nothing'}")
    chosen = record.get("chosen")
    integral = isinstance(chosen, int) or (isinstance(chosen, float) and chosen.is_integer())
    if isinstance(chosen, bool) or not integral or not 0 <= int(chosen) < len(candidates):
        raise ValueError(f"field 'chosen' must be an index into candidates (0..{len(candidates) - 1}); got {short_repr(chosen)}")
    checked = []
    for j, cand in enumerate(candidates):
        field = f"candidates[{j}]"
        if not isinstance(cand, dict):
            raise ValueError(f"field {field!r} must be an object {{deployment_id, model, cost_usd, p}}; got {short_repr(cand)}")
        if cand.get("model") is None:
            raise ValueError(f"field '{field}.model' is missing")
        cost = None if cand.get("cost_usd") is None else number(
            cand, "cost_usd", "a number >= 0 (USD per call) or null for unknown", low=0.0, name=f"{field}.cost_usd")
        checked.append({**cand, "cost_usd": cost,
                        "p": number(cand, "p", "a number in [0, 1] (the calibrated p)", 0.0, 1.0, name=f"{field}.p"),
                        "p_correction": number({"p_correction": 0.0, **cand}, "p_correction", "a finite number",
                                               name=f"{field}.p_correction")})
    out = {**record, "candidates": checked, "chosen": int(chosen)}
    if not (record.get("state_key") or record.get("tier")):  # the row the request is reported in
        raise ValueError("fields 'state_key' and 'tier' are both missing or empty; a decision needs one of them")
    if record.get("delta") is not None:
        out["delta"] = number(record, "delta", "a finite number (the controller's offset) or null")
    if not any(isinstance(record.get(f), (int, float)) and not isinstance(record.get(f), bool) for f in ("tau_served", "tau")):
        out["tau_effective"] = number(record, "tau_effective", "a number in [0, 1] where 'tau' is missing", 0.0, 1.0)
    return out


def checked_record(record: dict) -> dict:
    if record["type"] == "decision":
        return checked_decision(record)
    if record["type"] == "feedback":
        return {**record, "score": number(record, "score", "a number in [0, 1]", 0.0, 1.0)}
    if record.get("response_cost") is not None:
        return {**record, "response_cost": number(record, "response_cost", "a number >= 0 (USD) or null for unknown", low=0.0)}
    return record


def record_line(directory: str, index: int) -> str:
    """``file:line`` of the ``index``-th record ``iter_records`` yields: the lines it reads (a file's last
    line without its newline that does not parse, cut off by a writer, is none)."""
    for path in log_files(directory):
        with open(path, "rb") as handle:
            for lineno, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                if not raw.endswith(b"\n"):
                    try:
                        json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
                    except ValueError:
                        break
                if index == 0:
                    return f"{path}:{lineno}"
                index -= 1
    return str(directory)


def read_records(directory: str) -> list[dict]:
    """The log's records, each field the report reads checked as the trainer checks it; a bad one is an
    error naming its file:line, call and field."""
    records = []
    for index, record in enumerate(iter_records(directory)):
        try:
            records.append(checked_record(record))
        except ValueError as exc:
            raise ValueError(f"{record_line(directory, index)}: call_id {record['call_id']!r}: {exc}") from None
    return records


def writable_file(flag: str, path: str) -> None:
    """Refuse, before any work, an output path that is a folder or whose folder does not exist."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{flag} {path}: is a folder; name a file")
    if not target.parent.is_dir():
        raise ValueError(f"{flag} {path}: its folder {str(target.parent)!r} does not exist")


def run(args: argparse.Namespace) -> int:
    if args.window < 1:
        raise ValueError(f"--window must be >= 1; got {args.window}")
    for flag, path in (("--png", args.png), ("--json", args.json)):
        if path:
            writable_file(flag, path)
    suffix = Path(args.png).suffix[1:].lower()
    if suffix and suffix not in figure_formats():  # no suffix: plot() writes a .png
        raise ValueError(f"--png {args.png}: matplotlib writes no {suffix!r} figures; end the name in one of "
                         f"{', '.join(figure_formats())}")
    records = read_records(args.log)
    rows = join_records(records)
    if not rows:
        raise ValueError(f"{args.log}: no decision records (is it a decision_log.dir?)")
    states = by_state(rows)
    report = [state_compliance(state_key, state_rows) for state_key, state_rows in states.items()]
    deployments = deployment_feedback(rows, join_records(records, every_pick=True))
    print(format_report(report))
    print()
    print(format_deployments(deployments))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"states": [asdict(t) for t in report], "deployments": [asdict(d) for d in deployments]}, indent=2
        ))
    print(f"figure: {plot(states, args.window, Path(args.png))}")
    return 0
