"""The paper's baselines (section 3.1), all on the SAME frozen encoder embeddings as PROTEUS, fit on the
same train split and tuned on the same validation split.

Every router sees, per query, the embedding and the query's logged per-call cost of each model
(exactly what PROTEUS's ``route_log`` gets), and returns a routing (a choice per query, or routing
probabilities for Random).  Choices where the paper is silent:

- Random: uniform over models; we report its exact expected accuracy and cost (no sampling noise).
- Cheapest / BestFixed: the model with the lowest mean train cost / the highest mean accuracy on
  train + validation (never the test split).
- KNN: 5 nearest train queries by cosine similarity; predicted score = the neighbours' mean per model;
  route to the argmax (ties, frequent with 0/1 labels and k = 5, go to the cheaper model).
- MLP: 3 linear layers (D -> 256 -> 256 -> K, GELU), masked BCE on observed cells, AdamW, early
  stopping on validation loss; route to the argmax of the predicted scores.  This one predictor is
  also the accuracy estimate acc_i / p_i of CARROT and Calibrated-Threshold, so those baselines
  differ from MLP only in their routing rule.
- CARROT-{Quality, Balanced, Cost}: score_i = (1 - mu) acc_i - mu c_i with mu = 0.1 / 0.5 / 0.9 and
  linear cost normalisation c_i = cost_i / (highest mean train cost of any model), as in CARROT.
- RouteLLM-Style: a K-way classifier (same MLP body, softmax cross-entropy) of P(model_i is best |
  query), where "best" on a train row = the cheapest model with the row's highest score; route to the
  most probable model.
- OmniRouter-Style: "dual-head" accuracy prediction = the mean of a parametric head (the MLP above)
  and a retrieval head (10-NN), after OmniRouter's hybrid retrieval-augmented predictor; per-query
  Lagrangian routing argmax_i lambda * p_i - c_i, with lambda solved on the routed batch so that the
  batch's *predicted* accuracy reaches the constraint parameter alpha (bisection; predicted accuracy
  is monotone in lambda).  For each tau, alpha is picked on validation (below).
- Calibrated-Threshold (what an operator does today): route to the cheapest model whose predicted p_i
  clears a threshold t (none clears: the argmax p_i); for each tau, t is picked on validation.

Not a paper baseline: Pairwise-Switch, the headroom probe of ``headroom.headroom`` (stays with the
best single model unless a classifier of who is right where the two disagree expects another model
to win; see ``PairwiseSwitchPredictor``).

Tuning the tau-capable baselines on validation uses the same rule as PROTEUS's own calibration
(``train/calibration.py``): on the non-decreasing lower envelope of validation accuracy versus the knob,
take the smallest knob whose accuracy reaches tau + the artifact's calibration margin; when no knob
reaches it, the knob with the best validation accuracy.

Every paper baseline's routing rule stays in this one file (~450 lines) so section 3.1 reads in one
place; the predictors they share are ``predictors.py``, the operator baselines (Single-Model,
LiteLLM-Complexity) ``operator_baselines.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from litellm_proteus.predictor import frontier_share

from ..calibration import cost_frontier
from .metrics import accuracy, per_query
from .split import Split
from .predictors import BestModelClassifier, KNNPredictor, PairwiseSwitchPredictor, ScorePredictor


@dataclass
class Assignment:
    assign: np.ndarray  # [N] model index, or [N, K] routing probabilities
    mu: np.ndarray | None = None  # PROTEUS's quality preference per query
    knob: float | None = None  # the tuned parameter a tau-capable baseline used


def cheapest_argmax(pred: np.ndarray, costs: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """argmax of ``pred`` per row, ties broken towards the cheaper model."""
    best = pred.max(axis=1, keepdims=True)
    return np.where(pred >= best - tol, costs, np.inf).argmin(axis=1)


# ----------------------------------------------------------------------------------------------
# predictors on the embeddings
# ----------------------------------------------------------------------------------------------
@dataclass
class FitContext:
    """Train/validation data plus predictors shared between baselines (fit once, lazily)."""

    train: Split
    val: Split
    seed: int = 0
    margin: float = 0.0  # validation margin of the tau-capable baselines (= PROTEUS's calibration margin)
    _cache: dict = field(default_factory=dict, repr=False)

    def _get(self, key, build):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def score_mlp(self) -> ScorePredictor:
        return self._get("mlp", lambda: ScorePredictor(self.train, self.val, self.seed))

    def knn(self, k: int) -> KNNPredictor:
        return self._get(("knn", k), lambda: KNNPredictor(self.train, k))

    def best_classifier(self) -> BestModelClassifier:
        return self._get("best", lambda: BestModelClassifier(self.train, self.val, self.seed))

    def best_single_model(self) -> int:
        """The model with the highest mean accuracy on train + validation (never the test split)."""
        scores = np.concatenate([self.train.scores, self.val.scores])
        return int(np.nanargmax(np.nanmean(scores, axis=0)))

    @property
    def cost_scale(self) -> float:
        """Linear cost normaliser: the highest mean train cost of any model (that model -> ~1)."""
        return float(max(self.train.costs.mean(axis=0).max(), 1e-12))


# ----------------------------------------------------------------------------------------------
# tuning a knob on validation
# ----------------------------------------------------------------------------------------------
def validation_curve(val: Split, choices: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(accuracy, mean cost) on validation of each routing in ``choices`` (a model per query)."""
    scores = np.nan_to_num(val.scores, nan=0.0)
    return np.array([accuracy(c, scores) for c in choices]), np.array([per_query(c, val.costs).mean() for c in choices])


class KnobTable:
    """Validation accuracy along an increasing knob -> the knob to use for a requested tau.

    Given the knobs' validation costs too, ``mixed_knobs`` gives each query one of the two
    cost-frontier knobs around tau + margin, as PROTEUS's operating-point mixing does."""

    def __init__(self, knobs: np.ndarray, val_accuracy: np.ndarray, val_cost: np.ndarray | None = None, margin: float = 0.0):
        self.knobs = np.asarray(knobs, dtype=np.float64)
        self.val_accuracy = np.asarray(val_accuracy, dtype=np.float64)
        # the non-decreasing lower envelope: a knob counts as reaching tau only if every larger
        # knob does too (PROTEUS's calibration uses the same rule)
        self.envelope = np.minimum.accumulate(self.val_accuracy[::-1])[::-1]
        self.margin = margin
        self.best = int(np.argmax(self.val_accuracy))
        self.frontier = None if val_cost is None else np.asarray(cost_frontier(np.asarray(val_cost, dtype=np.float64), self.envelope))

    @property
    def validated_top(self) -> float:
        """The highest tau whose knob validation shows meeting tau + margin; above it ``knob`` falls
        back to the most accurate setting, a promise the router could not have declared."""
        return float(self.envelope[-1] - self.margin)

    def index(self, tau: float | np.ndarray) -> np.ndarray:
        taus = np.atleast_1d(np.asarray(tau, dtype=np.float64))
        idx = np.searchsorted(self.envelope, taus + self.margin - 1e-12, side="left")
        return np.where(idx >= len(self.knobs), self.best, idx)

    def knob(self, tau: float | np.ndarray) -> np.ndarray:
        return self.knobs[self.index(tau)]

    def mixed_knobs(self, tau: float | np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Per query: the upper frontier knob around tau + margin where its draw is below the share
        that reaches it, else the lower one; beyond ``validated_top``, ``knob(tau)``."""
        if self.frontier is None:
            raise ValueError("mixing needs the knobs' validation costs (KnobTable(val_cost=...))")
        taus = np.broadcast_to(np.asarray(tau, dtype=np.float64), np.shape(draws))
        knobs = self.knob(taus).astype(np.float64)
        frontier_accuracy = self.envelope[self.frontier]
        for t in np.unique(taus[taus <= self.validated_top + 1e-12]):
            lower, upper, share = frontier_share(frontier_accuracy, float(t) + self.margin)
            rows = taus == t
            knobs[rows] = np.where(draws[rows] < share, self.knobs[self.frontier[upper]], self.knobs[self.frontier[lower]])
        return knobs


# ----------------------------------------------------------------------------------------------
# routers
# ----------------------------------------------------------------------------------------------
class Router:
    name: ClassVar[str] = ""
    tau_capable: ClassVar[bool] = False  # takes tau as input
    per_query_tau: ClassVar[bool] = False  # can take a different tau for every query
    has_latency: ClassVar[bool] = True  # False: a static rule (RE is N/A, t_router = 0 in RPI)
    table: KnobTable | None = None  # tau -> knob, for the routers tuned per tau on validation

    def fit(self, ctx: FitContext) -> "Router":
        return self

    def route(self, emb: np.ndarray, costs: np.ndarray, tau: float | np.ndarray | None = None) -> Assignment:
        raise NotImplementedError

    def route_split(self, split: Split, tau: float | np.ndarray | None = None) -> Assignment:
        """Route a whole split (PROTEUS also takes its prompts' mixing draws)."""
        return self.route(split.emb, split.costs, tau)

    def validated_top(self) -> float | None:
        """Tau-capable routers tuned on validation: the highest tau their validation supports."""
        return self.table.validated_top if self.table is not None else None

    def details(self) -> dict:
        """What the report shows about this router beside its figures (e.g. its tuned choices)."""
        return {}


class KnobRouter(Router):
    """A tau-capable router that routes at a knob tuned per tau on validation (``table``)."""

    tau_capable = True
    table: KnobTable

    def route_knobs(self, emb: np.ndarray, costs: np.ndarray, knobs: np.ndarray) -> np.ndarray:
        """The model per query when query j routes at ``knobs[j]``."""
        raise NotImplementedError

    def route(self, emb, costs, tau=None):
        if tau is None:
            raise ValueError(f"{self.name} needs tau")
        if np.ndim(tau) != 0 and not self.per_query_tau:
            raise ValueError(f"{self.name} routes a batch at one scalar tau")
        knobs = np.broadcast_to(self.table.knob(tau), (len(emb),))
        return Assignment(self.route_knobs(emb, costs, knobs), knob=float(knobs[0]) if np.ndim(tau) == 0 and len(knobs) else None)


class MixedKnobRouter(Router):
    """Evaluation probe, not a paper baseline: a knob router given PROTEUS's operating-point mixing
    (each query at one of the two validation cost-frontier knobs around tau + margin, chosen by its
    prompt's draw).  It asks how much of PROTEUS's cost edge mixing alone would give a baseline."""

    tau_capable = True

    def __init__(self, base: KnobRouter):
        self.base = base
        self.name = f"{base.name} + mixing"  # type: ignore[misc]
        self.per_query_tau = base.per_query_tau  # type: ignore[misc]
        self.table = base.table

    def route(self, emb, costs, tau=None):
        raise ValueError(f"{self.name} needs the prompts' draws: use route_split")

    def route_split(self, split: Split, tau=None) -> Assignment:
        if tau is None or split.draws is None:
            raise ValueError(f"{self.name} needs tau and the split's draws")
        return Assignment(self.base.route_knobs(split.emb, split.costs, self.base.table.mixed_knobs(tau, split.draws)))


class RandomRouter(Router):
    name = "Random"
    has_latency = False

    def route(self, emb, costs, tau=None):
        k = costs.shape[1]
        return Assignment(np.full((len(costs), k), 1.0 / k))


class FixedRouter(Router):
    """Always the same model (chosen in ``fit``)."""

    has_latency = False
    model_index: int = 0

    def route(self, emb, costs, tau=None):
        return Assignment(np.full(len(costs), self.model_index, dtype=np.int64))


class CheapestRouter(FixedRouter):
    name = "Cheapest"

    def fit(self, ctx):
        self.model_index = int(np.argmin(ctx.train.costs.mean(axis=0)))
        return self


class BestFixedRouter(FixedRouter):
    name = "BestFixed"

    def fit(self, ctx):
        self.model_index = ctx.best_single_model()
        return self


class KNNRouter(Router):
    name = "KNN"

    def __init__(self, k: int = 5):
        self.k = k

    def fit(self, ctx):
        self.predictor = ctx.knn(self.k)
        return self

    def route(self, emb, costs, tau=None):
        return Assignment(cheapest_argmax(self.predictor.predict(emb), costs))


class MLPRouter(Router):
    name = "MLP"

    def fit(self, ctx):
        self.predictor = ctx.score_mlp()
        return self

    def route(self, emb, costs, tau=None):
        return Assignment(cheapest_argmax(self.predictor.predict(emb), costs))


class PairwiseSwitchRouter(Router):
    """Not a paper baseline: the headroom probe (``headroom.headroom``).  Stays with the best single
    model of train + validation unless a pairwise classifier expects another model to beat it on
    this query (``PairwiseSwitchPredictor``) -- the most direct test of whether routing can beat
    always-the-best-model on these embeddings."""

    name = "Pairwise-Switch"

    def fit(self, ctx):
        self.predictor = PairwiseSwitchPredictor(ctx.train, ctx.val, ctx.best_single_model())
        return self

    def route(self, emb, costs, tau=None):
        return Assignment(self.predictor.choose(emb))


class CarrotRouter(Router):
    """score_i = (1 - mu) acc_i - mu c_i (linear cost normalisation)."""

    VARIANTS: ClassVar[dict[str, float]] = {"CARROT-Quality": 0.1, "CARROT-Balanced": 0.5, "CARROT-Cost": 0.9}

    def __init__(self, variant: str):
        if variant not in self.VARIANTS:
            raise ValueError(f"CARROT variant must be one of {sorted(self.VARIANTS)}; got {variant!r}")
        self.name = variant  # type: ignore[misc]
        self.mu = self.VARIANTS[variant]

    def fit(self, ctx):
        self.predictor = ctx.score_mlp()
        self.cost_scale = ctx.cost_scale
        return self

    def route(self, emb, costs, tau=None):
        score = (1 - self.mu) * self.predictor.predict(emb) - self.mu * costs / self.cost_scale
        return Assignment(cheapest_argmax(score, costs))


class RouteLLMRouter(Router):
    name = "RouteLLM-Style"

    def fit(self, ctx):
        self.classifier = ctx.best_classifier()
        return self

    def route(self, emb, costs, tau=None):
        return Assignment(cheapest_argmax(self.classifier.predict(emb), costs))


class CalibratedThresholdRouter(KnobRouter):
    name = "Calibrated-Threshold"
    per_query_tau = True
    THRESHOLDS: ClassVar[np.ndarray] = np.round(np.linspace(0.0, 1.0, 401), 6)

    def fit(self, ctx):
        self.predictor = ctx.score_mlp()
        p_val = self.predictor.predict(ctx.val.emb)
        choices = [self.choose(p_val, ctx.val.costs, np.full(len(p_val), t)) for t in self.THRESHOLDS]
        self.table = KnobTable(self.THRESHOLDS, *validation_curve(ctx.val, choices), margin=ctx.margin)
        return self

    @staticmethod
    def choose(p: np.ndarray, costs: np.ndarray, threshold: np.ndarray) -> np.ndarray:
        """Cheapest model with p_i >= threshold (per row); the argmax p_i when none clears it."""
        clears = p >= threshold[:, None] - 1e-12
        cheapest = np.where(clears, costs, np.inf).argmin(axis=1)
        return np.where(clears.any(axis=1), cheapest, p.argmax(axis=1))

    def route_knobs(self, emb, costs, knobs):
        return self.choose(self.predictor.predict(emb), costs, np.asarray(knobs))


class OmniRouterRouter(KnobRouter):
    name = "OmniRouter-Style"  # one tau per routed batch: the dual is solved on the batch
    N_ALPHA: ClassVar[int] = 81

    def __init__(self, retrieval_k: int = 10):
        self.retrieval_k = retrieval_k

    def fit(self, ctx):
        self.mlp, self.knn = ctx.score_mlp(), ctx.knn(self.retrieval_k)
        self.cost_scale = ctx.cost_scale
        p_val = self.predict(ctx.val.emb)
        c_val = ctx.val.costs / self.cost_scale
        lo = p_val[np.arange(len(p_val)), self.choice(p_val, c_val, 0.0)].mean()
        hi = p_val.max(axis=1).mean()
        alphas = np.linspace(lo, hi, self.N_ALPHA)
        choices = [self.solve(p_val, c_val, a) for a in alphas]
        self.table = KnobTable(alphas, *validation_curve(ctx.val, choices), margin=ctx.margin)
        return self

    def predict(self, emb: np.ndarray) -> np.ndarray:
        return 0.5 * (self.mlp.predict(emb) + self.knn.predict(emb))

    @staticmethod
    def choice(p: np.ndarray, c_hat: np.ndarray, lam: float) -> np.ndarray:
        """argmax_i lam * p_i - c_i (lam = 0: the cheapest; ties towards higher p)."""
        return _argmax_tiebreak(lam * p - c_hat, p)

    @classmethod
    def solve(cls, p: np.ndarray, c_hat: np.ndarray, alpha: float, iterations: int = 40) -> np.ndarray:
        """Smallest lambda whose routing has mean predicted accuracy >= alpha (bisection in log lambda)."""
        top = cls.choice(p, c_hat, 1e6)
        if p[np.arange(len(p)), top].mean() < alpha - 1e-12:
            return top  # the constraint is infeasible even on predictions: maximise predicted accuracy
        low, high = -6.0, 6.0
        if p[np.arange(len(p)), cls.choice(p, c_hat, 10**low)].mean() >= alpha - 1e-12:
            return cls.choice(p, c_hat, 10**low)
        for _ in range(iterations):
            mid = (low + high) / 2
            if p[np.arange(len(p)), cls.choice(p, c_hat, 10**mid)].mean() >= alpha - 1e-12:
                high = mid
            else:
                low = mid
        return cls.choice(p, c_hat, 10**high)

    def route_knobs(self, emb, costs, knobs):
        """Each distinct alpha's dual is solved on the whole batch; its queries take that routing."""
        p, c_hat = self.predict(emb), costs / self.cost_scale
        choice = np.zeros(len(emb), dtype=np.int64)
        for alpha in np.unique(knobs):
            rows = knobs == alpha
            choice[rows] = self.solve(p, c_hat, float(alpha))[rows]
        return choice


def _argmax_tiebreak(score: np.ndarray, secondary: np.ndarray, tol: float = 1e-12) -> np.ndarray:
    best = score.max(axis=1, keepdims=True)
    return np.where(score >= best - tol, secondary, -np.inf).argmax(axis=1)


BASELINE_NAMES: tuple[str, ...] = (
    "Random",
    "Cheapest",
    "BestFixed",
    "KNN",
    "MLP",
    "CARROT-Quality",
    "CARROT-Balanced",
    "CARROT-Cost",
    "RouteLLM-Style",
    "OmniRouter-Style",
    "Calibrated-Threshold",
    "Single-Model",
    "LiteLLM-Complexity",
)


def make_baselines() -> list[Router]:
    """Unfitted baselines in the order of ``BASELINE_NAMES``."""
    routers: list[Router] = [RandomRouter(), CheapestRouter(), BestFixedRouter(), KNNRouter(5), MLPRouter()]
    routers += [CarrotRouter(name) for name in CarrotRouter.VARIANTS]
    routers += [RouteLLMRouter(), OmniRouterRouter(), CalibratedThresholdRouter()]
    from .operator_baselines import LiteLLMComplexityRouter, SingleModelRouter  # they build on this module

    routers += [SingleModelRouter(), LiteLLMComplexityRouter()]
    assert [r.name for r in routers] == list(BASELINE_NAMES)
    return routers


def fit_baselines(ctx: FitContext) -> list[Router]:
    return [router.fit(ctx) for router in make_baselines()]
