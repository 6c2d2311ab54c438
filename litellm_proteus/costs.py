"""Cost normalisation: USD per call -> c_hat in [0, 1], identical in training and at inference.

The paper normalises costs "online using exponential moving average of percentile-based bounds".
Our choices, where it is silent:
- ``space``: ``usd_per_call`` (default, the paper's literal reading: linear in dollars) or
  ``log10_usd_per_call`` (bounds and values on log10 cost).  Measured on RouterBench-partial, the
  log scale over-penalises the good cheap models against the cheapest ones and under-penalises
  GPT-4 in dollar terms: PROTEUS paid ~3x CARROT-Balanced's cost for the same accuracy;
- percentiles 5 and 95 of the costs seen in a batch, EMA momentum 0.9 per batch;
- c_hat = clip((f(c) - low) / (high - low), 0, 1) with f the identity or log10.
The final bounds are stored in the artifact, so a live price at inference is normalised exactly as
the training costs were; a price change in the proxy config moves c_hat without retraining.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# Free deployments (local models) still need a finite log-cost.
MIN_COST_USD = 1e-9


SPACES = ("usd_per_call", "log10_usd_per_call")


@dataclass
class CostNormalizer:
    space: str = "usd_per_call"  # the trainer's default (TrainConfig.cost_space)
    low: float = float("nan")
    high: float = float("nan")
    lower_percentile: float = 5.0
    upper_percentile: float = 95.0
    momentum: float = 0.9

    @property
    def initialised(self) -> bool:
        return bool(np.isfinite(self.low) and np.isfinite(self.high))

    def __post_init__(self) -> None:
        if self.space not in SPACES:
            raise ValueError(f"cost_normalization.space must be one of {SPACES}; got {self.space!r}")

    def transform(self, costs_usd: Any) -> np.ndarray:
        costs = np.maximum(np.asarray(costs_usd, dtype=np.float64), MIN_COST_USD)
        return np.log10(costs) if self.space == "log10_usd_per_call" else costs

    def update(self, costs_usd: Any) -> None:
        """EMA-update the bounds with one batch of observed per-call costs (NaN ignored)."""
        logs = self.transform(costs_usd)
        logs = logs[np.isfinite(logs)]
        if logs.size == 0:
            return
        lo, hi = np.percentile(logs, [self.lower_percentile, self.upper_percentile])
        if not self.initialised:
            self.low, self.high = float(lo), float(hi)
        else:
            self.low = self.momentum * self.low + (1 - self.momentum) * float(lo)
            self.high = self.momentum * self.high + (1 - self.momentum) * float(hi)

    def normalize(self, costs_usd: Any) -> np.ndarray:
        if not self.initialised:
            raise RuntimeError("CostNormalizer used before any update(): bounds unknown")
        span = max(self.high - self.low, 1e-12)
        return np.clip((self.transform(costs_usd) - self.low) / span, 0.0, 1.0).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CostNormalizer":
        fields = {k: float(v) for k, v in data.items() if k != "space"}
        norm = cls(space=data.get("space"), **fields)  # type: ignore[arg-type]
        if not norm.initialised:
            raise ValueError("cost_normalization.low/high must be finite numbers")
        return norm
