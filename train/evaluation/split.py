"""``Split``: one split of a routing log as the routers see it (embeddings, outcomes, costs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Split:
    """One split as the routers see it."""

    emb: np.ndarray  # [N, D] float32 sentence embeddings
    scores: np.ndarray  # [N, K] outcome in [0, 1]; NaN = not observed
    costs: np.ndarray  # [N, K] USD per call (no NaN: filled before)
    draws: np.ndarray | None = None  # [N] the prompts' mixing draws (litellm_proteus.predictor.mixing_draw)
    prompts: np.ndarray | None = None  # [N] prompt texts (object array), for routers that read the text

    def __post_init__(self) -> None:
        self.emb = np.asarray(self.emb, dtype=np.float32)
        self.scores = np.asarray(self.scores, dtype=np.float64)
        self.costs = np.asarray(self.costs, dtype=np.float64)
        if not (len(self.emb) == len(self.scores) == len(self.costs)):
            raise ValueError("emb, scores and costs must have the same number of rows")
        if self.draws is not None and len(self.draws) != len(self.emb):
            raise ValueError("draws must have one entry per row")
        if self.prompts is not None and len(self.prompts) != len(self.emb):
            raise ValueError("prompts must have one entry per row")
        if self.scores.shape != self.costs.shape:
            raise ValueError(f"scores {self.scores.shape} and costs {self.costs.shape} must have the same shape")
        if not np.isfinite(self.costs).all():
            raise ValueError("costs must be finite (fill missing costs first)")

    def __len__(self) -> int:
        return len(self.emb)

    def take(self, rows: np.ndarray | slice) -> "Split":
        """These rows (repeats allowed)."""
        pick = lambda x: None if x is None else x[rows]  # noqa: E731
        return Split(self.emb[rows], self.scores[rows], self.costs[rows], pick(self.draws), pick(self.prompts))

    @property
    def n_models(self) -> int:
        return self.scores.shape[1]
