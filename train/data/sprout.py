"""SPROUT (CARROT's routing dataset, ``CARROT-LLM-Routing/SPROUT`` on the Hugging Face hub).

Per row: ``prompt`` (a string or a list of chat messages), ``id``, ``dataset`` (-> task), and per
model either a struct column ``m`` = ``{"score", "num_input_tokens", "num_output_tokens",
"response"}`` (the hub's parquet; also dicts in JSON lines, or their string form in a CSV) or
flattened columns ``m|score``, ``m|num_input_tokens``, ``m|num_output_tokens``.

The hub data has no per-call cost: cost = (input tokens x input price + output tokens x output
price) / 1e6 with the price table of ``train.data.prices`` (user entries merged over it); a model
without a price is an error naming it.  ``input_tokens`` (one count per row) is the mean of the
models' ``num_input_tokens`` (their tokenizers differ slightly), or chars / 4 when none is given.
Official splits come from a ``split`` column or the shard names (``train-00000-of-00001.parquet``,
``validation-...`` -> val, ``test-...``).
"""

from __future__ import annotations

import ast
import json
from typing import Any

import numpy as np
import pandas as pd

from . import prices as price_mod
from .common import (LoadOptions, Table, base_log, check_scores, concat_logs, estimate_tokens, numeric_column,
                     prompt_text, require_columns, text_column)
from .logs import RoutingLog

FORMAT = "sprout"
FIELDS = ("score", "num_input_tokens", "num_output_tokens")


def _as_dict(value: Any) -> dict | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.lstrip().startswith("{"):
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(value)
            except (ValueError, SyntaxError):
                continue
            return parsed if isinstance(parsed, dict) else None
    return None


def _first_value(series: pd.Series) -> Any:
    present = series.notna().to_numpy()
    return series.iloc[int(present.argmax())] if present.any() else None


def nested_models(frame: pd.DataFrame) -> list[str]:
    out = []
    for column in frame.columns:
        if not isinstance(column, str) or pd.api.types.is_numeric_dtype(frame[column]) or "|" in column:
            continue
        cell = _as_dict(_first_value(frame[column]))
        if cell is not None and "score" in cell:
            out.append(column)
    return out


def flat_models(frame: pd.DataFrame) -> list[str]:
    return [c[: -len("|score")] for c in frame.columns if isinstance(c, str) and c.endswith("|score")]


def detect(frame: pd.DataFrame) -> bool:
    return bool(flat_models(frame) or nested_models(frame))


def _field_arrays(table: Table, models: list[str], nested: set[str]) -> dict[str, np.ndarray]:
    """``{field: [N, K]}`` for score and token counts, from struct or flattened columns."""
    frame, path = table.frame, table.path
    out = {name: np.full((len(frame), len(models)), np.nan) for name in FIELDS}
    for j, model in enumerate(models):
        if model in nested:
            cells = [_as_dict(v) for v in frame[model].tolist()]
            for name in FIELDS:
                if not any(c is not None and name in c for c in cells):
                    raise ValueError(f"{path}: column {model!r} has no {name!r} field (SPROUT structs need {list(FIELDS)})")
                values = pd.Series([None if c is None else c.get(name) for c in cells], dtype=object)
                try:
                    out[name][:, j] = pd.to_numeric(values, errors="raise").to_numpy(dtype=np.float64, na_value=np.nan)
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"{path}: column {model!r} field {name!r} must be numeric ({exc})") from None
        else:
            for name in FIELDS:
                column = f"{model}|{name}"
                if column not in frame.columns:
                    raise ValueError(f"{path}: missing column {column!r} for format {FORMAT!r} (flattened SPROUT needs "
                                     f"'<model>|score', '<model>|num_input_tokens', '<model>|num_output_tokens')")
                out[name][:, j] = numeric_column(frame, column, path)
        for name in FIELDS[1:]:  # token counts price the call: a negative one makes a negative cost
            col = out[name][:, j]
            bad = ~np.isnan(col) & ~(np.isfinite(col) & (col >= 0))
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                where = f"column {model!r} field {name!r}" if model in nested else f"column {f'{model}|{name}'!r}"
                raise ValueError(f"{path}: {where}, row {row}: {col[row]:g} is not a token count ({int(bad.sum())} such "
                                 "row(s)); allowed: a number >= 0, or empty where the model was not run")
    return out


def table_log(table: Table, options: LoadOptions) -> RoutingLog:
    require_columns(table, ["prompt"], FORMAT)
    frame, path = table.frame, table.path
    nested = nested_models(frame)
    models = nested + [m for m in flat_models(frame) if m not in nested]
    if not models:
        raise ValueError(f"{path}: no model columns for format {FORMAT!r}: expected struct columns '<model>' with a "
                         "'score' field, or flattened '<model>|score' columns")
    fields = _field_arrays(table, models, set(nested))
    check_scores(fields["score"], models, path)
    table_prices = np.array(price_mod.lookup(options.prices, models, str(path)))  # [K, 2]
    costs = (fields["num_input_tokens"] * table_prices[:, 0] + fields["num_output_tokens"] * table_prices[:, 1]) / 1e6
    prompts = [prompt_text(v) for v in frame["prompt"].tolist()]
    counted = np.isfinite(fields["num_input_tokens"])
    mean_in = np.where(counted, fields["num_input_tokens"], 0.0).sum(axis=1) / np.maximum(counted.sum(axis=1), 1)
    input_tokens = np.where(counted.any(axis=1), np.round(mean_in), estimate_tokens(prompts))
    task_column = next((c for c in ("dataset", "eval_name") if c in frame.columns), None)
    return base_log(
        table, models, fields["score"], costs,
        task=text_column(frame, task_column) if task_column else None,
        prompts=prompts, output_tokens=fields["num_output_tokens"], input_tokens=input_tokens, source=FORMAT,
    )


def load(tables: list[Table], options: LoadOptions) -> RoutingLog:
    return concat_logs([table_log(t, options) for t in tables])
