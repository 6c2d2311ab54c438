"""One in-memory form for every source of routing logs."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

SPLITS = ("train", "val", "test")


@dataclass
class RoutingLog:
    """Per-query outcomes of K models.

    prompts:  N query texts.
    scores:   [N, K] float in [0, 1]; NaN = that model was not observed on that query.
    costs:    [N, K] USD per call; NaN = unknown.
    models:   K model names (column order of scores/costs).
    task:     optional per-row task name (RouterBench ``eval_name``, SPROUT ``dataset``...).
    split:    optional per-row "train" / "val" / "test" (None until assigned).
    sample_ids: optional per-row id from the source.
    output_tokens: optional [N, K] output token counts (to estimate costs from live prices).
    input_tokens:  optional [N] prompt token counts.
    source / paths / sha256: provenance, recorded in the artifact manifest.
    propensity:    optional [N] probability with which the logging router chose ``logged_choice``
                   (bandit feedback from a decision log; NaN = a full-information row).
    logged_choice: optional [N] slot index the logging router chose (-1 = full-information row).
    logged_tau:    optional [N] tau the logging router routed at (tau_effective; NaN = unknown).
    inclusion:     optional [N, K] probability that a full-information row scored each model, given how
                   it was drawn (a shadow row: 1 for the served model, its ``call_share`` for the others;
                   NaN or None = every score drawn at random, as in a full-information log).
    provenance:    optional facts about the source recorded in the manifest (log dates, counts).
    """

    prompts: list[str]
    scores: np.ndarray
    costs: np.ndarray
    models: list[str]
    task: list[str] | None = None
    split: np.ndarray | None = None
    sample_ids: list[str] | None = None
    output_tokens: np.ndarray | None = None
    input_tokens: np.ndarray | None = None
    source: str = ""
    paths: list[str] = field(default_factory=list)
    sha256: str = ""
    split_method: str = ""
    propensity: np.ndarray | None = None
    logged_choice: np.ndarray | None = None
    logged_tau: np.ndarray | None = None
    inclusion: np.ndarray | None = None
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n, k = len(self.prompts), len(self.models)
        self.scores = np.asarray(self.scores, dtype=np.float64)
        self.costs = np.asarray(self.costs, dtype=np.float64)
        if self.inclusion is not None:
            self.inclusion = np.asarray(self.inclusion, dtype=np.float64)
        for name in ("scores", "costs", "inclusion"):
            arr = getattr(self, name)
            if arr is not None and arr.shape != (n, k):
                raise ValueError(f"{name} has shape {arr.shape}, expected ({n}, {k}) = (prompts, models)")
        finite = self.scores[np.isfinite(self.scores)]
        if finite.size and (finite.min() < 0 or finite.max() > 1):
            raise ValueError("scores must lie in [0, 1] (NaN = not observed)")
        if len(set(self.models)) != k:
            raise ValueError(f"models must be unique; got {self.models}")
        for name in ("propensity", "logged_choice", "logged_tau"):
            if getattr(self, name) is not None and len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} rows, expected {n}")
        if self.split is not None:
            self.split = np.asarray(self.split, dtype=object)
            bad = sorted(set(self.split.tolist()) - set(SPLITS))
            if bad:
                raise ValueError(f"split values must be one of {SPLITS}; got {bad}")

    def __len__(self) -> int:
        return len(self.prompts)

    def subset(self, index: Sequence[int] | np.ndarray) -> "RoutingLog":
        idx = np.asarray(index)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        pick = lambda seq: None if seq is None else [seq[i] for i in idx]  # noqa: E731
        arr = lambda a: None if a is None else a[idx]  # noqa: E731
        return replace(
            self,
            prompts=[self.prompts[i] for i in idx],
            scores=self.scores[idx],
            costs=self.costs[idx],
            task=pick(self.task),
            split=arr(self.split),
            sample_ids=pick(self.sample_ids),
            output_tokens=arr(self.output_tokens),
            input_tokens=arr(self.input_tokens),
            propensity=arr(self.propensity),
            logged_choice=arr(self.logged_choice),
            logged_tau=arr(self.logged_tau),
            inclusion=arr(self.inclusion),
        )

    @property
    def bandit(self) -> bool:
        """Some rows hold bandit feedback (one logged choice with a propensity)."""
        return self.logged_choice is not None and bool((self.logged_choice >= 0).any())

    def with_models(self, models: Sequence[str]) -> "RoutingLog":
        """The same rows with columns in ``models`` order; models the log lacks become NaN columns
        (never observed, unknown cost).  Every model of the log must be in ``models``."""
        extra = [m for m in self.models if m not in models]
        if extra:
            raise ValueError(f"models {extra} of the log are not among {list(models)}")
        cols = lambda a: None if a is None else np.column_stack([  # noqa: E731
            a[:, self.models.index(m)] if m in self.models else np.full(len(self), np.nan) for m in models])
        choice = None
        if self.logged_choice is not None:
            remap = np.array([list(models).index(m) for m in self.models] + [-1])
            choice = remap[self.logged_choice]  # -1 stays -1 (full-information rows)
        return replace(self, scores=cols(self.scores), costs=cols(self.costs), models=list(models),
                       output_tokens=cols(self.output_tokens), logged_choice=choice, inclusion=cols(self.inclusion))

    def part(self, name: str) -> "RoutingLog":
        if self.split is None:
            raise ValueError("this log has no split assigned (see train.data.splits.assign_splits)")
        return self.subset(self.split == name)

    def content_hash(self) -> str:
        """SHA-256 over prompts, scores, costs and model names (independent of file format)."""
        digest = hashlib.sha256()
        digest.update("\x1f".join(self.models).encode())
        for prompt in self.prompts:
            digest.update(prompt.encode("utf-8"))
            digest.update(b"\x1e")
        digest.update(np.nan_to_num(self.scores, nan=-1.0).tobytes())
        digest.update(np.nan_to_num(self.costs, nan=-1.0).tobytes())
        return digest.hexdigest()
