"""The learned predictors the baselines route with: score regressors, best-model classifiers, kNN,
and the Pairwise-Switch probe, each fitted on a split's embeddings."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from scipy.special import expit
from torch import nn
from torch.nn import functional as F

from ..fitting import fit_early_stopping
from ..heads import masked_bce
from .metrics import oracle_choice
from .split import Split


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _mlp(in_dim: int, out_dim: int, hidden: int = 256) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, out_dim)
    )


@dataclass
class MLPTrainer:
    """Minibatch AdamW with early stopping on the validation loss (best weights kept)."""

    epochs: int = 60
    lr: float = 1e-3
    weight_decay: float = 1e-2
    batch_size: int = 128
    patience: int = 6
    seed: int = 0

    def fit(self, net: nn.Module, loss_fn, x: np.ndarray, y: torch.Tensor, x_val: np.ndarray, y_val: torch.Tensor):
        fit_early_stopping(
            net, net, loss_fn, torch.as_tensor(x), y, torch.as_tensor(x_val), y_val,
            params=net.parameters(), epochs=self.epochs, lr=self.lr, weight_decay=self.weight_decay,
            batch_size=self.batch_size, patience=self.patience, generator=torch.Generator().manual_seed(self.seed),
        )
        return net


class ScorePredictor:
    """Per-model correctness p_i(x) from a 3-layer MLP (masked BCE)."""

    def __init__(self, train: Split, val: Split, seed: int = 0):
        torch.manual_seed(seed)
        self.net = _mlp(train.emb.shape[1], train.n_models)
        y = torch.as_tensor(train.scores, dtype=torch.float32)
        y_val = torch.as_tensor(val.scores, dtype=torch.float32)
        MLPTrainer(seed=seed).fit(self.net, masked_bce, train.emb, y, val.emb, y_val)

    @torch.inference_mode()
    def predict(self, emb: np.ndarray) -> np.ndarray:
        return torch.sigmoid(self.net(torch.as_tensor(emb, dtype=torch.float32))).numpy().astype(np.float64)


class BestModelClassifier:
    """P(model_i is best | query), best = cheapest model with the row's top score (unobserved = 0)."""

    def __init__(self, train: Split, val: Split, seed: int = 0):
        torch.manual_seed(seed)
        self.net = _mlp(train.emb.shape[1], train.n_models)

        def labels(split: Split) -> torch.Tensor:
            return torch.as_tensor(oracle_choice(np.nan_to_num(split.scores, nan=0.0), split.costs), dtype=torch.long)

        MLPTrainer(seed=seed).fit(self.net, F.cross_entropy, train.emb, labels(train), val.emb, labels(val))

    @torch.inference_mode()
    def predict(self, emb: np.ndarray) -> np.ndarray:
        return torch.softmax(self.net(torch.as_tensor(emb, dtype=torch.float32)), dim=-1).numpy()


class KNNPredictor:
    """Mean outcome per model over the k most cosine-similar train queries."""

    def __init__(self, train: Split, k: int = 5):
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        self.k = min(k, len(train))
        self.keys = _unit(train.emb)
        self.scores = train.scores
        col = np.nanmean(np.where(np.isfinite(train.scores), train.scores, np.nan), axis=0)
        self.fallback = np.nan_to_num(col, nan=0.0)

    def predict(self, emb: np.ndarray, chunk: int = 2048) -> np.ndarray:
        out = np.empty((len(emb), self.scores.shape[1]))
        queries = _unit(emb)
        for start in range(0, len(queries), chunk):
            sim = queries[start : start + chunk] @ self.keys.T
            top = np.argpartition(-sim, self.k - 1, axis=1)[:, : self.k]
            neigh = self.scores[top]  # [n, k, K]
            with warnings.catch_warnings():  # a model unobserved among all neighbours: fallback below
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(neigh, axis=1)
            out[start : start + chunk] = np.where(np.isfinite(mean), mean, self.fallback)
        return out


class PairwiseSwitchPredictor:
    """Who is right where the anchor model (the best single model) and model j disagree?

    For every other model j, a logistic regression on the standardised embeddings of the train rows
    where both are observed and their outcomes differ, labelled "j scored higher", weighted by the
    size of the difference (1 for 0/1 outcomes); its L2 strength is picked per j on the same rows of
    validation (weighted log-loss).  The predicted win probability q_j(x) decides the switch exactly:
    E[y_j - y_anchor | x] = P(disagree | x) * (2 q_j(x) - 1), so j is expected to beat the anchor
    iff q_j(x) > 1/2, whatever P(disagree | x) is.  Rows where the two agree carry no information
    about switching, which is why the classifier sees only the others: shared difficulty cancels.
    """

    STRENGTHS: ClassVar[tuple[float, ...]] = (1e-2, 1e-1, 1.0, 10.0, 100.0)  # 100: q ~ the base rate

    def __init__(self, train: Split, val: Split, anchor: int):
        self.anchor, self.n_models = anchor, train.n_models
        self.mean = train.emb.mean(axis=0)
        self.scale = np.maximum(train.emb.std(axis=0), 1e-6)
        self.heads: dict[int, tuple[np.ndarray, float]] = {}  # j -> (weights, bias)
        x_train, x_val = self._features(train.emb), self._features(val.emb)
        for j in range(train.n_models):
            if j == anchor:
                continue
            fit_rows = self._disagreements(train, j)
            if fit_rows is None:
                continue  # never disagree on train (or j never wins / never loses): no evidence to switch
            val_rows = self._disagreements(val, j, need_both=False)
            fits = [self._logistic(x_train, *fit_rows, strength) for strength in self.STRENGTHS]
            if val_rows is not None:
                losses = [self._loss(x_val, *val_rows, *fit) for fit in fits]
                self.heads[j] = fits[int(np.argmin(losses))]
            else:  # no disagreement on validation to choose by: the middle strength
                self.heads[j] = fits[len(fits) // 2]

    def _features(self, emb: np.ndarray) -> torch.Tensor:
        return torch.as_tensor((emb - self.mean) / self.scale, dtype=torch.float64)

    def _disagreements(self, split: Split, j: int, need_both: bool = True):
        diff = split.scores[:, j] - split.scores[:, self.anchor]
        rows = np.flatnonzero(np.isfinite(diff) & (np.abs(np.nan_to_num(diff)) > 1e-9))
        wins = diff[rows] > 0
        if rows.size == 0 or (need_both and (wins.all() or not wins.any())):
            return None
        return rows, torch.as_tensor(wins, dtype=torch.float64), torch.as_tensor(np.abs(diff[rows]), dtype=torch.float64)

    @staticmethod
    def _weighted_bce(logits, wins, weight) -> torch.Tensor:
        return (F.binary_cross_entropy_with_logits(logits, wins, reduction="none") * weight).sum() / weight.sum()

    @classmethod
    def _loss(cls, x, rows, wins, weight, w, b) -> float:
        return float(cls._weighted_bce(x[rows] @ torch.as_tensor(w) + b, wins, weight))

    @classmethod
    def _logistic(cls, x, rows, wins, weight, strength: float) -> tuple[np.ndarray, float]:
        """Weighted L2-regularised logistic regression, full-batch L-BFGS (convex: converges)."""
        xs = x[rows]
        w = torch.zeros(xs.shape[1], dtype=torch.float64, requires_grad=True)
        b = torch.zeros((), dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([w, b], max_iter=200, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = cls._weighted_bce(xs @ w + b, wins, weight) + 0.5 * strength * (w @ w)
            loss.backward()
            return loss

        opt.step(closure)
        return w.detach().numpy().copy(), float(b.detach())

    def win_probability(self, emb: np.ndarray) -> np.ndarray:
        """[N, K] q_j(x); 0 for the anchor and for models with no head (never switched to)."""
        x = self._features(emb).numpy()
        out = np.zeros((len(emb), self.n_models))
        for j, (w, b) in self.heads.items():
            out[:, j] = expit(x @ w + b)
        return out

    def choose(self, emb: np.ndarray) -> np.ndarray:
        """The model with the highest win probability where it exceeds 1/2, else the anchor."""
        q = self.win_probability(emb)
        return np.where(q.max(axis=1) > 0.5, q.argmax(axis=1), self.anchor)
