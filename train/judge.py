"""``proteus judge``: labels from an LLM judge for a sample of logged responses.

    proteus judge --log DIR --judge-model MODEL [--api-base URL] --sample 0.05 [--budget-usd N]

Reads the decision log (``train/data/decision_log.py``), takes the calls that have a prompt
(``log_prompts: true``) and a response (``log_responses: true``) and no feedback yet, samples a share
of them by a hash of ``call_id`` (re-running with the same ``--seed`` picks the same calls, and a
call already judged is never judged twice), asks ``MODEL`` through LiteLLM (the SDK; with
``--api-base`` any OpenAI-compatible endpoint, e.g. a LiteLLM proxy group) with the rubric of
``litellm_proteus.judge_rubric``, and appends one ``feedback`` record (``source: "judge"``) per scored call to a new log file
in DIR.  An answer whose score cannot be parsed is counted as unscored, never guessed.
``--budget-usd`` stops before the next call once LiteLLM's cost of the calls made reaches it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from litellm_proteus.decision_log import feedback_record
from litellm_proteus.judge_rubric import judge_messages, parse_score
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
    parser.add_argument("--budget-usd", type=float, help="stop once the judge calls cost this much (LiteLLM's cost map)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--max-tokens", type=int, default=200)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.sample <= 1:
        raise ValueError(f"--sample must lie in (0, 1]; got {args.sample}")
    if args.budget_usd is not None and args.budget_usd <= 0:
        raise ValueError(f"--budget-usd must be > 0; got {args.budget_usd}")
    print(json.dumps(judge(args), indent=2))
    return 0


def eligible_calls(log_dir: Path) -> list[tuple[str, str, str]]:
    from .data.common import Table, read_table, resolve_files
    from .data.decision_log import join

    tables = [Table(path, read_table(path), True) for path, _ in resolve_files([log_dir]) if path.suffix == ".jsonl"]
    decisions, outcomes, feedback = join(tables)
    out = []
    for d in decisions:
        response = outcomes.get(d["call_id"], {}).get("response")
        if isinstance(d.get("prompt"), str) and isinstance(response, str) and d["call_id"] not in feedback:
            out.append((d["call_id"], d["prompt"], response))
    return out


def judge(args: argparse.Namespace) -> dict:
    import litellm

    log_dir = Path(args.log)
    if not log_dir.is_dir():
        raise ValueError(f"--log {log_dir}: not a directory")
    calls = eligible_calls(log_dir)
    chosen = [c for c in calls if sampled(c[0], args.sample, args.seed)]
    # --api-base is an OpenAI-compatible endpoint: a bare proxy group name (proteus-judge) has no
    # provider prefix for LiteLLM to route by, so name the provider (an openai/ prefix is stripped).
    provider = {"custom_llm_provider": "openai"} if args.api_base else {}
    spent, scored, unscored, failed, stopped = 0.0, [], 0, 0, False
    for call_id, prompt, response in chosen:
        if args.budget_usd is not None and spent >= args.budget_usd:
            stopped = True
            break
        try:
            reply = litellm.completion(model=args.judge_model, messages=judge_messages(prompt, response), temperature=0,
                                       max_tokens=args.max_tokens, api_base=args.api_base,
                                       api_key=os.environ.get(args.api_key_env), **provider)
        except Exception as exc:  # one failing judge call must not lose the others' labels  # noqa: BLE001
            failed += 1
            print(f"judge call for {call_id} failed: {exc}", flush=True)
            continue
        try:
            spent += float(litellm.completion_cost(completion_response=reply) or 0.0)
        except Exception:  # a model missing from LiteLLM's cost map costs 0 here  # noqa: BLE001
            pass
        score = parse_score(reply.choices[0].message.content)
        if score is None:
            unscored += 1
        else:
            scored.append(feedback_record(call_id, score, "judge"))
    path = None
    if scored:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        path = log_dir / f"decisions-{stamp}-{os.getpid()}-judge.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in scored))
    return {"eligible": len(calls), "sampled": len(chosen), "scored": len(scored), "unscored": unscored,
            "failed": failed, "spent_usd": round(spent, 6), "stopped_by_budget": stopped,
            "written": str(path) if path else None}
