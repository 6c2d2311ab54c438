"""RouteLLM evaluation CSVs (github.com/lm-sys/RouteLLM ``routellm/evals``).

``mmlu/responses/mmlu_<subject>.csv``: ``prompt`` + one True/False column per model (answered
correctly).  ``gsm8k/gsm8k_responses.csv``: the same plus ``<model>_response`` columns.  A model is
every column (other than ``prompt`` and ``*_response``) whose values are all True/False (booleans or
the strings); 0/1 numbers are not taken as RouteLLM labels.  Task = file stem without
``_responses`` (``mmlu_anatomy``, ``gsm8k``).

Costs are not logged: cost = (input tokens x input price + output tokens x output price) / 1e6 with
``train.data.prices`` (defaults: GPT-4-1106 $10 / $30, Mixtral-8x7B $0.6 / $0.6 per 1M tokens).
Input tokens = chars / 4 of the prompt; output tokens = chars / 4 of ``<model>_response`` when that
column exists, else ``ANSWER_ONLY_OUTPUT_TOKENS`` (MMLU is answered with a single letter).

``contaminated_prompts.jsonl`` lists eval prompts that overlap RouteLLM's *own* router training data.
That overlap does not concern a router trained here, so by default they are kept (and the shared
data loads as published: 14,042 MMLU prompts); ``skip_contaminated=True`` drops rows whose prompt is
an ``eval_prompt`` of a ``contaminated_prompts.jsonl`` beside the CSV or one directory up.  A
``contaminated_prompts.jsonl`` named explicitly as an input path is always applied (it is then in the
log's ``paths``, so re-loading those paths reproduces the same rows).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from . import prices as price_mod
from .common import (LoadOptions, RoutingLogWarning, Table, base_log, concat_logs, estimate_tokens,
                     require_columns, response_tokens, split_from_name, text_column)
from .logs import RoutingLog

FORMAT = "routellm"
RESPONSE_SUFFIX = "_response"
ANSWER_ONLY_OUTPUT_TOKENS = 1
CONTAMINATION_FILE = "contaminated_prompts.jsonl"
_BOOL = {True: 1.0, False: 0.0, "True": 1.0, "False": 0.0, "true": 1.0, "false": 0.0}


def _bool_values(series: pd.Series) -> np.ndarray | None:
    """The column as 1.0 / 0.0 / NaN, or None when it is not a True/False column."""
    if pd.api.types.is_bool_dtype(series):
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    if pd.api.types.is_numeric_dtype(series):
        return None
    present = series.dropna().tolist()
    # element-wise with early exit: other columns may hold unhashable cells (dicts, lists)
    if not present or not all(isinstance(v, (bool, np.bool_, str)) and v in _BOOL for v in present):
        return None
    return series.map(lambda v: _BOOL.get(v, np.nan) if isinstance(v, (bool, np.bool_, str)) else np.nan).to_numpy(np.float64)


def model_columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    out = {}
    for column in frame.columns:
        if isinstance(column, str) and column != "prompt" and not column.endswith(RESPONSE_SUFFIX):
            values = _bool_values(frame[column])
            if values is not None:
                out[column] = values
    return out


def is_auxiliary(frame: pd.DataFrame) -> bool:
    """A ``contaminated_prompts.jsonl`` (consumed via ``skip_contaminated``, not a log)."""
    return "eval_prompt" in frame.columns and "prompt" not in frame.columns


def detect(frame: pd.DataFrame) -> bool:
    return "prompt" in frame.columns and bool(model_columns(frame))


def task_name(path: Path) -> str:
    stem = path.stem.removesuffix("_responses")
    split = split_from_name(path)
    if split is not None:  # mmlu_anatomy_test.csv -> mmlu_anatomy
        stem = "_".join(stem.split("_")[:-1]) or stem
    return stem


def contamination_files(path: Path) -> list[Path]:
    return [d / CONTAMINATION_FILE for d in (path.parent, path.parent.parent) if (d / CONTAMINATION_FILE).is_file()]


def _contaminated_prompts(files: list[Path]) -> set[str]:
    """Every ``eval_prompt`` of ``files``: each non-blank line a JSON object holding one as text."""
    prompts: set[str] = set()
    for file in files:
        with file.open("rb") as handle:
            for lineno, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
                except ValueError as exc:  # UnicodeDecodeError included
                    raise ValueError(f"{file}:{lineno}: not a JSON record ({exc}); each line of {CONTAMINATION_FILE} "
                                     'is {"eval_prompt": "<prompt text>", ...}') from None
                if not isinstance(record, dict):
                    raise ValueError(f"{file}:{lineno}: expected a JSON object with field 'eval_prompt'; got a JSON "
                                     f"{type(record).__name__}")
                if not isinstance(record.get("eval_prompt"), str):
                    got = repr(record["eval_prompt"])[:80] if "eval_prompt" in record else "nothing"
                    raise ValueError(f"{file}:{lineno}: field 'eval_prompt' must be the prompt text; got {got}")
                prompts.add(record["eval_prompt"])
    return prompts


def table_log(table: Table, options: LoadOptions, contaminated: set[str]) -> tuple[RoutingLog, int]:
    require_columns(table, ["prompt"], FORMAT)
    frame, path = table.frame, table.path
    labels = model_columns(frame)
    if not labels:
        raise ValueError(f"{path}: no model columns for format {FORMAT!r}: expected 'prompt' and one True/False "
                         "column per model")
    models = list(labels)
    prompts = text_column(frame, "prompt")
    input_tokens = estimate_tokens(prompts)
    output_tokens = np.column_stack([
        response_tokens(frame[m + RESPONSE_SUFFIX]) if m + RESPONSE_SUFFIX in frame.columns
        else np.full(len(frame), float(ANSWER_ONLY_OUTPUT_TOKENS))
        for m in models
    ])
    table_prices = np.array(price_mod.lookup(options.prices, models, str(path)))  # [K, 2]
    costs = (input_tokens[:, None] * table_prices[:, 0] + output_tokens * table_prices[:, 1]) / 1e6
    log = base_log(
        table, models, np.column_stack([labels[m] for m in models]), costs, task=[task_name(path)] * len(frame),
        prompts=prompts, output_tokens=output_tokens, input_tokens=input_tokens, source=FORMAT,
    )
    if not contaminated:
        return log, 0
    drop = np.array([p in contaminated for p in prompts], dtype=bool)
    return (log.subset(~drop) if drop.any() else log), int(drop.sum())


def load(tables: list[Table], options: LoadOptions) -> RoutingLog:
    files = sorted({f.resolve() for f in options.contamination_files})
    if options.skip_contaminated:
        files = sorted(set(files) | {f.resolve() for t in tables for f in contamination_files(t.path)})
        if not files:
            warnings.warn(f"skip_contaminated: no {CONTAMINATION_FILE} beside the RouteLLM files; nothing skipped",
                          RoutingLogWarning, stacklevel=3)
    contaminated = _contaminated_prompts(files)
    results = [table_log(t, options, contaminated) for t in tables]
    log = concat_logs([lg for lg, _ in results])
    dropped = sum(n for _, n in results)
    if files:
        warnings.warn(f"routellm: skipped {dropped} contaminated prompts listed in {[f.as_posix() for f in files]}",
                      RoutingLogWarning, stacklevel=3)
        log.paths = sorted(set(log.paths) | {f.as_posix() for f in files})
    return log
