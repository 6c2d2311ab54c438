"""Off-policy estimates of a routing policy's accuracy from bandit feedback (a decision log).

In a decision log each labelled request carries one logged choice ``a`` (slot), its label ``y`` and
the probability ``pi(a|x)`` the logging router chose it with.  A new policy choosing ``c(x)`` is
estimated per row by the doubly robust (DR) term

    q(x, c) + 1[c = a] * min(1 / pi(a|x), clip) * (y - q(x, a))

where ``q`` is the performance head's predicted correctness (the direct method); the mean over rows
is the policy's accuracy, unbiased where the log has support (either ``q`` is right or the logged
propensities are), with a normal-approximation 95 % CI from the rows' spread, clipped to [0, 1]
(an accuracy lies there; a DR term may not, and the interval of few rows runs past 1 otherwise).  Full-information rows
(``logged_choice = -1``) contribute their score of ``c``, weighed by the probability they scored it
(``inclusion``: a shadow row always scores the model that served it, the others only with its
``call_share``), so that rows agreeing with the logging router do not stand in for the rest.  SNIPS (the self-normalised IPS mean over the
rows where ``c = a``) is reported beside it.  A full-information row (a shadow row) that scored
``c`` observes the policy's choice as a bandit row agreeing with the logged one does: both count
towards the support of an estimate.

Support: a policy's estimate rests on the head alone for rows where it chooses a slot the log never
labelled, and on few rows when ``c = a`` rarely; ``support`` says which models and operating points
are in that state.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

Z_95 = 1.959964


class OffPolicySupportWarning(UserWarning):
    """The decision log cannot support an estimate (a model never labelled, too few matching rows)."""


@dataclass
class Estimate:
    """A policy's off-policy accuracy: DR mean with its CI, SNIPS, and how much data backs it."""

    dr: float
    ci_low: float
    ci_high: float
    snips: float  # NaN when no row's logged choice matches the policy's
    n_rows: int
    n_matched: int  # rows observing the policy's choice: bandit rows where it is the logged slot, full-information rows that scored it
    unsupported_share: float  # rows routed to a slot with no label in the log

    def to_dict(self) -> dict[str, float | int]:
        r = lambda v: None if not math.isfinite(v) else round(float(v), 5)  # noqa: E731
        return {"dr": r(self.dr), "ci95": [r(self.ci_low), r(self.ci_high)], "snips": r(self.snips),
                "n_rows": self.n_rows, "n_matched": self.n_matched, "unsupported_share": round(self.unsupported_share, 4)}


@dataclass
class BanditRows:
    """The labelled rows of a decision log in the form the estimators use."""

    scores: np.ndarray  # [N, K]; bandit rows: NaN except the logged slot
    logged_choice: np.ndarray  # [N] slot, -1 = full-information row
    propensity: np.ndarray  # [N]
    clip: float = 20.0
    groups: np.ndarray | None = None  # [N] the prompt of each row: a prompt asked again is no new sample
    inclusion: np.ndarray | None = None  # [N, K] probability a full-information row scored a slot (NaN / None: 1)
    labelled_slots: np.ndarray = field(init=False)  # [K] bool: some bandit row labels this slot

    def __post_init__(self) -> None:
        self.logged_choice = np.asarray(self.logged_choice, dtype=np.int64)
        self.propensity = np.asarray(self.propensity, dtype=np.float64)
        k = self.scores.shape[1]
        bandit = self.logged_choice >= 0
        bad = bandit & ~((self.propensity > 0) & (self.propensity <= 1))
        if bad.any():
            raise ValueError(f"propensity must be in (0, 1] on every logged decision; {int(bad.sum())} rows are not "
                             f"(first: {self.propensity[bad][0]!r})")
        inclusion = np.ones_like(self.scores) if self.inclusion is None else np.asarray(self.inclusion, dtype=np.float64)
        self.inclusion = np.where(np.isfinite(inclusion) & (inclusion > 0), np.minimum(inclusion, 1.0), 1.0)
        if self.groups is not None:  # integer codes, once: every bound clusters by them
            self.groups = np.unique(np.asarray(self.groups), return_inverse=True)[1].ravel()
        self.labelled_slots = np.zeros(k, dtype=bool)
        self.labelled_slots[np.unique(self.logged_choice[bandit])] = True
        full = ~bandit
        if full.any():
            self.labelled_slots |= np.isfinite(self.scores[full]).any(axis=0)

    def dr_matrix(self, q: np.ndarray) -> np.ndarray:
        """[N, K] doubly robust value of every slot on every row: q(x, c) + 1[c = a] * min(1/pi, clip)
        * (y - q(x, a)) on bandit rows (q alone where the logged outcome is missing), q(x, c) + 1[scored]
        / inclusion * (y - q(x, c)) on full-information rows (the score itself where every slot is
        scored).  Its column means are unbiased where q or pi is right (up to the clip)."""
        rows = np.flatnonzero(self.logged_choice >= 0)
        scored = np.isfinite(self.scores)
        values = np.where(scored, q + (np.nan_to_num(self.scores) - q) / self.inclusion, q)
        values[rows] = q[rows]
        chosen = self.logged_choice[rows]
        weight = np.minimum(1.0 / self.propensity[rows], self.clip)
        correction = weight * (self.scores[rows, chosen] - q[rows, chosen])
        values[rows, chosen] += np.nan_to_num(correction)
        return values

    def dr_terms(self, choice: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-row DR values of a policy choosing ``choice`` ([N]) given predictions ``q`` ([N, K]);
        and the mask of bandit rows whose logged slot equals the choice."""
        match = (self.logged_choice >= 0) & (choice == self.logged_choice)
        return self.dr_matrix(q)[np.arange(len(choice)), choice], match

    def head_free_terms(self, choice: np.ndarray) -> np.ndarray:
        """Per row, a value that does not use the head: a bandit row whose logged slot is the choice
        gives its clipped IPS term min(1 / pi, clip) * y, every other bandit row 0 (the choice counted
        as failed), a full-information row its score of the choice (0 if unscored).  For scores in
        [0, 1], logged propensities that are not understated, and a choice not fitted to the row's own
        label, the mean is at most the policy's accuracy in expectation (clipping only lowers a
        weight): tight where the policy agrees with the log or the log explored its choices, the worst
        case where it did neither."""
        rows = np.arange(len(choice))
        bandit = self.logged_choice >= 0
        label = np.nan_to_num(self.scores[rows, np.where(bandit, self.logged_choice, 0)])
        weight = np.minimum(1.0 / np.where(bandit, self.propensity, 1.0), self.clip)
        observed = np.nan_to_num(self.scores[rows, choice])  # full-information rows
        return np.where(bandit, np.where(choice == self.logged_choice, weight * label, 0.0), observed)

    def observed_rows(self, choice: np.ndarray) -> np.ndarray:
        """The full-information rows (ascending) that scored the policy's choice."""
        return np.flatnonzero((self.logged_choice < 0) & np.isfinite(self.scores[np.arange(len(choice)), choice]))

    def full_information_terms(self, choice: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the full-information rows, ascending; per row its score of the policy's choice over the
        probability it scored it, 0 where it did not).  Shadow rows are drawn at random, so the mean is
        unbiased for the policy's accuracy without the head (Horvitz-Thompson): a shadow row always
        scores the served model and the others only with its ``call_share``, and the rows where the
        policy agrees with the logging router are not let stand in for the rest."""
        rows = np.flatnonzero(self.logged_choice < 0)
        score = self.scores[rows, choice[rows]]
        return rows, np.where(np.isfinite(score), np.nan_to_num(score) / self.inclusion[rows, choice[rows]], 0.0)

    def estimate(self, choice: np.ndarray, q: np.ndarray) -> Estimate:
        terms, match = self.dr_terms(choice, q)
        n = len(terms)
        mean = float(terms.mean()) if n else math.nan
        half = Z_95 * standard_error(terms, self.groups)
        weight = np.minimum(1.0 / self.propensity, self.clip)
        logged = np.where(self.logged_choice >= 0, self.logged_choice, 0)
        y = np.nan_to_num(self.scores[np.arange(n), logged])
        snips = float((weight * y)[match].sum() / weight[match].sum()) if match.any() else math.nan
        unsupported = ~self.labelled_slots[choice]
        # a full-information row that scored the choice is an observation of it, propensity-free
        observed = (self.logged_choice < 0) & np.isfinite(self.scores[np.arange(n), choice])
        # an accuracy's interval stays in [0, 1] (a DR mean may leave it); no rows: NaN, as the mean
        low, high = (float(np.clip(mean - half, 0.0, 1.0)), float(np.clip(mean + half, 0.0, 1.0))) if n else (math.nan, math.nan)
        return Estimate(mean, low, high, snips, n, int(match.sum() + observed.sum()),
                        float(unsupported.mean()) if n else 0.0)


def standard_error(terms: np.ndarray, groups: np.ndarray | None = None) -> float:
    """The standard error of the mean of per-row estimates (inf below 2 rows).  With ``groups`` (each
    row's prompt), clustered by prompt: rows of one prompt asked again are one sample, not several
    (with one row per prompt, the plain standard error)."""
    n = len(terms)
    if n < 2:
        return math.inf
    if groups is None:
        return float(terms.std(ddof=1)) / math.sqrt(n)
    _, cluster = np.unique(np.asarray(groups), return_inverse=True)
    sums = np.bincount(cluster.ravel(), weights=terms - terms.mean())
    g = len(sums)
    return math.sqrt(g / (g - 1) * float((sums ** 2).sum())) / n if g > 1 else math.inf


def lower_bound(terms: np.ndarray, z: float, groups: np.ndarray | None = None, future: int | None = None) -> float:
    """One-sided lower confidence bound mean - z * SE of per-row estimates (``standard_error``, at least
    a Bernoulli's at the Agresti-Coull centre of the mean, so that a sample of all 1s still has a margin).  With
    ``future``, the bound also covers the accuracy measured on a future sample of that many prompts,
    c (1 - c) / future added to the variance (c: that centre), as the full-information calibration's
    margin does (train/pipeline.py)."""
    if len(terms) < 2:
        return -math.inf
    n = len(terms)
    mean, se = float(terms.mean()), standard_error(terms, groups)
    # A sample with no spread (every score 1) has se 0 and would bound at its mean: the spread of a
    # Bernoulli at the Agresti-Coull centre is the least the bound assumes (binding only such samples).
    centre = min(max((mean * n + z * z / 2) / (n + z * z), 0.0), 1.0)
    se = max(se, math.sqrt(centre * (1 - centre) / n))
    if future:
        se = math.sqrt(se ** 2 + centre * (1 - centre) / future)
    return mean - z * se


@dataclass
class Support:
    """What a decision log can and cannot estimate (recorded in the manifest as ``data.off_policy``)."""

    unlabelled_models: list[str]
    unsupported_tau: list[list[float]]  # requested-tau intervals whose estimate lacks support
    min_matched: int
    max_unsupported_share: float
    explored_share: float

    def to_dict(self) -> dict:
        return {"unlabelled_models": self.unlabelled_models, "unsupported_tau": self.unsupported_tau,
                "min_matched": self.min_matched, "max_unsupported_share": self.max_unsupported_share,
                "explored_share": round(self.explored_share, 6)}

    def warn(self) -> None:
        problems = []
        if self.unlabelled_models:
            problems.append(f"models never chosen with a label in the log (their accuracy comes from the head alone, "
                            f"not estimable): {self.unlabelled_models}")
        if self.unsupported_tau:
            problems.append(f"requested tau ranges whose off-policy estimate lacks support (fewer than {self.min_matched} "
                            "labelled rows, or than half the rows, where the new policy agrees with the logged choice, or > "
                            f"{self.max_unsupported_share:.0%} of rows routed to unlabelled models; they route at the "
                            f"nearest supported operating point, or the top one): {self.unsupported_tau}")
        if self.explored_share == 0:
            problems.append("the log has no exploration (every propensity is 1.0): models and operating points the "
                            "logging router did not choose cannot be estimated; enable exploration: {rate: 0.02} on a tier")
        if problems:
            warnings.warn("decision log: " + "; ".join(problems), OffPolicySupportWarning, stacklevel=2)


def tau_intervals(taus: list[float], bad: list[bool], step: float) -> list[list[float]]:
    """Contiguous runs of ``bad`` taus as [lo, hi] intervals."""
    out: list[list[float]] = []
    for tau, is_bad in zip(taus, bad):
        if not is_bad:
            continue
        if out and abs(tau - out[-1][1] - step) < step / 2:
            out[-1][1] = round(float(tau), 6)
        else:
            out.append([round(float(tau), 6), round(float(tau), 6)])
    return out
