"""Train / val / test assignment.

Policy (``assign_splits``):

* Splits given by the source (a ``split`` column or ``*_train`` / ``*_val`` / ``*_validation`` /
  ``*_test`` file names, see ``common.split_from_name``) are honoured as they are.
* A missing val (or test) part is carved out of train, seeded: ``round(ratio x all rows)`` rows, so
  with train/test files val is 15% of *all* rows, taken from train
  (``files:train/test+val-from-train(seed=0)``).  Without a train part nothing is carved.
* Without any source split: a seeded 70/15/15 split (``random:70/15/15(seed=0,by-task)``).
* Whenever rows are drawn and the log has tasks, the draw is stratified by task: each task gives
  its proportional share (largest remainder, so totals are exact).

Deterministic for a given log (row order) and seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from .common import warn_prompts_across_splits
from .logs import RoutingLog

DEFAULT_RATIOS = (0.7, 0.15, 0.15)


def _check_ratios(ratios: Sequence[float]) -> tuple[float, float, float]:
    values = tuple(float(r) for r in ratios)
    if len(values) != 3 or any(not math.isfinite(r) or r < 0 for r in values) or abs(sum(values) - 1) > 1e-6 \
            or values[0] <= 0:
        raise ValueError(f"ratios must be three non-negative numbers (train > 0, val, test) summing to 1; got {ratios}")
    return values  # type: ignore[return-value]


def stratified_take(rows: np.ndarray, groups: np.ndarray | None, n: int, rng: np.random.Generator) -> np.ndarray:
    """Exactly ``n`` of ``rows``, each group contributing its proportional share (largest remainder)."""
    if n <= 0:
        return np.empty(0, dtype=np.int64)
    if groups is None:
        return np.sort(rng.permutation(rows)[:n])
    names, inverse = np.unique(groups[rows].astype(str), return_inverse=True)
    sizes = np.bincount(inverse, minlength=len(names))
    quota = n * sizes / len(rows)
    counts = np.floor(quota).astype(np.int64)
    remainder = quota - counts
    # the groups with the largest remainders get one more row; ties broken at random
    extra = np.lexsort((rng.random(len(names)), -remainder))[: n - int(counts.sum())]
    counts[extra] += 1
    picked = [rng.permutation(rows[inverse == g])[: counts[g]] for g in range(len(names))]
    return np.sort(np.concatenate(picked))


def assign_splits(log: RoutingLog, *, seed: int = 0, ratios: Sequence[float] = DEFAULT_RATIOS) -> RoutingLog:
    """A copy of ``log`` with ``split`` (train/val/test per row) and ``split_method`` set."""
    _, r_val, r_test = _check_ratios(ratios)
    n = len(log)
    rng = np.random.default_rng(seed)
    groups = np.asarray(log.task, dtype=object) if log.task is not None else None
    if log.split is None:
        split = np.full(n, "train", dtype=object)
        origin, present = "random", set()
    else:
        split = np.asarray(log.split, dtype=object).copy()
        origin = log.split_method or "given"
        present = set(split.tolist())
        if ":" in origin and {"train", "val", "test"} <= present:
            return replace(log, split=split)  # already assigned (e.g. assign_splits run twice)

    carved = []
    for name, ratio in (("val", r_val), ("test", r_test)):
        if name in present or "train" not in set(split.tolist()) or ratio == 0:
            continue
        train_rows = np.flatnonzero(split == "train")
        want = round(ratio * n)
        if want >= len(train_rows):
            raise ValueError(f"cannot carve {want} {name} rows ({ratio:.0%} of {n}) out of {len(train_rows)} train rows")
        split[stratified_take(train_rows, groups, want, rng)] = name
        carved.append(name)

    if carved:  # rows are carved one by one: copies of a prompt may land on both sides
        in_carved = {log.prompts[i] for i in np.flatnonzero(np.isin(split, carved))}
        rows = [i for i, prompt in enumerate(log.prompts) if prompt in in_carved]  # (declared splits warned on load)
        warn_prompts_across_splits(replace(log, split=split).subset(rows), f"The {'/'.join(carved)} rows were carved by "
                                   "row: keep one row per prompt, or declare the splits (a split column or "
                                   "*_train/*_val/*_test files)")
    by_task = ",by-task" if groups is not None and carved else ""
    if origin == "random":
        pct = "/".join(f"{r * 100:g}" for r in _check_ratios(ratios))
        method = f"random:{pct}(seed={seed}{by_task})"
    else:
        method = f"{origin}:" + "/".join(s for s in ("train", "val", "test") if s in present)
        if carved:
            method += f"+{','.join(carved)}-from-train(seed={seed}{by_task})"
    return replace(log, split=split, split_method=method)
