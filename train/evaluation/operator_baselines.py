"""The baselines an operator sets up in an afternoon, tuned per tau like PROTEUS's calibration.

- ``Single-Model``: for each tau, the cheapest model (mean validation cost) whose validation
  accuracy reaches tau + the artifact's calibration margin; none does: the most accurate one.
- ``LiteLLM-Complexity``: LiteLLM's complexity router (``complexity_classifier.py``: its rule-based
  classifier through a real ``litellm.Router``, no network) with the tier -> model ladder and the
  ``tier_boundaries`` knob chosen on train + validation: for each boundary setting (LiteLLM's
  default, and boundaries at quantiles of the train + validation scores, which spread the prompts
  over the four tiers), the ladders on the lower (cost, accuracy) hull (``calibration.group_ladders``);
  for each tau, the cheapest (setting, ladder) whose train + validation accuracy reaches tau + the
  margin, else the most accurate.  Its classification time per prompt is measured on validation
  prompts (``classify_ms``; no encoder, so no RPI latency).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..calibration import group_ladders
from .baselines import FitContext, Assignment, Router, Split
from .complexity_classifier import TIERS, ComplexityClassifier

FIT_TRAIN_ROWS = 3000  # train rows classified for the ladder choice (classification is ~1-3 ms a prompt)
LATENCY_PROMPTS = 200
BOUNDARY_QUANTILES: tuple[tuple[float, float, float], ...] = ((0.25, 0.5, 0.75), (0.5, 0.75, 0.9), (0.1, 0.3, 0.6))


def _pick_per_tau(tau: np.ndarray, accuracy: np.ndarray, cost: np.ndarray, margin: float) -> np.ndarray:
    """Per tau: the index of the cheapest option whose accuracy reaches tau + margin, else the most accurate."""
    meets = accuracy[None, :] >= tau[:, None] + margin - 1e-12
    cheapest = np.where(meets, cost[None, :], np.inf).argmin(axis=1)
    return np.where(meets.any(axis=1), cheapest, int(np.argmax(accuracy)))


class SingleModelRouter(Router):
    name = "Single-Model"
    tau_capable = True
    per_query_tau = True
    has_latency = False

    def fit(self, ctx: FitContext) -> "SingleModelRouter":
        self.accuracy = np.nanmean(ctx.val.scores, axis=0)
        self.cost = ctx.val.costs.mean(axis=0)
        self.margin = ctx.margin
        return self

    def model_for(self, tau: float | np.ndarray) -> np.ndarray:
        return _pick_per_tau(np.atleast_1d(np.asarray(tau, dtype=np.float64)), self.accuracy, self.cost, self.margin)

    def route(self, emb, costs, tau=None):
        if tau is None:
            raise ValueError(f"{self.name} needs tau")
        models = np.broadcast_to(self.model_for(tau), (len(costs),))
        return Assignment(models.astype(np.int64), knob=float(models[0]) if np.ndim(tau) == 0 and len(models) else None)

    def validated_top(self) -> float:
        return float(self.accuracy.max() - self.margin)


@dataclass
class Ladder:
    setting: int  # index into the router's classifiers
    slots: list[int]  # model per tier
    accuracy: float  # on the train + validation rows it was chosen on
    cost_usd: float


class LiteLLMComplexityRouter(Router):
    name = "LiteLLM-Complexity"
    tau_capable = True
    per_query_tau = True
    has_latency = False

    def fit(self, ctx: FitContext) -> "LiteLLMComplexityRouter":
        if ctx.train.prompts is None or ctx.val.prompts is None:
            raise ValueError(f"{self.name} needs the splits' prompt texts")
        rng = np.random.default_rng(ctx.seed)
        observed = np.flatnonzero(np.isfinite(ctx.train.scores).all(axis=1))
        train = ctx.train.take(np.sort(rng.permutation(observed)[:FIT_TRAIN_ROWS]))
        prompts = list(train.prompts) + list(ctx.val.prompts)
        scores = np.concatenate([train.scores, ctx.val.scores])
        costs = np.concatenate([train.costs, ctx.val.costs])
        default = ComplexityClassifier()
        self.classify_ms = default.latency_ms(list(ctx.val.prompts[:LATENCY_PROMPTS]))
        _, weighted = default.classify(prompts)
        self.classifiers = [default]
        for q in BOUNDARY_QUANTILES:
            cut = np.quantile(weighted, q) + 1e-6
            if np.all(np.diff(cut) > 1e-9) and not any(np.allclose(cut, c.boundaries) for c in self.classifiers):
                self.classifiers.append(ComplexityClassifier(cut))
        self.ladders: list[Ladder] = []
        rows = np.arange(len(prompts))
        for setting, classifier in enumerate(self.classifiers):
            tiers, _ = classifier.classify(prompts)
            for slots in group_ladders(tiers, len(TIERS), scores, costs):
                choice = np.asarray(slots)[tiers]
                acc = float(np.nan_to_num(scores, nan=0.0)[rows, choice].mean())
                self.ladders.append(Ladder(setting, slots, acc, float(costs[rows, choice].mean())))
        self.accuracy = np.array([ladder.accuracy for ladder in self.ladders])
        self.cost = np.array([ladder.cost_usd for ladder in self.ladders])
        self.margin = ctx.margin
        return self

    def route(self, emb, costs, tau=None):
        raise ValueError(f"{self.name} classifies prompt texts: route a Split that has them (route_split)")

    def route_split(self, split: Split, tau=None) -> Assignment:
        if tau is None or split.prompts is None:
            raise ValueError(f"{self.name} needs tau and the split's prompt texts")
        taus = np.broadcast_to(np.asarray(tau, dtype=np.float64), (len(split),))
        picks = _pick_per_tau(taus, self.accuracy, self.cost, self.margin)
        choice = np.empty(len(split), dtype=np.int64)
        for pick in np.unique(picks):
            rows = np.flatnonzero(picks == pick)
            ladder = self.ladders[pick]
            tiers, _ = self.classifiers[ladder.setting].classify(list(split.prompts[rows]))
            choice[rows] = np.asarray(ladder.slots)[tiers]
        return Assignment(choice, knob=float(picks[0]) if np.ndim(tau) == 0 and len(picks) else None)

    def validated_top(self) -> float:
        return float(self.accuracy.max() - self.margin)

    def details(self) -> dict:
        return {
            "classify_ms": round(self.classify_ms, 4),
            "tier_boundaries": [list(c.boundaries) for c in self.classifiers],
            "ladders": [
                {"setting": lad.setting, "slots": lad.slots, "fit_accuracy": round(lad.accuracy, 4), "fit_cost_usd": lad.cost_usd}
                for lad in self.ladders
            ],
        }
