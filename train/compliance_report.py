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
from litellm_proteus.decision_log import LoggedDecision, chosen_deployment_id, chosen_p, iter_records, join_records, uncorrected_p

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
    cost_per_1k_usd: float
    delta_over_time: list[float]  # mean delta per quarter of the state's requests, in time order


def request_cost(row: LoggedDecision) -> float:
    """What the call's PROTEUS pick was billed: LiteLLM's ``response_cost`` where its outcome has one;
    else 0 for a failed pick (an error answer is not billed) and the routing estimate for the rest.
    A fallback group's answer is not PROTEUS's pick and is not in its log."""
    cost = (row.outcome or {}).get("response_cost")
    if isinstance(cost, (int, float)):
        return float(cost)
    if row.failed:
        return 0.0
    decision = row.decision
    return float(decision["candidates"][decision["chosen"]]["cost_usd"])


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
    n = len(rows)
    segments = [rows[i * n // DELTA_SEGMENTS : (i + 1) * n // DELTA_SEGMENTS] for i in range(DELTA_SEGMENTS)]
    return StateCompliance(
        state_key=state_key,
        tier=str(rows[-1].decision["tier"]),
        requests=n,
        failed=sum(r.failed for r in rows),
        tau=sum(target_tau(r) for r in rows) / n,
        predicted_accuracy=sum(chosen_p(r.decision) for r in rows) / n,
        labels=len(scores),
        realised_accuracy=sum(scores) / len(scores) if scores else None,
        realised_ci95=wilson_interval(sum(scores), len(scores)) if scores else None,
        cost_per_1k_usd=1000.0 * sum(request_cost(r) for r in rows) / n,
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
        lines.append(
            f"{t.state_key:<24} {t.requests:>8} {t.failed:>6} {t.tau:>6.3f} {t.predicted_accuracy:>9.3f} {t.labels:>6} {realised:>24} "
            f"{t.cost_per_1k_usd:>10.4f}  {deltas}"
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
    records = list(iter_records(args.log))
    rows = join_records(records)
    if not rows:
        raise ValueError(f"{args.log}: no decision records (is it a decision_log.dir?)")
    states = by_state(rows)
    report = [state_compliance(state_key, state_rows) for state_key, state_rows in states.items()]
    deployments = deployment_feedback(rows, join_records(records, every_pick=True))
    print(format_report(report))
    print()
    print(format_deployments(deployments))
    print(f"figure: {plot(states, args.window, Path(args.png))}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"states": [asdict(t) for t in report], "deployments": [asdict(d) for d in deployments]}, indent=2
        ))
    return 0
