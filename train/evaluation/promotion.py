"""``proteus eval --artifact NEW --baseline-artifact OLD --log DIR``: promote NEW or not, judged
off-policy on a decision log (``train/off_policy.py``).

Per compliance state of the log (the decisions' ``state_key``, as ``proteus compliance`` groups them:
``tier:<name>@<tau>`` for a tier's own tau, ``tau:<bucket>`` for requests that sent their own; records
without one: ``tier:<tier>``).  Every state with decisions in the log is reported.  Its floor is the tau
it promises: the mean of its decisions' ``tau`` (a tier's tau; for a tau bucket the mean of its
requests' own taus, what its DR mean over those requests must reach), never ``tau_effective``, which
the compliance controller shifts by delta.

Each labelled request and each shadow row (in its decision's state) is routed by both artifacts at the
tau it was served at (its ``tau_effective``), exactly as the proxy would (``routing.route_log``:
calibration, prompt-hash mixing), among the slots that were its candidates.  Per state: each
artifact's doubly robust accuracy with its 95 % CI (normal approximation, clipped to [0, 1]), SNIPS
and the rows backing it; decisions without feedback are not used there.  Cost: the mean cost of the
artifact's choices over *all* the state's logged requests, labelled or not (known exactly: every
candidate's cost is logged).

Verdict: **promote** when, on every state, NEW's estimate is supported (the state has labelled or
shadow rows, at least ``MIN_MATCHED`` of them, and half the rows, agree with the logged choice, at
most ``MAX_UNSUPPORTED_SHARE`` of rows go to a slot the log never labelled), its accuracy -- the DR
estimate, no higher than what the log observed of its choices without the head (``judged_accuracy``) --
is at least min(state tau, OLD's accuracy) -- it keeps the floor, or loses nothing where OLD did not keep it
either -- and its total cost over the log's requests is no higher than OLD's, unless it keeps a floor
OLD misses (accuracy above a floor OLD already keeps is worth nothing to the SLA); otherwise **don't
promote**, with the state and reason.  ``proteus eval --log`` exits ``EXIT_PROMOTE`` (0) or
``EXIT_DO_NOT_PROMOTE`` (3), so CI can gate on the verdict.  Evaluate on a log the new artifact did
not train on: the command warns when the log's period overlaps the one recorded in NEW's manifest.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from litellm_proteus.artifact import load_artifact
from litellm_proteus.decision_log import LoggedDecision, call_requests
from litellm_proteus.predictor import mixing_draw

from ..compliance_report import state_of, target_tau
from ..data import decision_log, load_logs
from ..data.common import Table, read_table, resolve_files
from ..data.logs import RoutingLog
from ..off_policy import BanditRows
from ..off_policy_calibration import MAX_UNSUPPORTED_SHARE, MIN_MATCHED, MIN_MATCHED_SHARE
from ..routing import route_log
from .inputs import artifact_encoder

EXIT_PROMOTE = 0
EXIT_DO_NOT_PROMOTE = 3  # not 1 (a crash) or 2 (bad input): the check ran and said no


def _decision_tables(log_dir: str) -> list[Table]:
    tables = []
    for path, from_dir in resolve_files([log_dir]):
        frame = read_table(path)
        if decision_log.detect(frame) and not decision_log.is_shadow(frame):
            tables.append(Table(path, frame, from_dir))
    return tables


def every_request(tables: list[Table], log_dir: str) -> RoutingLog:
    """Every decision of the log, labelled or not, one bandit row each (what the tiers served)."""
    if not tables:
        raise ValueError(f"--log {log_dir}: no decision records; the promotion check needs the decision log "
                         "(decisions-*.jsonl), not only shadow rows")
    return decision_log.bandit_log(tables)


def call_states(tables: list[Table]) -> dict[str, tuple[str, float]]:
    """sample_id (and ``shadow:<call_id>`` for its latest request) -> (compliance state, promised tau) of the
    request's latest decision, read from the same files and grouped into requests as the bandit rows
    are (``call_requests``), as ``proteus compliance`` groups them: ``state_key`` (records without one:
    ``tier:<tier>``) and ``tau`` (the tier's, or the request's own; records without it:
    ``tau_effective - delta``), never the controller's offset."""
    records = ({k: v for k, v in record.items() if not (isinstance(v, float) and math.isnan(v))}  # absent fields
               for table in tables for record in table.frame.to_dict("records"))
    states = {}
    for request in call_requests(records).requests:
        if request.owned:
            row = LoggedDecision(dict(request.decision))
            # a shadow row (sample_id shadow:<call_id>) shadows its call's latest request
            states[request.sample_id] = states[f"shadow:{request.call_id}"] = (state_of(row), target_tau(row))
    return states


def _row_states(data: RoutingLog, calls: dict[str, tuple[str, float]]) -> np.ndarray:
    """Each estimation row's state: a decision's own; a shadow row its decision's (``shadow:<call_id>``),
    else (its decision is not in the log) its tier at its logged tau."""
    ids = data.sample_ids or [""] * len(data)
    tiers = data.task or [""] * len(data)
    out = []
    for i, sid in enumerate(ids):
        out.append(calls[sid][0] if sid in calls else f"tier:{tiers[i]}@{data.logged_tau[i]:.4g}")
    return np.asarray(out, dtype=object)


def promised_taus(calls: dict[str, tuple[str, float]]) -> dict[str, list[float]]:
    """Per state, the tau each of its requests promised, once per request (``call_states`` also keys
    a call's latest request by ``shadow:<call_id>``)."""
    promised: dict[str, list[float]] = {}
    for sample_id, (state, tau) in calls.items():
        if not sample_id.startswith("shadow:"):
            promised.setdefault(state, []).append(tau)
    return promised


@dataclass
class PromotionLog:
    """The decision log as the promotion check reads it, once for both artifacts."""

    labelled: RoutingLog  # the decisions with feedback and the shadow rows (``load_logs``): the estimates
    requests: RoutingLog  # every decision, one bandit row each: the costs
    calls: dict[str, tuple[str, float]]  # ``call_states``


def read_log(log_dir: str) -> PromotionLog:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unlabelled requests dropped: counted in the provenance
        labelled = load_logs(log_dir, format="decision-log")
        tables = _decision_tables(log_dir)
        requests = every_request(tables, log_dir)
    return PromotionLog(labelled, requests, call_states(tables))


def artifact_estimates(artifact: str, log: PromotionLog, cache_dir: str | None, device: str) -> tuple[dict, dict]:
    """Per compliance state of the log: the artifact's off-policy estimate on its labelled and shadow
    rows, the tau it promises, and the mean cost of the artifact's choices over all its requests; and
    the artifact's manifest data record."""
    model, manifest = load_artifact(artifact)
    data, requests, calls = log.labelled.with_models(manifest.models), log.requests.with_models(manifest.models), log.calls
    encoder = artifact_encoder(manifest.encoder, Path(artifact), cache_dir, device, precision="fp32")
    prompts = list(dict.fromkeys([*data.prompts, *requests.prompts]))
    embedding = dict(zip(prompts, encoder.encode(prompts, progress=False)))

    def route(log: RoutingLog):
        emb = np.stack([embedding[p] for p in log.prompts])
        tau = np.where(np.isfinite(log.logged_tau), log.logged_tau, manifest.tau_range[0])
        # routed at the tau the proxy routed it at; a slot that was not a candidate (no logged cost) is never chosen
        return route_log(model, manifest, emb, log.costs, tau, draws=np.array([mixing_draw(p) for p in log.prompts]),
                         candidates=np.isfinite(log.costs))

    routed, served = route(data), route(requests)
    rows = BanditRows(data.scores, data.logged_choice, data.propensity)
    row_state = _row_states(data, calls)
    request_state = np.asarray([calls[c][0] for c in requests.sample_ids], dtype=object)
    promised = promised_taus(calls)
    out = {}
    for state in sorted(set(request_state.tolist()) | set(row_state.tolist())):
        sel, req = row_state == state, request_state == state
        if sel.any():
            part = BanditRows(data.scores[sel], data.logged_choice[sel], data.propensity[sel],
                              groups=np.asarray(data.prompts, dtype=object)[sel],
                              inclusion=None if data.inclusion is None else data.inclusion[sel])  # a prompt asked again: one sample
            part.labelled_slots = rows.labelled_slots  # support is a property of the whole log
            est = {**part.estimate(routed.choice[sel], routed.p[sel].astype(np.float64)).to_dict(),
                   "observed": round(observed_accuracy(part, routed.choice[sel]), 5)}
        else:  # requests, none labelled or shadowed: nothing to estimate it on
            est = {"dr": None, "ci95": None, "snips": None, "n_rows": 0, "n_matched": 0, "unsupported_share": 0.0,
                   "observed": None}
        taus = promised.get(state) or data.logged_tau[sel].tolist()
        if req.any():  # every candidate's cost is logged: the cost of any choice over all the requests is known
            cost = requests.costs[np.flatnonzero(req), served.choice[req]]
        else:  # only shadow rows of decisions not in the log
            cost = data.costs[np.flatnonzero(sel), routed.choice[sel]]
        out[state] = {**est, "tau": round(float(np.mean(taus)), 4), "n_requests": int(len(cost)),
                      "cost_usd": round(float(np.mean(cost)), 8)}
    return out, manifest.data.model_dump()


def observed_accuracy(rows: BanditRows, choice: np.ndarray) -> float:
    """The artifact's accuracy on what the log observed, without its head: the head-free mean (a
    choice the log never observed counted as failed), or the shadow rows' mean score of the choice
    (``BanditRows.full_information_terms``, unbiased for the policy) where that is higher
    (``off_policy_calibration.point_bound``'s two bounds, as point estimates)."""
    full, terms = rows.full_information_terms(choice)
    shadow = float(terms.mean()) if len(full) else -math.inf
    return max(float(rows.head_free_terms(choice).mean()), shadow)


def judged_accuracy(side: dict) -> float:
    """The accuracy the verdict judges: the DR estimate, no higher than ``observed_accuracy``.  DR
    leans on the artifact's own head wherever it chooses what the log never observed, and a head
    flatters exactly the choices its policy prefers."""
    return min(side["dr"], side.get("observed", side["dr"]))


def verdict(new: dict, old: dict) -> tuple[bool, list[str]]:
    """Per compliance state (``state_key``: ``tier:<name>@<tau>`` or ``tau:<bucket>``) of the log."""
    reasons: list[str] = []
    better = False
    for state, n in new.items():
        o = old[state]
        if n["n_rows"] == 0:
            reasons.append(f"state {state!r}: cannot be estimated: none of its {n['n_requests']} requests has "
                           "feedback or a shadow row: collect feedback or turn on shadow evaluation")
            continue
        need = max(MIN_MATCHED, MIN_MATCHED_SHARE * n["n_rows"])  # the same rule as off_policy_calibration.supported
        if n["n_matched"] < need or n["unsupported_share"] > MAX_UNSUPPORTED_SHARE:
            reasons.append(f"state {state!r}: the log cannot estimate the new artifact ({n['n_matched']} of {n['n_rows']} labelled "
                           f"rows agree with the logged choice, need {need:g}; {n['unsupported_share']:.1%} of rows go to "
                           f"models the log never labelled, at most {MAX_UNSUPPORTED_SHARE:.0%}): collect more feedback or explore")
            continue
        old_acc = judged_accuracy(o) if o["dr"] is not None else n["tau"]
        floor, acc = min(n["tau"], old_acc), judged_accuracy(n)
        if acc < floor:
            unseen = n["n_rows"] - n["n_matched"]
            capped = (f"; {acc:.4f} on what the log observed of its choices (the rest counted as failed: {unseen} of "
                      f"{n['n_rows']} rows choose what the log did not observe, which shadow evaluation would)"
                      if acc < n["dr"] else "")
            reasons.append(f"state {state!r}: estimated accuracy {n['dr']:.4f} (95% CI {n['ci95'][0]:.4f}-{n['ci95'][1]:.4f})"
                           f"{capped} < {floor:.4f} (tau {n['tau']:g}, old {old_acc:.4f})")
        better |= acc >= n["tau"] > old_acc  # keeps a floor the baseline misses
    # total cost over the log's requests: every candidate's cost is logged, so any choice's is known
    new_cost = sum(n["cost_usd"] * n["n_requests"] for n in new.values())
    old_cost = sum(o["cost_usd"] * o["n_requests"] for o in old.values())
    change = f"{new_cost / old_cost - 1:+.1%}" if old_cost > 0 else f"${new_cost:.6f} vs $0"
    if not reasons and new_cost > old_cost * (1 + 1e-9) and not better:
        reasons.append(f"costs {change} more than the baseline and keeps no floor the baseline misses")
    if not reasons:
        reasons.append(f"every state keeps its floor (or the baseline's accuracy); cost {change} vs the baseline")
        return True, reasons
    return False, reasons


def overlap_warning(record: dict, log_record: dict) -> str | None:
    trained = record.get("provenance") or {}
    if not trained or not log_record:
        return None
    if trained.get("first_decision_utc", "") <= log_record["last_decision_utc"] and \
            log_record["first_decision_utc"] <= trained.get("last_decision_utc", ""):
        return (f"the log ({log_record['first_decision_utc']} .. {log_record['last_decision_utc']}) overlaps the period the "
                f"new artifact trained on ({trained['first_decision_utc']} .. {trained['last_decision_utc']}): its "
                "estimates are optimistic; evaluate on later traffic")
    return None


def promotion_report(new_artifact: str, old_artifact: str, log_dir: str, cache_dir: str | None, device: str) -> dict:
    log = read_log(log_dir)
    new, new_record = artifact_estimates(new_artifact, log, cache_dir, device)
    old, _ = artifact_estimates(old_artifact, log, cache_dir, device)
    log_record = log.labelled.provenance
    promote, reasons = verdict(new, old)
    overlap = overlap_warning(new_record, log_record)
    return {"artifact": new_artifact, "baseline_artifact": old_artifact, "log": log_dir, "log_provenance": log_record,
            "states": {state: {"new": new[state], "baseline": old[state]} for state in new},
            "promote": promote, "reasons": reasons, **({"warning": overlap} if overlap else {})}


def _acc(side: dict) -> str:
    if side["dr"] is None:
        return "cannot be estimated"
    return f"{side['dr']:.4f} ({side['ci95'][0]:.4f}-{side['ci95'][1]:.4f})"


def render(report: dict) -> str:
    lines = [f"# Promotion check: {report['artifact']} vs {report['baseline_artifact']}", "",
             rows_used(report), "",
             "| state | tau | requests | new acc (DR, 95% CI) | new acc observed | baseline acc | new $/call | baseline $/call "
             "| rows | rows agreeing (new) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for state, pair in report["states"].items():
        n, o = pair["new"], pair["baseline"]
        observed = "" if n.get("observed") is None else f"{n['observed']:.4f}"
        lines.append(f"| {state} | {n['tau']:g} | {n['n_requests']} | {_acc(n)} | {observed} | {_acc(o)} | "
                     f"{n['cost_usd']:.6f} | {o['cost_usd']:.6f} | {n['n_rows']} | {n['n_matched']} |")
    lines += ["", f"**Verdict: {'promote' if report['promote'] else 'do not promote'}**", ""]
    lines += [f"- {r}" for r in report["reasons"]]
    if "warning" in report:
        lines += ["", f"Warning: {report['warning']}"]
    return "\n".join(lines) + "\n"


def rows_used(report: dict) -> str:
    """Which rows of the log the estimates rest on, in words."""
    prov = report["log_provenance"]
    decisions, labelled, shadow = prov["n_decisions"], prov["n_labelled"], prov.get("n_shadow_rows", 0)
    used = sum(pair["new"]["n_rows"] for pair in report["states"].values())
    sources = f"the {labelled} decisions with feedback" + (f" and the {shadow} shadow rows" if shadow else "")
    return (f"Decision log {report['log']}: {decisions} decisions, {labelled} of them with feedback"
            + (f", and {shadow} shadow rows" if shadow else ", no shadow rows") + ". "
            f"The accuracy estimates use {sources} ({used} rows), each in the compliance state it was served in; "
            f"the {decisions - labelled} decisions without feedback are not used there. Observed: the accuracy of "
            "the new artifact's choices where the log observed them (a choice it never observed counted as failed; "
            "the shadow rows' mean, each score weighed by the probability its row scored it, where higher), which caps the DR estimate in the verdict. $/call: the mean cost of "
            "each artifact's choices over all the state's logged requests.")


def exit_code(report: dict) -> int:
    return EXIT_PROMOTE if report["promote"] else EXIT_DO_NOT_PROMOTE


def write(report: dict, out: str) -> None:
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "promotion.json").write_text(json.dumps(report, indent=2))
    (Path(out) / "promotion.md").write_text(render(report))
