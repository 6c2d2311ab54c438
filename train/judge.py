"""``proteus judge``: labels from an LLM judge for a sample of logged responses.

    proteus judge --log DIR --judge-model MODEL [--api-base URL] --sample 0.05 [--budget-usd N]

Reads the decision log's files (``decisions-*.jsonl``, the judge's own feedback files among them;
the ``shadow-*.jsonl`` rows beside them are another format and are left alone) with
``train/data/decision_log.py``, takes the calls that have a prompt (``log_prompts: true``) and a
response (``log_responses: true``) and no feedback yet, samples a share
of them by a hash of ``call_id`` (re-running with the same ``--seed`` picks the same calls; a call with
feedback is never judged again, an unscored one is: see below), asks ``MODEL`` through LiteLLM (the SDK; with
``--api-base`` any OpenAI-compatible endpoint, e.g. a LiteLLM proxy group) with the rubric of
``litellm_proteus.judge_rubric``, and appends one ``feedback`` record (``source: "judge"``) per scored call to a new log file
in DIR.  An answer whose score cannot be parsed (or a reply without text) is counted as unscored, never guessed; no record is
written for it (a feedback record holds a score), so a later run judges that call again, and pays
for it again (``run`` warns).  A log
whose outcome records carry no response (or whose decisions carry no prompt) is an error (exit 2)
naming the proxy setting that logs them.

Cost of a judge call (``call_cost``): the cost the endpoint reports (a LiteLLM proxy's
``x-litellm-response-cost`` header, which the SDK keeps in ``_hidden_params``), else LiteLLM's cost
map for the model, else unknown.  ``--budget-usd`` stops before the next call once the cost of the
calls made reaches it; with a budget, a call whose cost is unknown stops the run at once (exit 2,
with the labels so far written): a budget that cannot be measured is not enforced silently.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from litellm_proteus.decision_log import dir_file_mode, feedback_record, log_files, private_opener
from litellm_proteus.judge_rubric import judge_messages, parse_score
from litellm_proteus.shadow import response_text
from litellm_proteus.predictor import mixing_draw

def sampled(call_id: str, share: float, seed: int) -> bool:
    """A seeded hash share of the calls (the proxy's prompt-hash draw, on the call id)."""
    return mixing_draw(f"{seed}:{call_id}") < share


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log", required=True, metavar="DIR", help="decision-log directory (feedback is appended there)")
    parser.add_argument("--judge-model", required=True, metavar="MODEL", help="LiteLLM model, e.g. openai/gpt-4o-mini or a proxy group")
    parser.add_argument("--api-base", help="OpenAI-compatible endpoint (e.g. http://127.0.0.1:4000 for a LiteLLM proxy)")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the judge's API key")
    parser.add_argument("--sample", type=float, default=0.05, help="share of eligible calls to judge (default: 0.05)")
    parser.add_argument("--budget-usd", type=float,
                        help="stop once the judge calls cost this much (the cost the endpoint reports, e.g. a LiteLLM "
                             "proxy's x-litellm-response-cost, else LiteLLM's cost map); a call whose cost is unknown "
                             "stops the run (exit 2)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--max-tokens", type=int, default=200)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.sample <= 1:
        raise ValueError(f"--sample must lie in (0, 1]; got {args.sample}")
    if args.budget_usd is not None and not (math.isfinite(args.budget_usd) and args.budget_usd > 0):
        raise ValueError(f"--budget-usd must be a finite number > 0; got {args.budget_usd}")  # nan or inf: no cap at all
    if args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be >= 1; got {args.max_tokens}")
    summary = judge(args)
    print(json.dumps(summary, indent=2))
    if summary["stopped_unpriced"]:
        print(f"error: --budget-usd {args.budget_usd:g} cannot be enforced: the cost of the judge call for "
              f"{summary['unpriced_call_id']} is unknown (no x-litellm-response-cost header from the endpoint and "
              f"{args.judge_model!r} is not in LiteLLM's cost map); stopped after {summary['called']} call(s). "
              "Judge through a LiteLLM proxy that reports the cost, name a model LiteLLM prices, or drop --budget-usd",
              file=sys.stderr)
        return 2
    if summary["called"] and summary["failed"] == summary["called"]:
        print(f"error: every judge call failed ({summary['failed']} of {summary['called']}; the first error is printed "
              f"above): check --judge-model {args.judge_model!r}, --api-base and the key in ${args.api_key_env}",
              file=sys.stderr)
        return 2
    if summary["unscored"]:
        # The log has no record for "judged, no score" (a feedback record needs a score in [0, 1]), and
        # a later run may score it (a larger --max-tokens, another judge): such calls stay eligible.
        print(f"warning: {summary['unscored']} judge answer(s) had no parsable SCORE line (unscored; e.g. cut off by "
              f"--max-tokens {args.max_tokens}): no feedback is written for them, so a later run with the same --seed "
              "judges them again and pays for them again", file=sys.stderr)
    return 0


def read_log(log_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, tuple[float, float, str]]]:
    """Decisions, outcomes and feedback of the decision-log files only (``decisions-*.jsonl``)."""
    from .data.common import Table, read_table
    from .data.decision_log import join

    return join(Table(path, read_table(path), True) for path in log_files(log_dir))


def eligible_calls(log_dir: Path) -> list[tuple[str, str, str]]:
    """(call_id, prompt, response) of every call with both texts and no feedback yet (not a stream its
    client left mid-way: its logged response is the part sent).

    A log that has decisions but nothing to judge because the proxy did not log the texts is an
    error naming the setting (``decision_log.log_responses`` / ``log_prompts``)."""
    decisions, outcomes, feedback = read_log(log_dir)
    if not decisions:
        raise ValueError(f"--log {log_dir}: no decision records in its decisions-*.jsonl files (is it a decision_log.dir?)")
    out = []
    latest = {d["call_id"]: d["sample_id"] for d in decisions}  # a score sent now labels its call's latest request
    for d in decisions:
        outcome = outcomes.get(d["sample_id"], {})
        response = None if outcome.get("client_disconnected") else outcome.get("response")  # a part is no answer to judge
        if isinstance(d.get("prompt"), str) and isinstance(response, str) and d["sample_id"] not in feedback \
                and latest[d["call_id"]] == d["sample_id"]:
            out.append((d["call_id"], d["prompt"], response))
    if not out:
        has_response = any(isinstance(o.get("response"), str) for o in outcomes.values())
        has_prompt = any(isinstance(d.get("prompt"), str) for d in decisions)
        missing = ([] if has_response else ["response"]) + ([] if has_prompt else ["prompt"])
        if missing:
            settings = ([] if has_response else ["decision_log.log_responses: true"]) + \
                       ([] if has_prompt else ["decision_log.log_prompts: true"])
            raise ValueError(
                f"--log {log_dir}: nothing to judge: none of its {len(decisions)} decisions has its "
                f"{' and '.join(missing)} logged (the judge scores a call's response to its prompt). Set "
                f"{' and '.join(settings)} in the proxy's router_settings.routing_strategy_args and judge the "
                "traffic logged after that")
    return out


def call_cost(reply: Any) -> float | None:
    """USD cost of one judge call: the endpoint's reported cost (a LiteLLM proxy's
    ``x-litellm-response-cost`` header), else LiteLLM's cost for the model, else None (unknown)."""
    import litellm

    hidden = getattr(reply, "_hidden_params", None) or {}
    if not isinstance(hidden, dict):  # a pydantic HiddenParams in some LiteLLM versions
        hidden = hidden.model_dump() if hasattr(hidden, "model_dump") else {}
    headers = hidden.get("additional_headers") or {}
    # the proxy's header first; "response_cost" is LiteLLM's own figure (the header when present, else its cost map)
    for value in (headers.get("llm_provider-x-litellm-response-cost"), hidden.get("response_cost")):
        try:
            cost = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(cost) and cost >= 0:
            return cost
    try:
        cost = float(litellm.completion_cost(completion_response=reply))
    except Exception:  # a model missing from LiteLLM's cost map  # noqa: BLE001
        return None
    return cost if math.isfinite(cost) and cost >= 0 else None


def judge(args: argparse.Namespace) -> dict:
    log_dir = Path(args.log)
    if not log_dir.is_dir():
        raise ValueError(f"--log {log_dir}: not a directory")
    calls = eligible_calls(log_dir)
    import litellm  # after the log is read: importing it loads the cost map

    chosen = [c for c in calls if sampled(c[0], args.sample, args.seed)]
    # --api-base is an OpenAI-compatible endpoint: a bare proxy group name (proteus-judge) has no
    # provider prefix for LiteLLM to route by, so name the provider (an openai/ prefix is stripped).
    provider = {"custom_llm_provider": "openai"} if args.api_base else {}
    spent, scored, unscored, failed, stopped = 0.0, [], 0, 0, False
    called, unpriced, unpriced_call_id = 0, 0, None
    for call_id, prompt, response in chosen:
        if args.budget_usd is not None and spent >= args.budget_usd:
            stopped = True
            break
        called += 1
        try:
            reply = litellm.completion(model=args.judge_model, messages=judge_messages(prompt, response), temperature=0,
                                       max_tokens=args.max_tokens, api_base=args.api_base,
                                       api_key=os.environ.get(args.api_key_env), **provider)
        except Exception as exc:  # one failing judge call must not lose the others' labels  # noqa: BLE001
            failed += 1
            print(f"judge call for {call_id} failed: {exc}", flush=True)
            continue
        cost = call_cost(reply)
        if cost is None:
            unpriced += 1
            if unpriced_call_id is None and args.budget_usd is None:
                print(f"warning: the cost of judge calls to {args.judge_model!r} is unknown (no x-litellm-response-cost "
                      "header, not in LiteLLM's cost map): spent_usd counts only the priced calls", file=sys.stderr, flush=True)
            unpriced_call_id = unpriced_call_id or call_id
        else:
            spent += cost
        # a reply with no text (no choices: e.g. a content filter's HTTP 200) is unscored, never a crash
        score = parse_score(response_text(reply))
        if score is None:
            unscored += 1
        else:
            scored.append(feedback_record(call_id, score, "judge"))
        if cost is None and args.budget_usd is not None:
            break  # the budget cannot be measured: stop (run() says why and exits 2)
    path = None
    if scored:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        path = log_dir / f"decisions-{stamp}-{os.getpid()}-judge.jsonl"
        # the log's own mode: its readers are the proxy user's (and group's, with file_mode "0640")
        with open(path, "w", encoding="utf-8", opener=private_opener(dir_file_mode(log_dir))) as handle:
            handle.write("".join(json.dumps(r) + "\n" for r in scored))
    return {"eligible": len(calls), "sampled": len(chosen), "scored": len(scored), "unscored": unscored,
            "failed": failed, "spent_usd": round(spent, 6), "unpriced_calls": unpriced, "stopped_by_budget": stopped,
            "stopped_unpriced": bool(unpriced and args.budget_usd is not None), "unpriced_call_id": unpriced_call_id,
            "called": called, "written": str(path) if path else None}
