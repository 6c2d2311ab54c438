"""``proteus feedback CALL_ID SCORE``: record an outcome score for one routed request.

``--url PROXY`` posts it to the proxy's ``/proteus/feedback`` (with ``--api-key``, default
``$LITELLM_API_KEY``, else ``$LITELLM_MASTER_KEY``): the controller sees it and the proxy logs it.  ``--log DIR`` appends it to a
decision log folder offline (for training and ``proteus compliance``).  Refusals (unknown call id,
score outside [0, 1], duplicate, late) and a ``--url`` that is not a proxy's base URL (no ``http://``
or ``https://``, malformed, nothing answering, no feedback route there, an answer that is not JSON) end
with ``error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os

from .feedback import send_feedback


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("call_id", metavar="CALL_ID", help="the request's litellm_call_id (x-litellm-call-id header)")
    parser.add_argument("score", metavar="SCORE", type=float, help="outcome in [0, 1] (1 = correct / fully useful)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="proxy base URL, e.g. http://127.0.0.1:4000 (without /v1)")
    where.add_argument("--log", metavar="DIR", help="decision log directory (offline)")
    parser.add_argument("--api-key", default=None, help="key for --url (default: $LITELLM_API_KEY, else $LITELLM_MASTER_KEY)")
    parser.add_argument("--source", default="cli", help="who scored it (default: cli)")
    parser.add_argument("--max-age-s", type=float, default=None, help="with --log: refuse feedback for older decisions")


def run(args: argparse.Namespace) -> int:
    from .feedback import append_to_log_dir

    if args.max_age_s is not None:
        if args.log is None:
            raise ValueError("--max-age-s applies to --log only (a proxy refuses late feedback by its own "
                             "decision_log.feedback_max_age_s)")
        if not math.isfinite(args.max_age_s) or args.max_age_s <= 0:
            raise ValueError(f"--max-age-s must be a number of seconds > 0; got {args.max_age_s!r}")
    if args.log is not None:
        decision = append_to_log_dir(args.log, args.call_id, args.score, args.source, args.max_age_s)
        answer = {"call_id": decision["call_id"], "state_key": decision.get("state_key"), "score": args.score}
    else:
        api_key = args.api_key or os.environ.get("LITELLM_API_KEY") or os.environ.get("LITELLM_MASTER_KEY")
        if not api_key:  # the proxy would refuse it (LiteLLM answers a missing key with an error page)
            raise ValueError("--url needs a proxy key: --api-key, $LITELLM_API_KEY or $LITELLM_MASTER_KEY")
        answer = send_feedback(args.call_id, args.score, url=args.url, api_key=api_key, source=args.source)
    print(json.dumps(answer))
    return 0
