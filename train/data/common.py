"""Shared pieces of the routing-log loaders: reading tables, prompt text, token estimates, splits
named by files, concatenation and the clean-up policy (all-NaN rows, duplicate ids).

Token estimator (documented choice): ``ceil(characters / 4)``, the usual rule of thumb for English
BPE tokenizers.  It only feeds cost estimates and the manifest's average token counts, where a
tokenizer-exact count would not change routing.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import math
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from litellm_proteus.costs import CHARS_PER_TOKEN
from litellm_proteus.encoder import valid_text
from litellm_proteus.prompts import turns_text

from .logs import RoutingLog

SUFFIXES = (".pkl", ".pickle", ".csv", ".parquet", ".jsonl")
FORMATS = ("routerbench", "sprout", "routellm", "decision-log")
# Split names accepted in a ``split`` column or a file name, and what they mean.
SPLIT_ALIASES = {"train": "train", "val": "val", "validation": "val", "test": "test"}


class RoutingLogWarning(UserWarning):
    """Something in the input was dropped or repaired while loading (the message has the counts)."""


@dataclass
class Table:
    """One input file, parsed.  ``from_dir``: found by scanning a directory (not named by the user)."""

    path: Path
    frame: pd.DataFrame
    from_dir: bool = False


# --------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------
def resolve_files(paths: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """Files named directly, plus every supported file below each directory (recursive, sorted)."""
    out: dict[Path, bool] = {}
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            for found in sorted(path.rglob("*")):
                hidden = any(part.startswith(".") for part in found.relative_to(path).parts)
                if found.is_file() and found.suffix.lower() in SUFFIXES and not hidden:
                    out.setdefault(found.resolve(), True)
        elif path.is_file():
            if path.suffix.lower() not in SUFFIXES:
                raise ValueError(
                    f"{path}: unsupported file type {path.suffix!r}; accepted: {', '.join(SUFFIXES)} or a directory"
                )
            out[path.resolve()] = False  # named explicitly: errors are not skipped
        else:
            raise FileNotFoundError(f"routing log path not found: {path}")
    return sorted(out.items(), key=lambda item: item[0].as_posix())


def read_table(path: Path) -> pd.DataFrame:
    """Parse one file.  Id-like columns are read as text so ``"007"`` stays ``"007"``.

    CSV and JSONL must be UTF-8 (a leading byte-order mark is allowed); column names must be unique.
    A JSONL file's last line that is cut off (no newline at its end) and is not valid JSON is skipped
    with a warning: a writer killed mid-line leaves such a torn line (``docs/decision-log.md``).
    Any other line that is not valid JSON is an error naming ``file:line``."""
    suffix = path.suffix.lower()
    if suffix in (".pkl", ".pickle"):
        # A pickle can run code when loaded: only load files you trust (e.g. the RouterBench hub files).
        try:
            frame = pd.read_pickle(path)
        except Exception as exc:  # noqa: BLE001 - empty, truncated or not a pickle: each raises its own type
            raise ValueError(f"{path}: not a readable pickle ({type(exc).__name__}: {exc})") from None
        if not isinstance(frame, pd.DataFrame):
            raise ValueError(f"{path}: the pickle holds a {type(frame).__name__}, expected a pandas DataFrame")
    elif suffix == ".csv":
        try:
            _check_unique_columns(path, _csv_header(path))
            frame = pd.read_csv(path, dtype={"sample_id": str, "id": str, "split": str}, low_memory=False)
        except pd.errors.EmptyDataError:
            raise ValueError(f"{path}: empty file (expected a header row: prompt, one column per model, ...)") from None
        except UnicodeDecodeError:
            raise _not_utf8(path) from None
        except pd.errors.ParserError as exc:  # a ragged row or an unterminated quote
            raise ValueError(f"{path}: not a well-formed CSV file ({exc})") from None
    elif suffix == ".parquet":
        frame = pd.read_parquet(path)
    elif suffix == ".jsonl":
        frame = _read_jsonl(path)
    else:
        raise ValueError(f"{path}: unsupported file type {suffix!r}; accepted: {', '.join(SUFFIXES)}")
    _check_unique_columns(path, list(frame.columns))
    return frame


def _csv_header(path: Path) -> list[str]:
    """The header row as written (pandas renames a repeated name ``X`` to ``X.1``)."""
    with path.open("r", encoding="utf-8-sig", newline="") as handle:
        return next(csv.reader(handle), [])


def _check_unique_columns(path: Path, columns: Sequence[Any]) -> None:
    counts = Counter(str(c) for c in columns)
    repeated = [name for name, n in counts.items() if n > 1]
    if repeated:
        raise ValueError(
            f"{path}: duplicate column name(s) {repeated}; each column name must appear once (per model one score "
            "column '<model>' and one cost column '<model>|total_cost')"
        )


def _not_utf8(path: Path) -> ValueError:
    """The error for a text file that is not UTF-8, with the line and the first bad byte."""
    data = path.read_bytes()
    hint = " (it starts with a UTF-16 byte-order mark)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        return ValueError(f"{path}:{line}: the file is not UTF-8 text{hint}: byte 0x{data[exc.start]:02x} at byte "
                          f"{column} of line {line}; save it as UTF-8")
    return ValueError(f"{path}: the file is not UTF-8 text{hint}; save it as UTF-8")


class _Record(dict):
    """A JSON object with the keys it repeated (``json`` keeps the last value of a repeated key)."""

    repeated: list[str] = []


def _record(pairs: list[tuple[str, Any]]) -> dict:
    # a JSON "\ud800" escape gives a str no UTF-8 writer takes: as the proxy embeds it, U+FFFD for it
    pairs = [(k, valid_text(v) if isinstance(v, str) else v) for k, v in pairs]
    record = _Record(pairs)
    if len(record) != len(pairs):
        record.repeated = [k for k, n in Counter(k for k, _ in pairs).items() if n > 1]
    return record


def _read_jsonl(path: Path) -> pd.DataFrame:
    """The file's records as rows; ``frame.attrs["lines"]`` holds each row's line number in the file
    (blank lines are skipped, so row numbers are not line numbers)."""
    records, lines = [], []
    with path.open("rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            torn = not raw.endswith(b"\n")  # only the last line can lack its newline
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                if torn and exc.reason == "unexpected end of data":  # cut inside a multi-byte character
                    _warn_torn(path, lineno, "ends inside a UTF-8 character")
                    break
                raise ValueError(f"{path}:{lineno}: the file is not UTF-8 text: byte 0x{raw[exc.start]:02x} at byte "
                                 f"{exc.start + 1} of line {lineno}; save it as UTF-8") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line, object_pairs_hook=_record)
            except json.JSONDecodeError as exc:
                if torn:
                    _warn_torn(path, lineno, f"is not valid JSON ({exc.msg})")
                    break
                raise ValueError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: each line must be a JSON object (one record); got a "
                                 f"{type(record).__name__}: {line.strip()[:80]}")
            if isinstance(record, _Record) and record.repeated:
                raise ValueError(f"{path}:{lineno}: duplicate key(s) {record.repeated} in one record; each column "
                                 "name must appear once")
            records.append(record)
            lines.append(lineno)
    frame = pd.DataFrame.from_records(records)
    frame.attrs["lines"] = lines
    return frame


def _warn_torn(path: Path, lineno: int, what: str) -> None:
    warnings.warn(f"{path}:{lineno}: skipped the last line: it has no newline at its end and {what}, as a writer "
                  "stopped mid-line leaves it", RoutingLogWarning, stacklevel=5)


def files_sha256(paths: Iterable[str | Path]) -> str:
    """SHA-256 of the raw bytes of ``paths`` concatenated in path order.

    Same value as ``cat $(sorted paths) | sha256sum``, so anyone can check a manifest by hand."""
    digest = hashlib.sha256()
    for path in sorted({Path(p).as_posix() for p in paths}):
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def split_from_name(path: Path) -> str | None:
    """``x_train.csv`` / ``x-validation.jsonl`` / hub shards ``train-00000-of-00001.parquet``.

    The stem is cut at ``_ - .``; the *last* token names the split, or else the *first* one (hub
    shard names).  Tokens elsewhere (``my_test_logs.csv``) do not, to avoid accidental matches."""
    tokens = [t for t in re.split(r"[_\-.]", path.stem.lower()) if t]
    for token in (tokens[-1:] + tokens[:1]) if tokens else []:
        if token in SPLIT_ALIASES:
            return SPLIT_ALIASES[token]
    return None


def table_split(table: Table) -> tuple[np.ndarray | None, str]:
    """Per-row split from a ``split`` column (wins) or the file name; ``(None, "")`` when neither."""
    frame, path = table.frame, table.path
    if "split" in frame.columns:
        raw = frame["split"]
        norm = raw.astype("string").str.strip().str.lower().map(SPLIT_ALIASES)
        bad = sorted({str(v) for v, ok in zip(raw.tolist(), norm.notna().tolist()) if not ok})
        if bad:
            raise ValueError(
                f"{path}: column 'split' has values {bad[:5]}; allowed: {sorted(SPLIT_ALIASES)} (validation = val)"
            )
        return norm.to_numpy(dtype=object), "column"
    name = split_from_name(path)
    if name is None:
        return None, ""
    return np.full(len(frame), name, dtype=object), "files"


# --------------------------------------------------------------------------------------------
# cells
# --------------------------------------------------------------------------------------------
def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _turn(part: Any) -> Any:
    """A list item as ``turns_text`` takes it: strings and messages as they are, other scalars as text."""
    if isinstance(part, (str, dict)):
        return part
    return "" if _is_missing(part) else str(part)


def prompt_text(value: Any) -> str:
    """A prompt cell as text.

    Lists of turns (a Python/JSON list string ``"['...', '...']"`` as in RouterBench, a real list, or
    chat messages ``[{"role": ..., "content": ...}]``) become the text the proxy routes on for the
    same turns (``litellm_proteus.prompts.turns_text``: turns joined by a blank line); a string that
    does not parse as a list is kept verbatim."""
    if isinstance(value, str):
        stripped = value.strip()
        if not (stripped.startswith("[") and stripped.endswith("]")):
            return value
        try:
            parsed = ast.literal_eval(stripped)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            try:
                parsed = json.loads(stripped)
            except (ValueError, RecursionError):  # too deep for either parser: the text as written
                return value
        if not isinstance(parsed, (list, tuple)):
            return value
        value = parsed
    if isinstance(value, (list, tuple, np.ndarray)):
        return turns_text(_turn(p) for p in value)
    if isinstance(value, dict):
        return turns_text([value])
    return "" if _is_missing(value) else str(value)


def estimate_tokens(texts: Iterable[Any]) -> np.ndarray:
    """``ceil(chars / 4)`` per text (see module docstring); NaN where the text is missing."""
    lengths = pd.Series(list(texts), dtype=object).map(lambda t: np.nan if _is_missing(t) else len(str(t)))
    return np.ceil(lengths.to_numpy(dtype=np.float64) / CHARS_PER_TOKEN)


def response_tokens(column: pd.Series) -> np.ndarray:
    """Token estimate of a response column; list strings ``"['A']"`` count without the wrapper.

    (Parsing every response would be slow on the full RouterBench table; the 4 wrapper characters are
    all the parse would remove for a one-turn answer.)"""
    text = column.astype("string")
    lengths = text.str.len().astype("float64")
    wrapped = text.str.match(r"^\[['\"]").fillna(False) & text.str.contains(r"['\"]\]$").fillna(False)
    lengths = lengths - 4 * wrapped.astype("float64")
    return np.ceil(lengths.to_numpy(dtype=np.float64, na_value=np.nan) / CHARS_PER_TOKEN)


def numeric_column(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    try:
        return pd.to_numeric(frame[column], errors="raise").to_numpy(dtype=np.float64, na_value=np.nan)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{path}: column {column!r} must be numeric ({exc})") from None


def check_scores(scores: np.ndarray, models: Sequence[str], path: Path, what: str = "score") -> None:
    """Scores must lie in [0, 1] or be NaN (not run); name the column and row at fault (``inf`` included)."""
    for j, model in enumerate(models):
        col = scores[:, j]
        bad = ~np.isnan(col) & ~((col >= 0) & (col <= 1))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{path}: {what} column {model!r}, row {row}: {col[row]:g} is outside [0, 1] ({int(bad.sum())} such "
                "row(s)); allowed: a number in [0, 1], or empty where the model was not run"
            )


def sample_ids(frame: pd.DataFrame, path: Path) -> list[str]:
    """``sample_id`` (or ``id``) column as text; otherwise ``<file name>:<row>`` (unique per file)."""
    for column in ("sample_id", "id"):
        if column in frame.columns:
            return [f"{path.name}:{i}" if _is_missing(v) else str(v) for i, v in enumerate(frame[column].tolist())]
    return [f"{path.name}:{i}" for i in range(len(frame))]


def base_log(table: Table, models: list[str], scores: np.ndarray, costs: np.ndarray, *, task: list[str] | None,
             prompts: list[str], output_tokens: np.ndarray | None, input_tokens: np.ndarray, source: str) -> RoutingLog:
    """One table's log with ids and the split it declares (column or file name).

    Costs must be >= 0 (NaN: unknown, the row's cost is filled from the model's mean); empty
    prompts are kept (their scores still teach the heads) with a warning."""
    for j, model in enumerate(models):
        col = costs[:, j]
        bad = ~np.isnan(col) & ~(np.isfinite(col) & (col >= 0))
        if bad.any():
            raise ValueError(
                f"{table.path}: cost of model {model!r} must be a number >= 0 (USD per call) or empty for unknown; "
                f"row {int(np.flatnonzero(bad)[0])} has {col[bad][0]:g}"
            )
    empty = sum(1 for p in prompts if not p.strip())
    if empty:
        warnings.warn(f"{table.path}: {empty} row(s) have an empty prompt", RoutingLogWarning, stacklevel=3)
    split, method = table_split(table)
    return RoutingLog(
        prompts=prompts, scores=scores, costs=costs, models=list(models), task=task, split=split,
        sample_ids=sample_ids(table.frame, table.path), output_tokens=output_tokens,
        input_tokens=input_tokens, source=source, paths=[table.path.as_posix()], split_method=method,
    )


# --------------------------------------------------------------------------------------------
# concatenation and clean-up
# --------------------------------------------------------------------------------------------
def concat_logs(logs: Sequence[RoutingLog]) -> RoutingLog:
    """Row-wise concatenation.  Model sets must be equal (columns are re-ordered to the first log's
    order); a split must be known for all rows or none; missing tasks become ``""``."""
    if not logs:
        raise ValueError("no routing logs to concatenate")
    first = logs[0]
    models = list(first.models)
    for other in logs[1:]:
        if set(other.models) != set(models):
            raise ValueError(
                f"models differ between inputs: {first.paths[:1]} has {sorted(models)}, {other.paths[:1]} has "
                f"{sorted(other.models)} (only in the first: {sorted(set(models) - set(other.models))}, only in the "
                f"second: {sorted(set(other.models) - set(models))}); load them separately or align the model columns"
            )
    with_split = [lg for lg in logs if lg.split is not None]
    if with_split and len(with_split) != len(logs):
        missing = [p for lg in logs if lg.split is None for p in lg.paths]
        raise ValueError(
            f"a split is known for some inputs but not for {missing}; name every file *_train/*_val/*_test "
            "(or *_validation) or give every file a 'split' column, or neither"
        )

    def cols(lg: RoutingLog, arr: np.ndarray | None) -> np.ndarray:
        order = [lg.models.index(m) for m in models]
        if arr is None:
            return np.full((len(lg), len(models)), np.nan)
        return np.asarray(arr, dtype=np.float64)[:, order]

    any_task = any(lg.task is not None for lg in logs)
    any_out = any(lg.output_tokens is not None for lg in logs)
    methods = sorted({lg.split_method for lg in logs if lg.split_method})
    bandit = any(lg.logged_choice is not None for lg in logs)  # full-information rows: NaN / -1
    return RoutingLog(
        prompts=[p for lg in logs for p in lg.prompts],
        scores=np.concatenate([cols(lg, lg.scores) for lg in logs]),
        costs=np.concatenate([cols(lg, lg.costs) for lg in logs]),
        models=models,
        task=[t for lg in logs for t in (lg.task or [""] * len(lg))] if any_task else None,
        split=np.concatenate([lg.split for lg in logs]) if with_split else None,
        sample_ids=[s for lg in logs for s in (lg.sample_ids or [f"{lg.paths[0]}:{i}" for i in range(len(lg))])],
        output_tokens=np.concatenate([cols(lg, lg.output_tokens) for lg in logs]) if any_out else None,
        input_tokens=np.concatenate(
            [np.full(len(lg), np.nan) if lg.input_tokens is None else np.asarray(lg.input_tokens, float) for lg in logs]
        ),
        source="+".join(dict.fromkeys(lg.source for lg in logs if lg.source)),
        paths=sorted({p for lg in logs for p in lg.paths}),
        split_method="+".join(methods),
        propensity=np.concatenate([np.full(len(lg), np.nan) if lg.propensity is None else lg.propensity
                                   for lg in logs]) if bandit else None,
        logged_choice=np.concatenate([np.full(len(lg), -1) if lg.logged_choice is None else lg.logged_choice
                                      for lg in logs]) if bandit else None,
        logged_tau=np.concatenate([np.full(len(lg), np.nan) if lg.logged_tau is None else lg.logged_tau
                                   for lg in logs]) if bandit else None,
        inclusion=np.concatenate([cols(lg, lg.inclusion) for lg in logs])
        if any(lg.inclusion is not None for lg in logs) else None,
        provenance={k: v for lg in logs for k, v in lg.provenance.items()},
    )


# Which copy of a duplicated id survives: the most held-out split first (no leakage into test).
_SPLIT_PRIORITY = {"test": 0, "val": 1, "train": 2}
_PRIORITY_SPLIT = {v: k for k, v in _SPLIT_PRIORITY.items()}


def clean_log(log: RoutingLog) -> RoutingLog:
    """The loaders' policy for defective rows, with one warning that gives the counts.

    1. Rows whose score is NaN for every model are dropped (nothing to learn or evaluate).
    2. Rows with some NaN scores are kept; the NaN cells are masked in training and evaluation.
    3. Duplicate ``sample_id``: one row per id survives.  Its content is the copy with the most
       observed scores (then the first in (sorted path, row) order) -- in RouterBench-partial the
       other copies are defective (doubled prompt, one model scored) -- and it is placed in the most
       held-out split any copy had (test > val > train), so an id in both train and test files
       stays only in test: no leakage, and the test set keeps its size.
    4. The same prompt text under different ids in more than one split: kept, with a warning giving
       the count (``warn_prompts_across_splits``).
    5. A model with no cost in any row, or (full-information logs) no score in any row, is an error
       naming it (``check_models``): its cost or its head would be invented.
    """
    n0 = len(log)
    observed = np.isfinite(log.scores)
    n_obs = observed.sum(axis=1)
    keep = n_obs > 0
    n_all_nan = int((~keep).sum())
    partial = keep & (n_obs < len(log.models))
    notes: list[str] = [f"dropped {n_all_nan} rows with no observed score (NaN for every model)"]

    n_dup_rows = n_dup_ids = n_cross = 0
    if log.sample_ids is not None:
        ids = pd.Series(log.sample_ids, dtype=object)
        dup_mask = ids.duplicated(keep=False).to_numpy() & keep
        if dup_mask.any():
            split = log.split if log.split is not None else np.full(n0, None, dtype=object)
            frame = pd.DataFrame({
                "id": ids.to_numpy(), "prio": [_SPLIT_PRIORITY.get(s, 3) for s in split],
                "neg_obs": -n_obs, "pos": np.arange(n0),
            })[keep]
            frame = frame[frame["id"].duplicated(keep=False)]
            winners = frame.sort_values(["id", "neg_obs", "pos"], kind="stable").drop_duplicates("id")
            losers = np.setdiff1d(frame["pos"].to_numpy(), winners["pos"].to_numpy())
            keep[losers] = False
            if log.split is not None:
                held_out = frame.groupby("id")["prio"].min()
                new_split = log.split.copy()
                for row_id, pos in zip(winners["id"], winners["pos"]):
                    new_split[pos] = _PRIORITY_SPLIT.get(held_out[row_id], new_split[pos])
                log = replace(log, split=new_split)
            n_dup_rows, n_dup_ids = len(losers), len(winners)
            n_cross = int((frame.groupby("id")["prio"].nunique() > 1).sum())
            prompts = pd.Series([log.prompts[p].strip() for p in frame["pos"]], index=frame.index)
            n_differ = int((prompts.groupby(frame["id"]).nunique() > 1).sum())
            notes.append(
                f"{n_dup_rows + n_dup_ids} rows share {n_dup_ids} duplicated sample_ids: kept one row per id, dropped "
                f"{n_dup_rows} ({n_cross} ids appear in more than one split: kept the most complete copy in the test/val split, no leakage)"
                + (f"; {n_differ} of these ids name different prompts in their copies: if ids restart in each file, make "
                   "them unique (e.g. prefix the file name) or drop the id column, or those rows are lost" if n_differ else "")
            )
    n_partial = int((partial & keep).sum())
    if n_partial:
        cells = int((~observed[partial & keep]).sum())
        notes.append(f"kept {n_partial} rows with partially missing scores ({cells} NaN cells, masked in training)")
    if not keep.all():  # partial NaN alone is normal (e.g. logs of a live router) and not worth a warning
        where = ", ".join(Path(p).name for p in log.paths[:4]) + (" ..." if len(log.paths) > 4 else "")
        warnings.warn(f"{log.source or 'routing log'} ({where}): {n0} rows -> {int(keep.sum())}; " + "; ".join(notes),
                      RoutingLogWarning, stacklevel=3)
    cleaned = log if keep.all() else log.subset(np.flatnonzero(keep))
    check_models(cleaned)
    warn_prompts_across_splits(cleaned)
    return cleaned


def _where(log: RoutingLog) -> str:
    return ", ".join(log.paths[:3]) + (f" and {len(log.paths) - 3} more" if len(log.paths) > 3 else "")


def check_models(log: RoutingLog) -> None:
    """Every model needs a logged cost in some row (empty cells take the mean of that model's own
    costs; with none there is nothing to take it from) and, in a full-information log, a score in
    some row (otherwise its slot gets an untrained head that is still routed to).  In a decision log
    (bandit feedback) a slot that was a candidate but never chosen has no score: that is allowed."""
    wide = "routerbench" in log.source.split("+")
    if log.logged_choice is None:
        for j, model in enumerate(log.models):
            if not np.isfinite(log.scores[:, j]).any():
                column = f"column {model!r} is empty in every row" if wide else "no score in any row"
                raise ValueError(
                    f"{_where(log)}: model {model!r} has no observed score ({column}); it would get a routing slot "
                    "with an untrained head. Give it scores in [0, 1] in at least some rows, or remove its columns"
                    + (f" {model!r} and {model + '|total_cost'!r}" if wide else "")
                )
    for j, model in enumerate(log.models):
        if not np.isfinite(log.costs[:, j]).any():
            what = (f"column {model + '|total_cost'!r} is empty in every row" if wide
                    else f"model {model!r} has no cost in any row")
            raise ValueError(
                f"{_where(log)}: {what}; the model's cost per call is needed to route. Allowed: a cost >= 0 (USD "
                "per call) in at least some rows (an empty cell takes the mean of that model's own costs)"
                + (f", or remove the columns {model!r} and {model + '|total_cost'!r}" if wide else "")
            )


def warn_prompts_across_splits(log: RoutingLog, fix: str = "Keep one row per prompt, or give every copy of a "
                                                             "prompt the same split") -> None:
    """Warn when one prompt text (non-empty) sits in more than one split: its val/test rows then
    measure a prompt the heads trained on.  Kept as the source declares them (splits are honoured);
    the warning gives the count and ``fix``."""
    if log.split is None:
        return
    frame = pd.DataFrame({"prompt": log.prompts, "split": np.asarray(log.split, dtype=object)})
    frame = frame[frame["prompt"].str.strip() != ""]
    per_prompt = frame.groupby("prompt", sort=False)["split"].unique()
    shared = per_prompt[per_prompt.map(len) > 1]
    if shared.empty:
        return
    rows = int(frame["prompt"].isin(shared.index).sum())
    example, splits = next(iter(shared.items()))
    shown = example if len(example) <= 60 else example[:57] + "..."
    warnings.warn(
        f"{_where(log)}: {len(shared)} prompt(s) appear in more than one split ({rows} rows; e.g. {shown!r} in "
        f"{sorted(splits)}): val/test rows whose prompt is also trained on overstate accuracy. {fix}",
        RoutingLogWarning, stacklevel=4,
    )


@dataclass
class LoadOptions:
    """Options that only some formats use (see ``load_logs``)."""

    prices: dict[str, tuple[float, float]]
    skip_contaminated: bool = False
    # contaminated_prompts.jsonl files named explicitly: applied even without skip_contaminated, so that
    # re-loading a log's recorded ``paths`` reproduces it
    contamination_files: list[Path] = field(default_factory=list)
    validation_share: float | None = None  # decision logs: the prompts split off as val (None: the reader's default)


def require_columns(table: Table, columns: Sequence[str], fmt: str) -> None:
    missing = [c for c in columns if c not in table.frame.columns]
    if missing:
        raise ValueError(
            f"{table.path}: missing column {missing[0]!r} for format {fmt!r} (columns present: "
            f"{[str(c) for c in table.frame.columns][:12]}); accepted formats: auto, {', '.join(FORMATS)}"
        )


def text_column(frame: pd.DataFrame, column: str) -> list[str]:
    return ["" if _is_missing(v) else str(v) for v in frame[column].tolist()]
