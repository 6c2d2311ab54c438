"""``proteus eval --artifact NEW --baseline-artifact OLD --log DIR``: promote NEW or not, judged
off-policy on a decision log (``train/off_policy.py``).

Each labelled request of the log is routed by both artifacts at the tau it was served at (its
``tau_effective``), exactly as the proxy would (``routing.route_log``: calibration, prompt-hash
mixing), among the slots that were its candidates.  Per tier (the log's ``tier``): each artifact's
doubly robust accuracy with its 95 % CI (normal approximation, clipped to [0, 1]), SNIPS, the rows
backing it, and the mean cost of its choices (known exactly: every candidate's cost is logged).  The
rows: the labelled decisions and the shadow rows of the tier; decisions without feedback are not used.

Verdict: **promote** when, on every tier, NEW's estimate is supported (at least ``MIN_MATCHED``
labelled rows, and half the rows, agree with the logged choice, at most ``MAX_UNSUPPORTED_SHARE`` of rows go to a slot
the log never labelled), its accuracy is at least min(tier tau, OLD's accuracy) -- it keeps the
floor, or loses nothing where OLD did not keep it either -- and its total cost is no higher than
OLD's, unless it keeps a floor OLD misses (accuracy above a floor OLD already keeps is worth nothing
to the SLA); otherwise **don't promote**, with the tier and reason.  ``proteus eval --log`` exits
``EXIT_PROMOTE`` (0) or ``EXIT_DO_NOT_PROMOTE`` (3), so CI can gate on the verdict.  Evaluate on a log the new artifact did not train on: the command warns when the
log's period overlaps the one recorded in NEW's manifest.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from litellm_proteus.artifact import load_artifact
from litellm_proteus.predictor import mixing_draw

from ..data import load_logs
from ..off_policy import BanditRows
from ..off_policy_calibration import MAX_UNSUPPORTED_SHARE, MIN_MATCHED, MIN_MATCHED_SHARE
from ..routing import route_log
from .inputs import artifact_encoder

EXIT_PROMOTE = 0
EXIT_DO_NOT_PROMOTE = 3  # not 1 (a crash) or 2 (bad input): the check ran and said no


def artifact_estimates(artifact: str, log_dir: str, cache_dir: str | None, device: str) -> tuple[dict, dict]:
    """Per tier: the artifact's off-policy estimate and cost on the log; and the artifact's manifest data record."""
    model, manifest = load_artifact(artifact)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unlabelled requests dropped: counted in the provenance
        data = load_logs(log_dir, format="decision-log").with_models(manifest.models)
    emb = artifact_encoder(manifest.encoder, Path(artifact), cache_dir, device, precision="fp32").encode(data.prompts, progress=False)
    tau = np.where(np.isfinite(data.logged_tau), data.logged_tau, manifest.tau_range[0])
    # a slot that was not a candidate of a request (no logged cost) is never routed to there
    routed = route_log(model, manifest, emb, data.costs, tau, draws=np.array([mixing_draw(p) for p in data.prompts]),
                       candidates=np.isfinite(data.costs))
    choice = routed.choice
    rows = BanditRows(data.scores, data.logged_choice, data.propensity)
    tiers = np.asarray(data.task if data.task is not None else [""] * len(data), dtype=object)
    out = {}
    for tier in sorted(set(tiers.tolist())):
        sel = tiers == tier
        part = BanditRows(data.scores[sel], data.logged_choice[sel], data.propensity[sel])
        part.labelled_slots = rows.labelled_slots  # support is a property of the whole log
        est = part.estimate(choice[sel], routed.p[sel].astype(np.float64))
        out[tier] = {**est.to_dict(), "tau": round(float(np.median(tau[sel])), 4),
                     "cost_usd": round(float(data.costs[np.flatnonzero(sel), choice[sel]].mean()), 8)}
    return out, manifest.data.model_dump()


def verdict(new: dict, old: dict) -> tuple[bool, list[str]]:
    reasons: list[str] = []
    better = False
    for tier, n in new.items():
        o = old[tier]
        need = max(MIN_MATCHED, MIN_MATCHED_SHARE * n["n_rows"])  # the same rule as off_policy_calibration.supported
        if n["n_matched"] < need or n["unsupported_share"] > MAX_UNSUPPORTED_SHARE:
            reasons.append(f"tier {tier!r}: the log cannot estimate the new artifact ({n['n_matched']} of {n['n_rows']} labelled "
                           f"rows agree with the logged choice, need {need:g}; {n['unsupported_share']:.1%} of rows go to "
                           f"models the log never labelled, at most {MAX_UNSUPPORTED_SHARE:.0%}): collect more feedback or explore")
            continue
        floor = min(n["tau"], o["dr"] if o["dr"] is not None else n["tau"])
        if n["dr"] < floor:
            reasons.append(f"tier {tier!r}: estimated accuracy {n['dr']:.4f} (95% CI {n['ci95'][0]:.4f}-{n['ci95'][1]:.4f}) "
                           f"< {floor:.4f} (tau {n['tau']:g}, old {o['dr']:.4f})")
        better |= n["dr"] >= n["tau"] > o["dr"]  # keeps a floor the baseline misses
    new_cost = sum(n["cost_usd"] * n["n_rows"] for n in new.values())
    old_cost = sum(o["cost_usd"] * o["n_rows"] for o in old.values())
    if not reasons and new_cost > old_cost * (1 + 1e-9) and not better:
        reasons.append(f"costs {new_cost / old_cost - 1:+.1%} more than the baseline and keeps no floor the baseline misses")
    if not reasons:
        reasons.append(f"every tier keeps its floor (or the baseline's accuracy); cost {new_cost / old_cost - 1:+.1%} vs the baseline")
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
    new, new_record = artifact_estimates(new_artifact, log_dir, cache_dir, device)
    old, _ = artifact_estimates(old_artifact, log_dir, cache_dir, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log_record = load_logs(log_dir, format="decision-log").provenance
    promote, reasons = verdict(new, old)
    overlap = overlap_warning(new_record, log_record)
    return {"artifact": new_artifact, "baseline_artifact": old_artifact, "log": log_dir, "log_provenance": log_record,
            "tiers": {tier: {"new": new[tier], "baseline": old[tier]} for tier in new},
            "promote": promote, "reasons": reasons, **({"warning": overlap} if overlap else {})}


def render(report: dict) -> str:
    lines = [f"# Promotion check: {report['artifact']} vs {report['baseline_artifact']}", "",
             rows_used(report), "",
             "| tier | tau | new acc (DR, 95% CI) | baseline acc | new $/call | baseline $/call | rows agreeing (new) |",
             "|---|---|---|---|---|---|---|"]
    for tier, pair in report["tiers"].items():
        n, o = pair["new"], pair["baseline"]
        lines.append(f"| {tier} | {n['tau']:g} | {n['dr']:.4f} ({n['ci95'][0]:.4f}-{n['ci95'][1]:.4f}) | {o['dr']:.4f} "
                     f"({o['ci95'][0]:.4f}-{o['ci95'][1]:.4f}) | {n['cost_usd']:.6f} | {o['cost_usd']:.6f} | {n['n_matched']} |")
    lines += ["", f"**Verdict: {'promote' if report['promote'] else 'do not promote'}**", ""]
    lines += [f"- {r}" for r in report["reasons"]]
    if "warning" in report:
        lines += ["", f"Warning: {report['warning']}"]
    return "\n".join(lines) + "\n"


def rows_used(report: dict) -> str:
    """Which rows of the log the estimates rest on, in words."""
    prov = report["log_provenance"]
    decisions, labelled, shadow = prov["n_decisions"], prov["n_labelled"], prov.get("n_shadow_rows", 0)
    used = sum(pair["new"]["n_rows"] for pair in report["tiers"].values())
    sources = f"the {labelled} decisions with feedback" + (f" and the {shadow} shadow rows" if shadow else "")
    return (f"Decision log {report['log']}: {decisions} decisions, {labelled} of them with feedback"
            + (f", and {shadow} shadow rows" if shadow else ", no shadow rows") + ". "
            f"The estimates use {sources} ({used} rows), each in the tier it was served at; "
            f"the {decisions - labelled} decisions without feedback are not used.")


def exit_code(report: dict) -> int:
    return EXIT_PROMOTE if report["promote"] else EXIT_DO_NOT_PROMOTE


def write(report: dict, out: str) -> None:
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "promotion.json").write_text(json.dumps(report, indent=2))
    (Path(out) / "promotion.md").write_text(render(report))
