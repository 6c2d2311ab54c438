"""``load_logs``: every supported routing-log source -> one ``RoutingLog``.

Inputs are files or directories (every ``.pkl`` / ``.pickle`` / ``.csv`` / ``.parquet`` / ``.jsonl``
below them, recursively).  ``format="auto"`` recognises each file by its columns:

* ``routerbench`` -- a ``<model>|total_cost`` column (see ``routerbench``);
* ``sprout``      -- ``<model>|score`` columns or struct columns with a ``score`` field (``sprout``);
* ``routellm``    -- ``prompt`` plus True/False columns (``routellm``);
* ``decision-log`` -- the proxy's decision log: ``schema`` / ``type`` / ``call_id`` (``decision_log``).

Files found in a directory that match no format (e.g. GSM8K's plain ``train.jsonl`` or MT-Bench's
judgements beside the RouteLLM CSVs) are skipped with a warning; a file named explicitly must load.
All parts are concatenated (the model sets must agree), then cleaned once (``common.clean_log``:
all-NaN rows dropped, one row per duplicated ``sample_id``, with a warning giving the counts; a
prompt in more than one declared split warned about; a model with no cost, or no score, in any row
an error naming it).
``sha256`` = SHA-256 of the raw bytes of every file used, concatenated in path order.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import decision_log, routellm, routerbench, sprout
from .common import (FORMATS, LoadOptions, RoutingLogWarning, Table, clean_log, concat_logs, files_sha256,
                     read_table, resolve_files)
from .logs import RoutingLog
from .prices import price_table

LOADERS = {"decision-log": decision_log, "routerbench": routerbench, "sprout": sprout, "routellm": routellm}  # detection order


def detect_format(frame) -> str | None:
    for name, module in LOADERS.items():
        if module.detect(frame):
            return name
    return None


def _unknown(path: Path, frame) -> ValueError:
    return ValueError(
        f"{path}: cannot tell the routing-log format from its columns {[str(c) for c in frame.columns][:12]}; "
        "expected RouterBench wide ('<model>' + '<model>|total_cost'), SPROUT ('<model>' structs with 'score' or "
        "'<model>|score'), RouteLLM ('prompt' + one True/False column per model) or a decision log ('schema', 'type', 'call_id'); pass format= one of "
        f"auto, {', '.join(FORMATS)}"
    )


def load_logs(
    paths: Sequence[str | Path] | str | Path,
    *,
    format: str = "auto",  # noqa: A002 - the public name the trainer and CLI use
    prices: Mapping[str, Any] | None = None,
    seed: int = 0,
    skip_contaminated: bool = False,
    validation_share: float | None = None,
) -> RoutingLog:
    """Load and concatenate routing logs.

    format: ``auto`` (per file, by columns) or one of ``routerbench``, ``sprout``, ``routellm``.
    prices: USD per 1M input/output tokens per model, merged over ``prices.DEFAULT_PRICES``; used by
        formats without logged costs (SPROUT, RouteLLM).
    seed: accepted for symmetry with ``assign_splits``; loading itself is deterministic (no sampling).
    skip_contaminated: RouteLLM only, drop prompts listed in ``contaminated_prompts.jsonl``.
    validation_share: decision logs only, the share of their prompts split off as val (by prompt
        hash; None: ``decision_log.VALIDATION_SHARE``).

    The returned log keeps the splits the source declares (column / file names) or none; call
    ``assign_splits`` for the final train/val/test.
    """
    del seed
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"format={format!r} is not supported; accepted: auto, {', '.join(FORMATS)}")
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise ValueError("no routing-log paths given")
    options = LoadOptions(prices=price_table(prices), skip_contaminated=skip_contaminated,
                          validation_share=validation_share)

    groups: dict[str, list[Table]] = {}
    skipped: dict[str, str | None] = {}  # path -> the format it is (None: none recognised)
    for path, from_dir in resolve_files(paths):
        frame = read_table(path)
        if routellm.is_auxiliary(frame):
            if not from_dir:  # named explicitly: apply it (see LoadOptions)
                options.contamination_files.append(path)
            continue  # otherwise found by the RouteLLM loader itself when skip_contaminated
        name = detect_format(frame) if format == "auto" else (format if LOADERS[format].detect(frame) else None)
        if name is None:
            if from_dir:
                skipped[path.as_posix()] = detect_format(frame) if format != "auto" else None
                continue
            if format == "auto":
                raise _unknown(path, frame)
            name = format  # let the loader name the missing column
        groups.setdefault(name, []).append(Table(path, frame, from_dir))
    if skipped:
        warnings.warn(f"skipped {len(skipped)} file(s) that are not {format if format != 'auto' else 'routing'} logs: "
                      f"{list(skipped)}", RoutingLogWarning, stacklevel=2)
    if not groups:
        if skipped and format != "auto":  # files were there, of another format than the one asked for
            others = sorted({name or "unrecognised" for name in skipped.values()})
            raise ValueError(f"no {format} files in {[str(p) for p in paths]}: its {len(skipped)} file(s) are "
                             f"{', '.join(others)} logs; pass --format auto (the default), or {format} files")
        raise ValueError(f"no routing logs found in {[str(p) for p in paths]} (supported files: "
                         ".pkl/.pickle/.csv/.parquet/.jsonl with a recognised format)")

    parts = []
    for name, tables in groups.items():  # a loop, not a comprehension: warnings' stacklevel must reach the caller
        parts.append(LOADERS[name].load(tables, options))
    log = concat_logs(parts)
    if len(log.models) < 2:
        raise ValueError(
            f"{[str(p) for p in paths]}: found {len(log.models)} model(s) {log.models}; routing needs at least 2 "
            "(wide format: a score column per model and its cost column '<model>|total_cost')"
        )
    log = clean_log(log)
    log.sha256 = files_sha256(log.paths)
    return log
