"""RouterBench wide format: the canonical on-disk form of routing logs in this project.

One row per query: ``prompt``, optional ``sample_id``, ``eval_name`` (task) and ``split``; for each
model ``m`` a score column ``m`` (correctness / quality in [0, 1], NaN = not run) and a cost column
``m|total_cost`` (USD for that call).  **The model set is every column ``X`` for which a column
``X|total_cost`` exists**, in the order the score columns appear; a column of scores in [0, 1]
without its cost column is not a model, with a warning naming it.  Other columns are ignored
(``m|model_response``, the unnamed index column, ``oracle_model_to_route_to``...), except that
``m|model_response`` gives the output-token estimate for ``m`` (chars / 4; see ``common``).

Reads the hub's ``routerbench_0shot.pkl`` / ``routerbench_5shot.pkl`` (a pickled DataFrame) and the
same columns as ``.csv`` / ``.parquet`` / ``.jsonl``.  Prompts stored as Python list strings
(``"['turn 1', 'turn 2']"``) become the turns joined by a blank line.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from .common import (LoadOptions, RoutingLogWarning, Table, base_log, check_scores, concat_logs, estimate_tokens, numeric_column,
                     prompt_text, require_columns, response_tokens, text_column)
from .logs import RoutingLog

FORMAT = "routerbench"
COST_SUFFIX = "|total_cost"
RESPONSE_SUFFIX = "|model_response"


def detect(frame: pd.DataFrame) -> bool:
    return any(isinstance(c, str) and c.endswith(COST_SUFFIX) for c in frame.columns)


def model_columns(table: Table) -> list[str]:
    columns = [c for c in table.frame.columns if isinstance(c, str)]
    costed = [c[: -len(COST_SUFFIX)] for c in columns if c.endswith(COST_SUFFIX)]
    if not costed:
        raise ValueError(
            f"{table.path}: no model columns for format {FORMAT!r}: expected a score column '<model>' and a cost "
            f"column '<model>{COST_SUFFIX}' per model"
        )
    missing = [m for m in costed if m not in columns]
    if missing:
        raise ValueError(f"{table.path}: column {missing[0]!r} (scores) is missing although {missing[0] + COST_SUFFIX!r} exists")
    present = set(costed)
    uncosted = [c for c in columns if c not in present and _looks_like_scores(table.frame, c)]
    if uncosted:
        warnings.warn(
            f"{table.path}: column(s) {uncosted} hold scores in [0, 1] but have no cost column "
            f"{[c + COST_SUFFIX for c in uncosted]}: not loaded as models (a model needs both columns)",
            RoutingLogWarning, stacklevel=5,
        )
    return [c for c in columns if c in present]


# Columns of the wide format that are not models (besides '<model>|...' columns).
METADATA_COLUMNS = {"prompt", "sample_id", "id", "eval_name", "split", "oracle_model_to_route_to", "shadow_of", "tau",
                    "served", "call_share"}


def _looks_like_scores(frame: pd.DataFrame, column: str) -> bool:
    """A column that is not metadata, whose non-empty values are all numbers (or booleans) in [0, 1]."""
    if "|" in column or column in METADATA_COLUMNS or column.startswith("Unnamed:"):
        return False
    values = frame[column]
    if not (pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values)):
        return False
    values = values.dropna().astype("float64")
    return not values.empty and bool(((values >= 0) & (values <= 1)).all())


def table_log(table: Table) -> RoutingLog:
    require_columns(table, ["prompt"], FORMAT)
    frame, path = table.frame, table.path
    models = model_columns(table)
    scores = np.column_stack([numeric_column(frame, m, path) for m in models])
    check_scores(scores, models, path)
    for column in (m + COST_SUFFIX for m in models):  # true is no price (a score column may hold booleans)
        if frame[column].map(lambda v: isinstance(v, (bool, np.bool_))).any():
            raise ValueError(f"{path}: cost column {column!r} holds true/false; it must be a number >= 0 (USD per "
                             "call) or empty for unknown")
    costs = np.column_stack([numeric_column(frame, m + COST_SUFFIX, path) for m in models])
    responses = [m + RESPONSE_SUFFIX in frame.columns for m in models]
    output_tokens = None
    if any(responses):
        output_tokens = np.column_stack([
            response_tokens(frame[m + RESPONSE_SUFFIX]) if has else np.full(len(frame), np.nan)
            for m, has in zip(models, responses)
        ])
    prompts = [prompt_text(v) for v in frame["prompt"].tolist()]
    return base_log(
        table, models, scores, costs,
        task=text_column(frame, "eval_name") if "eval_name" in frame.columns else None,
        prompts=prompts, output_tokens=output_tokens, input_tokens=estimate_tokens(prompts), source=FORMAT,
    )


def load(tables: list[Table], options: LoadOptions) -> RoutingLog:
    """RouterBench logs carry their own per-call costs, so ``options.prices`` is not used."""
    del options
    return concat_logs([table_log(t) for t in tables])
