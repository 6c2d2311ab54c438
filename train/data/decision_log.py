"""Decision logs written by the proxy (``litellm_proteus.decision_log``, schema 1 or 2) as a ``RoutingLog``.

Every JSONL line is one record with ``"schema": 1`` or ``2`` and a ``"type"``: ``decision`` (the
candidates, the chosen one and its propensity), ``outcome`` (the result of one attempt; schema 2 names
its ``deployment_id``) and ``feedback`` (a score in [0, 1] for a call).  Records are joined by
``call_id``: a call's latest decision, the latest outcome of that decision's pick (by the deployment
it names: ``litellm_proteus.decision_log.outcome_of``) and the call's *latest* feedback (by ``ts``),
its label.  Bandit feedback: per request only the chosen slot's score is known.

Per row of the resulting log:

* ``scores``: NaN everywhere except the chosen slot, which holds the feedback score (NaN when the
  request has no feedback, or when its pick's outcome is a failure: the score is then another
  deployment's answer's, a fallback group's; such rows are dropped by ``clean_log``, counted in
  ``provenance``);
* ``costs``: each candidate's logged ``cost_usd`` (the chosen one's ``response_cost`` when the outcome
  has it), NaN for slots that were not candidates;
* ``propensity``: the probability with which the logging policy chose that slot (1.0 without
  exploration); ``logged_choice``: the chosen slot index; ``logged_tau``: its ``tau_effective``;
* ``split``: by prompt -- a prompt whose hash falls in the top ``VALIDATION_SHARE`` is val, every other
  prompt train (``load_logs(validation_share=...)``, ``proteus train --validation-share``), so
  a prompt repeated in the traffic never sits on both sides (measured on a simulated log that
  repeats RouterBench prompts: a time split let the validation rows leak and the calibrated
  artifact missed every floor on the test split); no test part (``proteus eval --log`` judges an
  artifact on a log it never trained on).

Slots: the ``slot`` index and ``model`` name of each candidate.  A model is known by its name across
records (an artifact promotion may re-order the slots); within one decision a slot index names one
model.  The log's model list is every model seen, by the slot it first holds (``--init`` re-orders
them to the initial artifact's slots).

Shadow rows (``litellm_proteus.shadow_rows``: wide-format JSONL with a ``shadow_of`` column, written
beside the decision log by the proxy's shadow evaluation) are read with it as *full-information*
rows: every judged candidate's score, ``propensity`` NaN and ``logged_choice`` -1 (no logging
policy to correct for), ``logged_tau`` their ``tau``, split by prompt hash like the decisions.  Their models join the slot list.
The served model is always scored and each other candidate only with probability ``call_share``:
``inclusion`` holds those probabilities (``shadow_inclusion``), by which estimates weigh the scores.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from litellm_proteus.decision_log import READ_SCHEMAS, call_requests, latest_outcome
from litellm_proteus.shadow_rows import SHADOW_OF

from .common import LoadOptions, RoutingLogWarning, Table, concat_logs, estimate_tokens, numeric_column
from .logs import RoutingLog
from .routerbench import table_log

FORMAT = "decision-log"
RECORD_TYPES = ("decision", "outcome", "feedback")
# the prompts held out for the off-policy certificate (proteus train --validation-share: its default)
VALIDATION_SHARE = 0.4


def detect(frame: pd.DataFrame) -> bool:
    return {"schema", "type", "call_id"} <= {c for c in frame.columns if isinstance(c, str)} or is_shadow(frame)


def is_shadow(frame: pd.DataFrame) -> bool:
    return SHADOW_OF in frame.columns


def _records(tables: Iterable[Table]) -> Iterable[tuple[str, dict[str, Any]]]:
    for table in tables:
        lines = table.frame.attrs.get("lines")  # the file's line numbers (JSONL); else rows count from 1
        for row, record in enumerate(table.frame.to_dict("records")):
            record = {k: v for k, v in record.items() if not (isinstance(v, float) and math.isnan(v))}
            where = f"{table.path}:{lines[row] if lines and len(lines) == len(table.frame) else row + 1}"
            if record.get("schema") not in READ_SCHEMAS:
                raise ValueError(f"{where}: field 'schema' is {record.get('schema')!r}; supported: "
                                 f"{', '.join(map(str, READ_SCHEMAS))}")
            if record.get("type") not in RECORD_TYPES:
                raise ValueError(f"{where}: field 'type' is {record.get('type')!r}; allowed: {list(RECORD_TYPES)}")
            yield where, record


def _number(where: str, call_id: str, record: Mapping[str, Any], field: str, default: float) -> float:
    """A record's numeric field (``default`` when absent), or an error naming the line, call and field."""
    value = record.get(field, default)
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        return float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer past a float's range
        raise ValueError(f"{where}: call_id {call_id!r}: field {field!r} must be a number; got {str(value)[:40]!r}") from None


def _finite_number(value: Any) -> bool:
    try:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:  # an integer past a float's range
        return False


MAX_TS = 253_402_300_799.0  # 9999-12-31T23:59:59Z: the last second a date can name


def _ts(where: str, call_id: str, record: Mapping[str, Any]) -> float:
    if record.get("ts") is None:  # as the runtime's readers (litellm_proteus.decision_log.iter_records)
        raise ValueError(f"{where}: call_id {call_id!r}: field 'ts' is missing; it must be a finite number (Unix seconds)")
    if isinstance(record["ts"], str):  # the runtime's readers take no numeric string either
        raise ValueError(f"{where}: call_id {call_id!r}: field 'ts' must be a number; got {record['ts']!r}")
    ts = _number(where, call_id, record, "ts", 0.0)
    if not (math.isfinite(ts) and 0 <= ts <= MAX_TS):
        raise ValueError(f"{where}: call_id {call_id!r}: field 'ts' must be Unix seconds in [0, {MAX_TS:.0f}] (up to "
                         f"9999-12-31); got {ts}")
    return ts


def _cost(where: str, call_id: str, field: str, value: Any) -> float:
    """A logged cost in USD: None (unknown) -> NaN, else a finite number >= 0 (what the wide format takes)."""
    if value is None:
        return math.nan
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        cost = float(value)
    except (TypeError, ValueError, OverflowError):
        cost = math.nan
    if not (math.isfinite(cost) and cost >= 0):
        raise ValueError(f"{where}: call_id {call_id!r}: field {field!r} must be a number >= 0 (USD per call) or null "
                         f"for unknown; got {value!r}")
    return cost


def _candidates(where: str, call_id: str, candidates: list[Any]) -> list[dict[str, Any]]:
    """Each candidate's ``slot`` (an integer >= 0), ``model`` (text) and ``cost_usd`` (NaN when unknown)."""
    out = []
    for j, cand in enumerate(candidates):
        field = f"candidates[{j}]"
        if not isinstance(cand, Mapping):
            raise ValueError(f"{where}: call_id {call_id!r}: field {field!r} must be an object {{slot, model, cost_usd, p}}; "
                             f"got {cand!r}")
        for name in ("slot", "model"):
            if cand.get(name) is None:
                raise ValueError(f"{where}: call_id {call_id!r}: field '{field}.{name}' is missing")
        slot = cand["slot"]
        integral = isinstance(slot, (int, np.integer)) or (isinstance(slot, float) and slot.is_integer())
        if isinstance(slot, bool) or not integral or int(slot) < 0:
            raise ValueError(f"{where}: call_id {call_id!r}: field '{field}.slot' must be an integer >= 0; got {slot!r}")
        out.append({**cand, "slot": int(slot), "model": str(cand["model"]),
                    "cost_usd": _cost(where, call_id, f"{field}.cost_usd", cand.get("cost_usd"))})
    return out


def _decision_fields(where: str, call_id: str, record: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int, float]:
    candidates = record.get("candidates")
    if not isinstance(candidates, (list, tuple)) or not candidates:
        raise ValueError(f"{where}: field 'candidates' must be a non-empty list of {{slot, model, cost_usd, p}}")
    chosen = record.get("chosen")  # pandas reads it as float when other record types lack it
    integral = isinstance(chosen, (int, np.integer)) or (isinstance(chosen, float) and chosen.is_integer())
    if isinstance(chosen, bool) or not integral or not 0 <= int(chosen) < len(candidates):
        raise ValueError(f"{where}: field 'chosen' must be an index into candidates (0..{len(candidates) - 1}); got {chosen!r}")
    propensity = _number(where, call_id, record, "propensity", 1.0)
    if not 0 < propensity <= 1:
        raise ValueError(f"{where}: field 'propensity' must lie in (0, 1]; got {propensity}")
    tau = record.get("tau_effective")  # NaN: absent (pandas fills a column other records lack)
    if not (tau is None or _finite_number(tau) or (isinstance(tau, float) and math.isnan(tau))):
        raise ValueError(f"{where}: call_id {call_id!r}: field 'tau_effective' must be a finite number or null; "
                         f"got {str(tau)[:40]!r}")
    return _candidates(where, call_id, list(candidates)), int(chosen), propensity


def join(tables: Iterable[Table]) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, tuple[float, float, str]]]:
    """Decisions (in ``ts`` order), each decision's outcome and each decision's feedback (ts, score,
    source), both keyed by the decision's ``sample_id``.

    Records are joined into requests by the proxy's own reader's rule
    (``litellm_proteus.decision_log.call_requests``): one row per request, its latest decision (a
    retry decides again; of equal ``ts`` the one read later), the latest outcome of that decision's
    pick (``latest_outcome``: a retried call has one per attempt, and a fallback group's answer is
    none of the pick's) and the latest feedback sent while it was its call's latest request.  A call
    id that distinct requests reused gives a row per request (``sample_id`` ``<call_id>#<n>`` for the
    n-th), with a warning that counts them."""
    tables, records = list(tables), []
    for where, record in _records(tables):
        call_id = str(record.get("call_id", ""))
        if not call_id:
            raise ValueError(f"{where}: field 'call_id' is missing or empty")
        kind = record["type"]
        record = {**record, "call_id": call_id, "ts": _ts(where, call_id, record), "where": where}
        if kind == "decision":
            candidates, chosen, propensity = _decision_fields(where, call_id, record)
            record.update(candidates=candidates, chosen=chosen, propensity=propensity)
        elif kind == "outcome":
            if record.get("response_cost") is not None:
                record["response_cost"] = _cost(where, call_id, "response_cost", record["response_cost"])
        else:
            score = _number(where, call_id, record, "score", math.nan)
            if not 0 <= score <= 1:
                raise ValueError(f"{where}: call_id {call_id!r}: field 'score' must be a number in [0, 1]; "
                                 f"got {record.get('score')!r}")
            record["score"] = score
        records.append(record)
    grouped = call_requests(records)
    warning = grouped.warning()
    if warning:
        where = ", ".join(str(t.path) for t in tables[:3])
        warnings.warn(f"decision log ({where}): {warning}", RoutingLogWarning, stacklevel=3)
    rows, outcomes, labels = [], {}, {}
    for request in grouped.requests:
        if not request.owned:
            continue
        row = {**request.decision, "sample_id": request.sample_id}
        rows.append(row)
        outcome = latest_outcome(request.decision, request.outcomes)
        if outcome is not None:
            outcomes[row["sample_id"]] = dict(outcome)
        if request.latest_feedback is not None:
            f = request.latest_feedback
            labels[row["sample_id"]] = (f["ts"], f["score"], str(f.get("source", "")))
    rows.sort(key=lambda d: (d["ts"], d["sample_id"]))
    return rows, outcomes, labels


def _slots(rows: list[dict[str, Any]]) -> list[str]:
    """The log's models, by the slot each first holds (then first seen).  Rows join candidates by model
    name, so a log spanning an artifact promotion that re-ordered the slots is one log; only a record
    naming one slot index for two models is refused."""
    first: dict[str, tuple[int, int]] = {}
    for row in rows:
        names: dict[int, str] = {}
        for cand in row["candidates"]:
            slot, model = cand["slot"], cand["model"]
            if names.setdefault(slot, model) != model:
                raise ValueError(f"{row['where']}: call_id {row['call_id']!r}: slot {slot} is named both "
                                 f"{names[slot]!r} and {model!r} in one decision")
            first.setdefault(model, (slot, len(first)))
    return sorted(first, key=first.__getitem__)


def prompt_fraction(prompt: str) -> float:
    """A prompt's position in [0, 1) by BLAKE2b of its text: repeats of a prompt land together."""
    digest = hashlib.blake2b(prompt.encode("utf-8", "surrogatepass"), digest_size=8, person=b"proteus-split").digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def prompt_split(prompts: list[str], validation_share: float = VALIDATION_SHARE) -> np.ndarray:
    return np.array(["val" if prompt_fraction(p) >= 1 - validation_share else "train" for p in prompts], dtype=object)


def split_method(validation_share: float = VALIDATION_SHARE) -> str:
    return f"prompt-hash:val share {validation_share:g}"


def load(tables: list[Table], options: LoadOptions) -> RoutingLog:
    """Decision records joined into bandit rows, plus any shadow rows as full-information rows."""
    share = VALIDATION_SHARE if options.validation_share is None else options.validation_share
    shadow = [t for t in tables if is_shadow(t.frame)]
    records = [t for t in tables if not is_shadow(t.frame)]
    parts = ([bandit_log(records, share)] if records else []) + ([shadow_log(shadow, share)] if shadow else [])
    if not any(np.isfinite(part.scores).any() for part in parts):
        raise ValueError(
            f"decision log ({', '.join(str(t.path) for t in tables[:3])}): none of its "
            f"{len(parts[0]) if records else 0} decisions has a "
            "feedback label and no shadow row has a score: training from traffic needs outcomes. Send feedback "
            "(POST /proteus/feedback, proteus feedback, proteus judge) or turn on shadow evaluation, then train again")
    if len(parts) == 1:
        return parts[0]
    models = list(dict.fromkeys(m for part in parts for m in part.models))
    log = concat_logs([part.with_models(models) for part in parts])
    log.provenance = {**parts[0].provenance, "n_shadow_rows": parts[1].provenance["n_shadow_rows"]}
    return log


def shadow_log(tables: list[Table], validation_share: float = VALIDATION_SHARE) -> RoutingLog:
    """Shadow rows (full information, no logging policy) with a prompt-hash split."""
    parts = []
    for table in tables:
        part = table_log(table)
        n = len(part)
        part.logged_choice, part.propensity = np.full(n, -1), np.full(n, np.nan)
        part.logged_tau = numeric_column(table.frame, "tau", table.path) if "tau" in table.frame else np.full(n, np.nan)
        part.inclusion = shadow_inclusion(table, part)
        parts.append(part)
    models = list(dict.fromkeys(m for part in parts for m in part.models))
    log = concat_logs([part.with_models(models) for part in parts])
    log.split = prompt_split(log.prompts, validation_share)
    log.split_method = split_method(validation_share)
    log.source = FORMAT
    # rows, not lines: a shadow row read twice (a copied file) is one row once clean_log drops repeats of its sample_id
    log.provenance = {"format": FORMAT, "n_shadow_rows": len(set(log.sample_ids)) if log.sample_ids else len(log)}
    return log


def shadow_inclusion(table: Table, part: RoutingLog) -> np.ndarray:
    """[N, K] the probability each shadow row scored each model: 1 for the served one (always judged),
    ``call_share`` for the others.  A row without ``call_share`` (written before the field) takes the
    share of its other candidates (models with a cost) it scored; a row without ``served``, 1 everywhere
    (every candidate drawn alike)."""
    frame, n = table.frame, len(part)
    served = frame["served"].tolist() if "served" in frame else [None] * n
    share = numeric_column(frame, "call_share", table.path) if "call_share" in frame else np.full(n, np.nan)
    bad = np.isfinite(share) & ~((share > 0) & (share <= 1))
    if bad.any():
        raise ValueError(f"{table.path}: row {int(np.flatnonzero(bad)[0])}: field 'call_share' must lie in (0, 1]; "
                         f"got {share[bad][0]:g}")
    inclusion = np.ones((n, len(part.models)))
    for i, name in enumerate(served):
        if name not in part.models:
            continue
        slot = part.models.index(name)
        others = np.isfinite(part.costs[i]) | np.isfinite(part.scores[i])
        others[slot] = False
        called = np.isfinite(part.scores[i]) & others
        p = share[i] if np.isfinite(share[i]) else (called.sum() / others.sum() if others.any() else 1.0)
        inclusion[i] = max(float(p), 1e-9)
        inclusion[i, slot] = 1.0
    return inclusion


def _prompt_truncated(decision: Mapping[str, Any]) -> bool:
    return decision.get("prompt_truncated") in (True, 1)


def bandit_log(tables: list[Table], validation_share: float = VALIDATION_SHARE) -> RoutingLog:
    """Decision records joined by call_id: one bandit row per decision."""
    rows, outcomes, feedback = join(tables)
    where = ", ".join(str(t.path) for t in tables[:3])
    if not rows:
        raise ValueError(f"decision log ({where}): no 'decision' records")
    truncated = sum(1 for r in rows if _prompt_truncated(r))
    if truncated:
        # the logged prompt is only the head of what was routed: its embedding is not the live prompt's
        warnings.warn(
            f"decision log ({where}): dropped {truncated} of {len(rows)} decisions marked prompt_truncated (their "
            "logged prompt is cut to fit the line limit, so it embeds differently from the routed prompt); a larger "
            "decision_log max_bytes keeps their whole prompt", RoutingLogWarning, stacklevel=4)
        rows = [r for r in rows if not _prompt_truncated(r)]
        if not rows:
            raise ValueError(f"decision log ({where}): every decision is marked prompt_truncated; nothing to train on")
    missing_prompt = [r["where"] for r in rows if not isinstance(r.get("prompt"), str)]
    if missing_prompt:
        raise ValueError(
            f"{missing_prompt[0]}: decision has no 'prompt' ({len(missing_prompt)} of {len(rows)} decisions); training "
            "and evaluating from a decision log need the prompt text (the encoder reads it): set log_prompts: true "
            "in the proxy's decision_log settings"
        )
    models = _slots(rows)
    index = {m: j for j, m in enumerate(models)}
    n, k = len(rows), len(models)
    scores = np.full((n, k), np.nan)
    costs = np.full((n, k), np.nan)
    propensity = np.ones(n)
    chosen = np.zeros(n, dtype=np.int64)
    for i, row in enumerate(rows):
        for cand in row["candidates"]:
            costs[i, index[cand["model"]]] = cand["cost_usd"]
        slot = index[row["candidates"][row["chosen"]]["model"]]
        chosen[i], propensity[i] = slot, row["propensity"]
        outcome = outcomes.get(row["sample_id"], {})
        if outcome.get("response_cost") is not None:
            costs[i, slot] = outcome["response_cost"]
        if row["sample_id"] in feedback and outcome.get("success") is not False:  # a failed pick's call: not its label
            scores[i, slot] = feedback[row["sample_id"]][1]
    prompts = [r["prompt"] for r in rows]
    split = prompt_split(prompts, validation_share)
    ts = [r["ts"] for r in rows]
    labelled = np.isfinite(scores).any(axis=1)
    provenance = {
        "format": FORMAT,
        "first_decision_utc": _utc(min(ts)),
        "last_decision_utc": _utc(max(ts)),
        "n_decisions": n,
        "n_prompt_truncated_dropped": truncated,
        "n_outcomes": sum(1 for r in rows if r["sample_id"] in outcomes),
        "n_labelled": int(labelled.sum()),
        "label_share": round(float(labelled.mean()), 6),
        # propensity < 1: exploration could have moved the decision (the record does not say whether it did)
        "n_exploration_on": int((propensity < 1).sum()),
        "labels_per_model": {m: int(labelled[chosen == j].sum()) for j, m in enumerate(models)},
        "feedback_sources": dict(sorted(Counter(feedback[r["sample_id"]][2] for i, r in enumerate(rows) if labelled[i]).items())),
        "artifacts": sorted({str(r.get("artifact", "")) for r in rows}),
        "split_method": split_method(validation_share),
    }
    return RoutingLog(
        prompts=prompts, scores=scores, costs=costs, models=models,
        task=[str(r.get("tier") or "") for r in rows], split=split,
        sample_ids=[r["sample_id"] for r in rows], input_tokens=estimate_tokens(prompts), source=FORMAT,
        paths=[t.path.as_posix() for t in tables], split_method=provenance["split_method"],
        propensity=propensity, logged_choice=chosen, provenance=provenance,
        logged_tau=np.array([float(r.get("tau_effective", math.nan)) for r in rows]),
    )

