"""Shadow rows: full-information training rows in the RouterBench wide format, one per shadowed request.

A row holds the request's prompt and, for every candidate model of its decision, a score column
``<model>`` (the judge's score; ``null`` for a candidate that was not called or whose judge answer
did not parse) and a cost column ``<model>|total_cost`` (the call's USD cost when it was called,
else the decision's estimate); ``tau`` is the tau the request was served at (``tau_effective``);
``served`` the model that answered the client and ``call_share`` the probability with which each
other candidate was called (shadow ``candidates`` over the other candidates): the served model is
always scored, so an estimate over shadow rows weighs each other score by 1 / ``call_share``.  ``shadow_of`` (the served call's ``call_id``) marks the row as a
shadow row, which is how ``proteus train --data DIR`` tells it from a RouterBench file and reads it
with the decision log beside it (``train/data/decision_log.py``).  Files:
``DIR/shadow-<UTC yyyymmddTHHMMSS>-<pid>-<n>.jsonl``, rotated like the decision log's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

SHADOW_PREFIX = "shadow-"
SHADOW_OF = "shadow_of"
COST_SUFFIX = "|total_cost"


def shadow_row(
    *,
    call_id: str,
    prompt: str,
    tier: str,
    tau: float,
    models: Sequence[str],
    scores: Mapping[str, float | None],
    costs: Mapping[str, float | None],
    served: str,
    call_share: float,
    ts: float | None = None,
) -> dict[str, Any]:
    """``models``: every candidate of the decision (column order); ``scores`` / ``costs``: by model,
    missing = not known (``null``); ``call_share``: the probability each candidate but ``served`` was called."""
    row: dict[str, Any] = {
        SHADOW_OF: call_id,
        "sample_id": f"shadow:{call_id}",
        "ts": time.time() if ts is None else ts,
        "prompt": prompt,
        "eval_name": tier,
        "tau": tau,
        "served": served,
        "call_share": call_share,
    }
    for model in models:  # score columns first: the wide format's model order is theirs
        row[model] = scores.get(model)
    for model in models:
        row[model + COST_SUFFIX] = costs.get(model)
    return row
