"""The live compliance controller: the paper's dual update (eq. 3), run while serving.

Per state (a tier, or a bucket of request-sent taus) it keeps a sliding window of the last
``window`` decisions -- the calibrated p of the chosen deployment and the best calibrated p among
the candidates -- and of the last ``label_window`` feedback labels (label - p of that decision).
After every decision the tau offset moves::

    w      = n_labels / (n_labels + label_prior)       (0 below min_labels labels)
    p_hat  = mean(p_chosen) + w * mean(label - p)      (labels win as they accumulate)
    m0     = clip(p_ref(tau) - tau, 0, margin)         (margin where the artifact stores no p_ref)
    half   = mean(label) - lower95(label)              (one-sided Wilson bound, z = label_z)
    target = tau + min(margin, (1 - w) * m0 + w * half)
    error  = target - p_hat, but 0 while delta <= 0 and 0 < error < start_z * se(window mean p)
    delta <- clip((1 - decay) * delta + step * error, lower, delta_max)
    p_now  = mean(p_chosen) + min(w * r, r)            (r = mean(label - p): unshrunk when negative)
    lower  = delta_min if lower95(label) > tau and p_now - half > tau, else 0

p_ref(tau) is the mean calibrated p that static calibration validated at tau (the artifact's
``requested_p_ref`` / ``frontier_p_ref``): without labels the controller moves only once live
traffic is predicted below both it and tau + margin, i.e. on a shift, not on traffic the tau table
was validated for.  The margin covers what predictions miss of a shift; labels can only shrink it,
to their own 95 % uncertainty, so plentiful labels pay for the accuracy tau needs, not for the margin.
Below 0 needs both above tau: the labels' realised accuracy's lower bound, and p_now, what is
served now as the labels correct it, less the same half-width (a label window still full of good
outcomes from before a shift or a degraded deployment licenses nothing once the predictions have
dropped; a negative residual counts in full, since shrinking it towards 0 would flatter).

The router routes at calibrated(tau + delta).  A state is *infeasible* when, over the window,
even the best candidate's p (+ the residual) falls short of tau: no offset can reach tau there.
That best p carries each deployment's proven shortfall (``deployment_correction.alarm_best_p``).

State lives in Redis (one hash and two lists per state, changed only by one Lua script, so workers
and instances never race on a read-modify-write) with each process's own copy as fallback: when
Redis fails the controller says so once, keeps serving on local state that goes on from the state it
last read from Redis (delta, infeasible, the window sums) and asks Redis again after
``retry_after_s``.  ``LocalBackend`` and the Lua script implement the same update; tests hold them
to the same numbers.

The hash counts each list's entries.  A list that lost entries its sums still hold (deleted, evicted
under maxmemory, trimmed) starts its window afresh: the script drops what is left of it and zeroes
its sums, while delta and the infeasible flag go on from the hash (as local state goes on from
Redis's after an outage), so the mean p and its spread never count entries that are gone.  A hash
lost under its lists (deleted, evicted) restarts the whole state, lists included.  The three keys
share one TTL, set together on every call, so they expire together.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from .deployment_correction import CorrectionSettings
from .quality_breaker import BreakerSettings
from .settings_types import Integer, Number

logger = logging.getLogger("litellm_proteus.compliance")
# infeasible needs the best p short of tau by more than this: a window of p_best == tau is feasible in
# both backends, whatever the running sums' rounding (doubles here, long doubles in Redis)
INFEASIBLE_TOLERANCE = 1e-9
# a re-sum of the window's sum of p^2 walks at most this many list entries per Lua call (~1 ms in Redis)
RESUM_CHUNK = 1000
Z_95 = 1.96  # two-sided 95 %: the realised accuracy's interval the gauges and reports show
CLIENT_NAME_PREFIX = "proteus-compliance-"


class ComplianceSettings(BaseModel):
    """``routing_strategy_args.compliance``."""

    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool = Field(True, description="false: route at the static calibration, record nothing")
    step: Number = Field(0.02, gt=0, le=1, description="eta: delta moves by step * (target - p_hat) per decision")
    window: Integer = Field(200, ge=10, le=100_000, description="decisions in the sliding window")
    label_window: Integer = Field(5000, ge=10, le=100_000, description="feedback labels in the label window")
    label_prior: Number = Field(
        200.0, gt=0, description="labels that weigh as much as the predictions: the residual's weight is n / (n + label_prior)"
    )
    min_decisions: Integer = Field(50, ge=1, description="decisions before delta moves or infeasible is said")
    min_labels: Integer = Field(20, ge=2, description="labels before their residual corrects p_hat")
    label_z: Number = Field(
        1.645, gt=0, le=5,
        description="z of the labels' lower bound (Wilson): the target's label margin and the delta < 0 rule; 1.645: one-sided 95 %",
    )
    delta_min: Number = Field(-0.05, ge=-0.5, le=0, description="lowest delta; below 0 only on labels' evidence")
    delta_max: Number = Field(0.3, ge=0, le=1, description="highest delta")
    decay: Number = Field(0.002, ge=0, lt=1, description="per decision, delta shrinks by this fraction towards 0")
    start_z: Number = Field(
        3.0, ge=0, le=10,
        description="at rest (delta <= 0) delta rises only once p_hat is below target by start_z standard errors of the window's mean p",
    )
    margin: Number | None = Field(
        0.01, ge=0, le=0.5,
        description="without labels p_hat is steered to min(tau + margin, the artifact's reference p); null: the artifact's tau calibration margin",
    )
    tau_bucket: Number = Field(0.01, gt=0, le=1, description="width of the buckets request-sent taus share state in")
    ttl_s: Integer = Field(86_400, ge=60, description="Redis state of an idle tier expires after this long")
    retry_after_s: Number = Field(10.0, ge=0, le=3600, description="after a Redis failure, local state for this long")
    key_prefix: str = "proteus:compliance:"
    breaker: BreakerSettings = Field(default_factory=BreakerSettings, description="the quality breaker (quality_breaker.py)")
    correction: CorrectionSettings = Field(
        default_factory=CorrectionSettings, description="the deployment correction (deployment_correction.py)"
    )

    @model_validator(mode="after")
    def _minimums_fit_the_windows(self) -> "ComplianceSettings":
        # a window that can never hold min_decisions would freeze delta and the infeasible flag for good
        if self.min_decisions > self.window:
            raise ValueError(f"min_decisions ({self.min_decisions}) must be at most window ({self.window})")
        if self.min_labels > self.label_window:
            raise ValueError(f"min_labels ({self.min_labels}) must be at most label_window ({self.label_window})")
        return self


@dataclass(frozen=True)
class Control:
    tau_target: float  # the tau the policy is asked to route at: tau + delta
    delta: float
    infeasible: bool
    state_key: str


def state_key_for(tier: str, tau_source: str, tau: float, bucket: float) -> str:
    """A request that sends its own tau shares state with others in its tau bucket; all others
    share their tier's at the tier's tau (``tier:<name>@<tau>``): delta, the infeasible flag and the
    labels mean something only against the tau they were learnt at, so a tier whose tau changes
    starts a new state (the old one expires by its TTL)."""
    if tau_source == "request":
        return f"tau:{math.floor(round(tau / bucket, 9)) * bucket:.4g}"
    return f"tier:{tier}@{tau:.4g}"


@dataclass(frozen=True)
class StateKeys:
    """The state keys one configuration routes on (``in``): its tiers' at their effective taus
    (``tiers``), and the ``bucket``-wide tau buckets of request-sent taus, which the router clamps
    into ``tau_range`` (the artifact's) before bucketing them."""

    tiers: frozenset[str]
    bucket: float
    tau_range: tuple[float, float]
    # answers for tau-bucket keys, asked on every decision (at most 1 / bucket valid ones; bounded)
    _buckets: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def __contains__(self, state_key: object) -> bool:
        if state_key in self.tiers:
            return True
        if not isinstance(state_key, str) or not state_key.startswith("tau:"):
            return False
        known = self._buckets.get(state_key)
        if known is None:
            if len(self._buckets) >= 4096:
                self._buckets.clear()
            known = self._buckets[state_key] = self._is_bucket(state_key)
        return known

    def _is_bucket(self, state_key: str) -> bool:
        try:
            tau = float(state_key[4:])
        except ValueError:
            return False
        if not math.isfinite(tau):
            return False
        lo, hi = self.tau_range
        # A key is one of this width's buckets within the range iff a clamped tau buckets to it.  The
        # key prints the bucket's edge to 4 significant digits, which may round it below the edge:
        # the key's own bucket and the next one up are the candidates.
        clamped = min(max(tau, lo), hi)
        above = min(max(tau + self.bucket, lo), hi)
        return state_key in (state_key_for("", "request", clamped, self.bucket),
                             state_key_for("", "request", above, self.bucket))


@dataclass
class WindowState:
    """One state's window sums and offset (what the Lua script keeps in Redis)."""

    n: int = 0
    sum_p: float = 0.0
    sum_p2: float = 0.0  # p^2: the window mean's standard error (start_z)
    sum_best: float = 0.0
    n_labels: int = 0
    sum_res: float = 0.0  # label - p
    sum_y: float = 0.0
    delta: float = 0.0
    infeasible: bool = False
    decisions: deque = field(default_factory=deque)  # (p, p_best)
    labels: deque = field(default_factory=deque)  # (p, y)
    # a state continued from Redis knows its oldest entries only by their sums: that many leave the
    # window (before ``decisions`` / ``labels``) at their mean -- (p, p^2, p_best) and (label - p, label)
    seeded: int = 0
    seed_mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    seeded_labels: int = 0
    seed_label_mean: tuple[float, float] = (0.0, 0.0)

    def continued(self) -> WindowState:
        """A local state that goes on from this one's sums, delta and infeasible flag."""
        n, nl = self.n, self.n_labels
        return WindowState(
            n=n, sum_p=self.sum_p, sum_p2=self.sum_p2, sum_best=self.sum_best, n_labels=nl, sum_res=self.sum_res,
            sum_y=self.sum_y, delta=self.delta, infeasible=self.infeasible,
            seeded=n, seed_mean=(self.sum_p / n, self.sum_p2 / n, self.sum_best / n) if n else (0.0, 0.0, 0.0),
            seeded_labels=nl, seed_label_mean=(self.sum_res / nl, self.sum_y / nl) if nl else (0.0, 0.0),
        )


def realised_bounds(n: int, sum_y: float, z: float = Z_95) -> tuple[float, float, float]:
    """(mean, lower, upper) of the labels: Wilson's interval at ``z`` (two-sided 95 % by default;
    sound for few labels too)."""
    if n == 0:
        return math.nan, math.nan, math.nan
    mean, z2 = sum_y / n, z * z
    centre = (mean + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(max(mean * (1 - mean), 0.0) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return mean, centre - half, centre + half


def label_free_margin(margin: float, tau: float, p_ref: float | None) -> float:
    """m0: how far above tau the label-free target sits (the validated p_ref caps the margin)."""
    return margin if p_ref is None else min(max(p_ref - tau, 0.0), margin)


def update_delta(state: WindowState, tau: float, s: ComplianceSettings, margin: float, free_margin: float) -> None:
    """The dual step after a decision (mirrored by ``_LUA``); ``free_margin``: m0."""
    if state.n < s.min_decisions:
        return
    residual = weight = ci_half = residual_now = 0.0
    proven = False  # the realised accuracy's lower bound is above tau
    if state.n_labels >= s.min_labels:
        weight = state.n_labels / (state.n_labels + s.label_prior)
        raw = state.sum_res / state.n_labels
        residual = weight * raw
        residual_now = min(residual, raw)  # unshrunk when negative: shrinking it would flatter
        mean, low, _ = realised_bounds(state.n_labels, state.sum_y, s.label_z)
        ci_half = mean - low
        proven = low > tau
    mean_p = state.sum_p / state.n
    p_hat = mean_p + residual
    lower = s.delta_min if proven and mean_p + residual_now - ci_half > tau else 0.0
    target = tau + min(margin, (1.0 - weight) * free_margin + weight * ci_half)
    error = target - p_hat
    if state.delta <= 0.0 and error > 0.0:  # at rest: only a shortfall beyond the window's noise starts it
        std_err = math.sqrt(max(state.sum_p2 / state.n - mean_p * mean_p, 0.0) / state.n)
        if error < s.start_z * std_err:
            error = 0.0
    moved = (1.0 - s.decay) * state.delta + s.step * error
    state.delta = min(max(moved, lower), s.delta_max)
    state.infeasible = state.sum_best / state.n + residual < tau - INFEASIBLE_TOLERANCE


def newest(state: WindowState, window: int, label_window: int, decisions: list[tuple[float, float]],
           labels: list[tuple[float, float]]) -> WindowState:
    """``state`` counting only its newest ``window`` decisions and ``label_window`` labels: what the
    next call leaves of a window made smaller, so a snapshot shows it at once (delta and the
    infeasible flag move at that call).  ``decisions`` / ``labels``: the newest entries known one by
    one, (p, p_best) / (p, label), oldest first; older ones count at the state's seed means."""
    out = replace(state)
    if state.n > window:
        kept = decisions[-window:]
        seeded = window - len(kept)  # > 0 only while entries known by their sums alone are among the newest
        mean_p, mean_p2, mean_best = state.seed_mean
        out.n = window
        out.sum_p = sum(p for p, _ in kept) + seeded * mean_p
        out.sum_p2 = sum(p * p for p, _ in kept) + seeded * mean_p2
        out.sum_best = sum(b for _, b in kept) + seeded * mean_best
    if state.n_labels > label_window:
        kept = labels[-label_window:]
        seeded = label_window - len(kept)
        mean_res, mean_y = state.seed_label_mean
        out.n_labels = label_window
        out.sum_res = sum(y - p for p, y in kept) + seeded * mean_res
        out.sum_y = sum(y for _, y in kept) + seeded * mean_y
    return out


def list_lost(length: int, counted: str | None, summed: bool) -> bool:
    """Whether a Redis list no longer holds what its hash's sums count (``_LUA``'s ``lost``):
    ``counted`` is the hash's count of it (None: none), ``summed`` whether the hash holds its sums."""
    if counted is not None:
        return length < int(counted)
    return length > 0 and not summed


@dataclass
class ResidualWindow:
    """One deployment's last feedback residuals with running sums (what the Lua script keeps in Redis)."""

    values: deque = field(default_factory=deque)
    total: float = 0.0
    total_sq: float = 0.0

    def add(self, residual: float, window: int) -> None:
        self.values.append(residual)
        self.total += residual
        self.total_sq += residual * residual
        while len(self.values) > window:
            old = self.values.popleft()
            self.total -= old
            self.total_sq -= old * old

    def stats(self) -> tuple[int, float, float]:
        return len(self.values), self.total, self.total_sq


class LocalStates:
    """A process's own compliance state: the per-state windows, the per-deployment residual windows
    and when each state was last called infeasible.  Shared by the controllers of one state store
    (``shared_controller``), so a controller rebuilt with other settings goes on from it."""

    def __init__(self) -> None:
        self.states: dict[str, WindowState] = {}
        self.residuals: dict[str, ResidualWindow] = {}  # per-deployment feedback residuals (deployment_residuals.py)
        self.infeasible_warned: dict[str, float] = {}
        self.lock = threading.Lock()


class LocalBackend:
    """This process's own state (also the fallback when Redis fails)."""

    def __init__(self, settings: ComplianceSettings, margin: float, store: LocalStates | None = None):
        self.s, self.margin = settings, margin
        self.store = store or LocalStates()
        self._states, self._residuals, self._lock = self.store.states, self.store.residuals, self.store.lock

    def _get(self, key: str) -> WindowState:  # with the lock held
        return self._states.setdefault(key, WindowState())

    def state(self, key: str) -> WindowState:
        """``key``'s sums, delta and flag as of one moment (a copy; the entry deques are shared)."""
        with self._lock:
            return replace(self._get(key))

    def newest(self, key: str) -> WindowState:
        """``state`` as the current settings' windows count it (``newest``)."""
        tail = lambda entries, k: list(islice(reversed(entries), k))[::-1]  # noqa: E731
        with self._lock:
            state = self._get(key)
            if state.n <= self.s.window and state.n_labels <= self.s.label_window:
                return replace(state)
            return newest(state, self.s.window, self.s.label_window, tail(state.decisions, self.s.window),
                          tail(state.labels, self.s.label_window))

    def continue_from(self, key: str, shared: WindowState) -> None:
        """Replace ``key``'s state by one that goes on from ``shared`` (the last read from Redis)."""
        with self._lock:
            self._states[key] = shared.continued()

    def read(self, key: str) -> tuple[float, bool]:
        with self._lock:
            state = self._get(key)
            return state.delta, state.infeasible

    # decision and feedback fetch the state and update it under one hold of the lock: a state that
    # continue_from replaces on another thread is never updated after it has been replaced
    def decision(self, key: str, tau: float, p: float, p_best: float, free_margin: float) -> None:
        with self._lock:
            state = self._get(key)
            state.decisions.append((p, p_best))
            state.n += 1
            state.sum_p += p
            state.sum_p2 += p * p
            state.sum_best += p_best
            while state.n > self.s.window:  # a window made smaller (settings change) shrinks at once
                if state.seeded:
                    state.seeded -= 1
                    old_p, old_p2, old_best = state.seed_mean
                else:
                    old_p, old_best = state.decisions.popleft()
                    old_p2 = old_p * old_p
                state.n -= 1
                state.sum_p -= old_p
                state.sum_p2 -= old_p2
                state.sum_best -= old_best
            update_delta(state, tau, self.s, self.margin, free_margin)

    def feedback(self, key: str, p: float, y: float) -> None:
        with self._lock:
            state = self._get(key)
            state.labels.append((p, y))
            state.n_labels += 1
            state.sum_res += y - p
            state.sum_y += y
            while state.n_labels > self.s.label_window:
                if state.seeded_labels:
                    state.seeded_labels -= 1
                    old_res, old_y = state.seed_label_mean
                else:
                    old_p, old_y = state.labels.popleft()
                    old_res = old_y - old_p
                state.n_labels -= 1
                state.sum_res -= old_res
                state.sum_y -= old_y

    def record_residual(self, deployment_id: str, residual: float, window: int) -> None:
        with self._lock:
            self._residuals.setdefault(deployment_id, ResidualWindow()).add(residual, window)

    def residual_stats(self, deployment_ids: list[str]) -> dict[str, tuple[int, float, float]]:
        """Per deployment: (labels, sum of residuals, sum of their squares)."""
        with self._lock:
            return {d: self._residuals.get(d, ResidualWindow()).stats() for d in deployment_ids}

    def clear_residuals(self, deployment_id: str) -> None:
        with self._lock:
            self._residuals.pop(deployment_id, None)

    def drop_residuals(self) -> None:
        """Forget every local residual window: Redis answers again, and its windows are the evidence
        (a window kept through an outage would judge deployments on old labels in the next one)."""
        if self._residuals:
            with self._lock:
                self._residuals.clear()


# KEYS: hash, decision list, label list.  ARGV: kind ("d" | "f"), tau, p, p_best | label, then the
# settings: window, label_window, min_decisions, min_labels, delta_min, delta_max, decay, margin,
# step, ttl_s, label_prior, then m0 (the label-free margin), start_z, label_z, INFEASIBLE_TOLERANCE and
# the re-sum's chunk.  Returns the state after the call -- delta, infeasible, n, sum_p, sum_p2, sum_best,
# n_labels, sum_res, sum_y (sums as the hash's strings: Lua numbers would be cut to integers) -- and
# how many list entries the call's re-sum walked.
_LUA = """
local h, dl, ll = KEYS[1], KEYS[2], KEYS[3]
local kind, tau, p, x = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local window, lwindow = tonumber(ARGV[5]), tonumber(ARGV[6])
local min_dec, min_lab = tonumber(ARGV[7]), tonumber(ARGV[8])
local dmin, dmax, decay, margin, step, ttl = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]),
  tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local prior, free_margin, start_z, label_z = tonumber(ARGV[15]), tonumber(ARGV[16]), tonumber(ARGV[17]), tonumber(ARGV[18])
local tolerance, chunk, walked = tonumber(ARGV[19]), tonumber(ARGV[20]), 0
local function num(f) return tonumber(redis.call('HGET', h, f) or '0') end
local function split(s) local i = string.find(s, ' '); return tonumber(string.sub(s, 1, i - 1)), tonumber(string.sub(s, i + 1)) end
-- The hash counts each list's entries (n, n_labels: the lengths this script left).  A list shorter
-- than its count lost entries the sums still hold (deleted, evicted or trimmed under the hash); a
-- list with entries whose hash holds neither a count nor sums lost its hash.  Either way that window
-- starts afresh: the list is dropped and its sums zeroed (delta and infeasible stay where the hash
-- has them).  A hash with sums but no count is an older worker's (its sums follow the list), and a
-- list longer than its count holds an older worker's pushes: both are kept.
local function lost(list, count, sum)
  local len, counted = redis.call('LLEN', list), redis.call('HGET', h, count)
  if counted then return len < tonumber(counted) end
  return len > 0 and redis.call('HEXISTS', h, sum) == 0
end
if lost(dl, 'n', 'sum_p') then
  redis.call('UNLINK', dl)
  redis.call('HSET', h, 'sum_p', 0, 'sum_p2', 0, 'sum_best', 0, 'p2_age', 0)
  redis.call('HDEL', h, 'p2_left', 'p2_scan', 'p2_len', 'p2_mark')
end
if lost(ll, 'n_labels', 'sum_y') then
  redis.call('UNLINK', ll)
  redis.call('HSET', h, 'sum_res', 0, 'sum_y', 0)
end
if kind == 'f' then
  redis.call('RPUSH', ll, ARGV[3] .. ' ' .. ARGV[4])
  redis.call('HINCRBYFLOAT', h, 'sum_res', x - p)
  redis.call('HINCRBYFLOAT', h, 'sum_y', x)
  while redis.call('LLEN', ll) > lwindow do  -- a window made smaller shrinks at once
    local op, oy = split(redis.call('LPOP', ll))
    redis.call('HINCRBYFLOAT', h, 'sum_res', op - oy)
    redis.call('HINCRBYFLOAT', h, 'sum_y', -oy)
  end
else
  -- sum_p2 is summed afresh from the list where it is missing or a window old: an older worker's
  -- decisions (a rolling deploy) push and pop entries without it, which would offset it for good,
  -- and running sums drift.  A re-sum walks at most `chunk` entries per call: p2_left counts the
  -- oldest entries not yet walked, p2_scan holds the p^2 of every entry right of them (walked, or
  -- pushed since); when p2_left reaches 0, p2_scan is the window's sum and replaces sum_p2.
  -- p2_len and p2_mark are the list's length and p2_age this script left: the walk goes on only
  -- while both are as it left them.  Anything else that changed the list -- an older worker's
  -- decision (it moves p2_age: +1, or to 0 with its own full re-sum) or a list cut that `lost` did
  -- not catch -- ends the walk without writing it, and the usual rule starts another where one is
  -- due.  A walk keeps p2_age at window or more, so an older worker's next decision re-sums in full.
  local has = redis.call('HEXISTS', h, 'sum_p2') == 1
  local age = redis.call('HINCRBY', h, 'p2_age', 1)
  local left, scan = tonumber(redis.call('HGET', h, 'p2_left') or '-1'), num('p2_scan')
  if left >= 0 and (redis.call('LLEN', dl) ~= num('p2_len') or age ~= num('p2_mark') + 1) then
    left, scan = -1, 0
    redis.call('HDEL', h, 'p2_left', 'p2_scan', 'p2_len', 'p2_mark')
  end
  if left < 0 and (not has or age >= window) then
    left, scan = redis.call('LLEN', dl), 0
    if age < window then age = window; redis.call('HSET', h, 'p2_age', age) end
  end
  redis.call('RPUSH', dl, ARGV[3] .. ' ' .. ARGV[4])
  redis.call('HINCRBYFLOAT', h, 'sum_p', p)
  redis.call('HINCRBYFLOAT', h, 'sum_p2', p * p)
  redis.call('HINCRBYFLOAT', h, 'sum_best', x)
  scan = scan + p * p
  while redis.call('LLEN', dl) > window do
    local op, ob = split(redis.call('LPOP', dl))
    redis.call('HINCRBYFLOAT', h, 'sum_p', -op)
    redis.call('HINCRBYFLOAT', h, 'sum_p2', -op * op)
    redis.call('HINCRBYFLOAT', h, 'sum_best', -ob)
    if left > 0 then left = left - 1 else scan = scan - op * op end
  end
  if left >= 0 then
    local len = redis.call('LLEN', dl)
    left = math.min(left, len - 1)  -- the entry just pushed is right of them
    if left > 0 then
      walked = math.min(chunk, left)
      for _, entry in ipairs(redis.call('LRANGE', dl, left - walked, left - 1)) do local q = split(entry); scan = scan + q * q end
      left = left - walked
    end
    if left == 0 then
      redis.call('HSET', h, 'sum_p2', string.format('%.17g', scan), 'p2_age', 0)
      redis.call('HDEL', h, 'p2_left', 'p2_scan', 'p2_len', 'p2_mark')
    else
      redis.call('HSET', h, 'p2_left', left, 'p2_scan', string.format('%.17g', scan), 'p2_len', len, 'p2_mark', age)
      -- missing: until the walk is done, the walked entries' mean p^2 stands for the rest
      if not has then redis.call('HSET', h, 'sum_p2', string.format('%.17g', scan * len / (len - left))) end
    end
  end
  local n = redis.call('LLEN', dl)
  if n >= min_dec then
    local nl = redis.call('LLEN', ll)
    local residual, weight, ci_half, residual_now, proven, lower = 0, 0, 0, 0, false, 0
    if nl >= min_lab then
      weight = nl / (nl + prior)
      local raw = num('sum_res') / nl
      residual = weight * raw
      residual_now = math.min(residual, raw)
      local mean, z2 = num('sum_y') / nl, label_z * label_z
      local centre = (mean + z2 / (2 * nl)) / (1 + z2 / nl)
      local half = label_z * math.sqrt(math.max(mean * (1 - mean), 0) / nl + z2 / (4 * nl * nl)) / (1 + z2 / nl)
      ci_half = mean - (centre - half)
      proven = centre - half > tau
    end
    local mean_p = num('sum_p') / n
    local p_hat = mean_p + residual
    if proven and mean_p + residual_now - ci_half > tau then lower = dmin end
    local target = tau + math.min(margin, (1 - weight) * free_margin + weight * ci_half)
    local err = target - p_hat
    if num('delta') <= 0 and err > 0 then
      local std_err = math.sqrt(math.max(num('sum_p2') / n - mean_p * mean_p, 0) / n)
      if err < start_z * std_err then err = 0 end
    end
    local delta = (1 - decay) * num('delta') + step * err
    delta = math.min(math.max(delta, lower), dmax)
    redis.call('HSET', h, 'delta', string.format('%.17g', delta))
    local infeasible = 0
    if num('sum_best') / n + residual < tau - tolerance then infeasible = 1 end
    redis.call('HSET', h, 'infeasible', infeasible)
  end
end
redis.call('HSET', h, 'n', redis.call('LLEN', dl), 'n_labels', redis.call('LLEN', ll))
-- one TTL on all three keys, set together: they expire together
redis.call('EXPIRE', h, ttl); redis.call('EXPIRE', dl, ttl); redis.call('EXPIRE', ll, ttl)
local function raw(f) return redis.call('HGET', h, f) or '0' end
return {raw('delta'), raw('infeasible'), redis.call('LLEN', dl), raw('sum_p'), raw('sum_p2'), raw('sum_best'),
  redis.call('LLEN', ll), raw('sum_res'), raw('sum_y'), walked}
"""


# KEYS: hash, residual list.  ARGV: residual, window, ttl_s.  The window's sums change only here; the
# hash's n is the list's length as this script left it, and a list that lost entries the sums hold
# (or whose hash was lost) starts afresh, as in ``_LUA``.
_RESIDUAL_LUA = """
local h, l = KEYS[1], KEYS[2]
local r, window, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local len, counted = redis.call('LLEN', l), redis.call('HGET', h, 'n')
if (counted and len < tonumber(counted)) or (not counted and len > 0 and redis.call('HEXISTS', h, 'sum') == 0) then
  redis.call('UNLINK', l)
  redis.call('HSET', h, 'sum', 0, 'sum_sq', 0)
end
redis.call('RPUSH', l, ARGV[1])
redis.call('HINCRBYFLOAT', h, 'sum', r)
redis.call('HINCRBYFLOAT', h, 'sum_sq', r * r)
while redis.call('LLEN', l) > window do
  local old = tonumber(redis.call('LPOP', l))
  redis.call('HINCRBYFLOAT', h, 'sum', -old)
  redis.call('HINCRBYFLOAT', h, 'sum_sq', -old * old)
end
redis.call('HSET', h, 'n', redis.call('LLEN', l))
redis.call('EXPIRE', h, ttl); redis.call('EXPIRE', l, ttl)
return 1
"""


class RedisBackend:
    """State in Redis, shared by every worker and instance; each call one round trip."""

    def __init__(self, settings: ComplianceSettings, margin: float, url: str, timeout_s: float):
        import os

        import redis

        self.s, self.margin, self.url = settings, margin, url
        self.client = redis.Redis.from_url(  # named per process: CLIENT LIST shows which workers share the state
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, decode_responses=True,
            client_name=f"{CLIENT_NAME_PREFIX}{os.getpid()}",
        )
        self._script = self.client.register_script(_LUA)
        self.resum_chunk = RESUM_CHUNK
        # per state, the last state a call read from Redis: what local state goes on from when Redis fails
        self.seen: dict[str, WindowState] = {}
        self._residual_script = self.client.register_script(_RESIDUAL_LUA)

    def _keys(self, key: str) -> list[str]:
        base = self.s.key_prefix + key
        return [base, base + ":decisions", base + ":labels"]

    def _args(self, kind: str, tau: float, p: float, x: float, free_margin: float) -> list[Any]:
        s = self.s
        return [kind, repr(float(tau)), repr(float(p)), repr(float(x)), s.window, s.label_window, s.min_decisions,
                s.min_labels, s.delta_min, s.delta_max, s.decay, self.margin, s.step, s.ttl_s, s.label_prior,
                repr(float(free_margin)), s.start_z, s.label_z, repr(INFEASIBLE_TOLERANCE), self.resum_chunk]

    def read(self, key: str) -> tuple[float, bool]:
        """delta and the infeasible flag, read with the window sums: the state remembered for a
        fallback is always a whole one, whichever call last reached Redis."""
        state = self.state(key)
        return state.delta, state.infeasible

    def _run(self, key: str, args: list[Any]) -> int:
        delta, infeasible, n, sum_p, sum_p2, sum_best, n_labels, sum_res, sum_y, walked = self._script(
            keys=self._keys(key), args=args)
        self.seen[key] = WindowState(
            n=int(n), sum_p=float(sum_p), sum_p2=float(sum_p2), sum_best=float(sum_best), n_labels=int(n_labels),
            sum_res=float(sum_res), sum_y=float(sum_y), delta=float(delta), infeasible=infeasible == "1",
        )
        return int(walked)

    def decision(self, key: str, tau: float, p: float, p_best: float, free_margin: float) -> int:
        """Returns how many list entries the call's re-sum of sum_p2 walked (at most ``resum_chunk``)."""
        return self._run(key, self._args("d", tau, p, p_best, free_margin))

    def feedback(self, key: str, p: float, y: float) -> None:
        self._run(key, self._args("f", 0.0, p, y, self.margin))

    def _residual_keys(self, deployment_id: str) -> list[str]:
        base = f"{self.s.key_prefix}deployment:{deployment_id}"
        return [base, base + ":residuals"]

    def record_residual(self, deployment_id: str, residual: float, window: int) -> None:
        self._residual_script(keys=self._residual_keys(deployment_id), args=[repr(float(residual)), window, self.s.ttl_s])

    def residual_stats(self, deployment_ids: list[str]) -> dict[str, tuple[int, float, float]]:
        pipe = self.client.pipeline(transaction=True)  # n and the sums of one moment
        for d in deployment_ids:
            h, lst = self._residual_keys(d)
            pipe.hmget(h, "sum", "sum_sq", "n").llen(lst)
        values = pipe.execute()
        stats = {}
        for i, d in enumerate(deployment_ids):
            (total, total_sq, counted), n = values[2 * i], int(values[2 * i + 1])
            # a window that lost its list or hash: empty, as the script's next call leaves it
            lost = list_lost(n, counted, total is not None)
            stats[d] = (0, 0.0, 0.0) if lost else (n, float(total or 0.0), float(total_sq or 0.0))
        return stats

    def clear_residuals(self, deployment_id: str) -> None:
        self.client.delete(*self._residual_keys(deployment_id))

    _STATE_FIELDS = ("delta", "infeasible", "sum_p", "sum_p2", "sum_best", "sum_res", "sum_y", "n", "n_labels")

    def state(self, key: str) -> WindowState:
        """The state as of one moment: the hash's sums, delta and flag and the lists' lengths (one
        MULTI of an HMGET and two LLENs, one round trip).  A window whose list no longer holds what
        the hash counts reads empty, as the script's next call leaves it (``list_lost``)."""
        h, dl, ll = self._keys(key)
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(h, *self._STATE_FIELDS).llen(dl).llen(ll)
        fields, n, n_labels = pipe.execute()
        values = dict(zip(self._STATE_FIELDS, fields))
        if list_lost(n, values["n"], values["sum_p"] is not None):
            n = 0
            values.update(sum_p=None, sum_p2=None, sum_best=None)
        if list_lost(n_labels, values["n_labels"], values["sum_y"] is not None):
            n_labels = 0
            values.update(sum_res=None, sum_y=None)
        f = lambda name: float(values[name] or 0.0)  # noqa: E731
        state = WindowState(
            n=int(n), sum_p=f("sum_p"), sum_p2=f("sum_p2"), sum_best=f("sum_best"), n_labels=int(n_labels),
            sum_res=f("sum_res"), sum_y=f("sum_y"), delta=f("delta"), infeasible=values["infeasible"] == "1",
        )
        self.seen[key] = state
        return state

    def newest(self, key: str) -> WindowState:
        """``state`` as the current settings' windows count it (``newest``); the lists are read only
        when a window was made smaller and the script has not trimmed it yet."""
        state = self.state(key)
        if state.n <= self.s.window and state.n_labels <= self.s.label_window:
            return state
        _, dl, ll = self._keys(key)
        pairs = lambda entries: [tuple(float(v) for v in e.split(" ")) for e in entries]  # noqa: E731
        pipe = self.client.pipeline(transaction=True)
        pipe.lrange(dl, -self.s.window, -1).lrange(ll, -self.s.label_window, -1)
        decisions, labels = pipe.execute()
        return newest(state, self.s.window, self.s.label_window, pairs(decisions), pairs(labels))


_STATE_METHODS = frozenset({"read", "decision", "feedback", "state", "newest"})  # their first argument: the state key
_RESIDUAL_METHODS = frozenset({"record_residual", "residual_stats", "clear_residuals"})  # per-deployment windows
FAILURES_BEFORE_LOCAL = 2  # failed Redis calls of one kind in a row that switch a process to local state


class ComplianceController:
    """``control`` before a decision, ``record_decision`` after it, ``record_feedback`` per label.

    With ``redis_url`` the state is shared through Redis; any Redis failure switches this process to
    its local state, which goes on from the state it last read from Redis (logged once per outage; no
    call raises or waits longer than ``timeout_s``).
    ``artifact_margin``: the artifact's tau calibration margin, the target margin unless the
    settings name one."""

    def __init__(
        self,
        settings: ComplianceSettings | None = None,
        redis_url: str | None = None,
        timeout_s: float = 0.05,
        artifact_margin: float = 0.0,
        local_states: LocalStates | None = None,
    ):
        self.settings = settings or ComplianceSettings()
        self.margin = artifact_margin if self.settings.margin is None else self.settings.margin
        self.local = LocalBackend(self.settings, self.margin, local_states)
        self.redis = RedisBackend(self.settings, self.margin, redis_url, timeout_s) if redis_url else None
        self._down_until = 0.0
        self._failures: dict[str, int] = {}  # per backend method: its consecutive failed Redis calls
        self._failed_at: dict[str, float] = {}  # per backend method: when its last call failed
        self._last_failed = False
        self._outage_logged = False
        self._infeasible_warned = self.local.store.infeasible_warned  # per state store: a rebuilt controller does not warn again
        self.released = False  # set by ``release``: no live strategy uses this controller any more
        self._not_finite_warned = -math.inf

    def close(self) -> None:
        """No live strategy uses this controller: its Redis connection closes (its state stays in
        the state store and in Redis)."""
        self.released = True
        if self.redis is not None:
            try:
                self.redis.client.close()
            except Exception:  # a connection that cannot close cleanly is dropped all the same
                pass

    def _call(self, method: str, *args: Any) -> Any:
        if self.redis is not None:
            began = time.monotonic()
            if began >= self._down_until:
                try:
                    result = getattr(self.redis, method)(*args)
                    self._failures[method], self._last_failed = 0, False
                    if method in _RESIDUAL_METHODS:  # what this process kept while Redis was down is superseded
                        self.local.drop_residuals()
                    self._down_until = 0.0  # an answer, even one begun before an outage was called, ends it
                    if self._outage_logged:
                        logger.warning("PROTEUS compliance: Redis reachable again; shared controller state resumed")
                        self._outage_logged = False
                    return result
                except Exception as exc:  # any Redis trouble: serve this call on local state, never fail the request
                    # Calls of one kind in flight together count once (one stall is one failure): a failure
                    # counts when its call began after the last one failed.
                    counts = began > self._failed_at.get(method, -1.0)
                    self._failed_at[method] = time.monotonic()
                    failures = self._failures[method] = self._failures.get(method, 0) + counts
                    self._last_failed = True
                    # One reply that missed the timeout on a busy host is no outage: the next call asks Redis
                    # again.  The same call failing twice in a row is one (per call: a Redis that answers reads
                    # but not writes is down for writes): local state for retry_after_s.
                    if failures >= FAILURES_BEFORE_LOCAL:
                        self._down_until = time.monotonic() + self.settings.retry_after_s
                    if failures >= FAILURES_BEFORE_LOCAL and not self._outage_logged:
                        logger.warning(
                            "PROTEUS compliance: Redis failed (%s); this process keeps its own controller state, going on "
                            "from the state it last read from Redis, and retries Redis every %.0f s",
                            exc, self.settings.retry_after_s,
                        )
                        self._outage_logged = True
            if method in _STATE_METHODS:  # the first local call on a state since Redis answered for it
                shared = self.redis.seen.pop(args[0], None)
                if shared is not None:
                    self.local.continue_from(args[0], shared)
        return getattr(self.local, method)(*args)

    @property
    def shared(self) -> bool:
        """Whether the last call reached Redis."""
        return self.redis is not None and not self._last_failed and time.monotonic() >= self._down_until

    def control(self, state_key: str, tau: float) -> Control:
        if not self.settings.enabled:
            return Control(tau, 0.0, False, state_key)
        delta, infeasible = self._call("read", state_key)
        if infeasible:
            self._warn_infeasible(state_key, tau)
        return Control(tau + delta, delta, infeasible, state_key)

    def record_decision(
        self, state_key: str, tau: float, p_chosen: float, p_best: float | None = None, p_ref: float | None = None
    ) -> None:
        """``p_best``: the highest calibrated p among the candidates (what the top operating point
        would reach); defaults to ``p_chosen``.  ``p_ref``: the mean calibrated p static calibration
        validated at ``tau`` (``TauMapper.reference_p``); None: the label-free target is tau + margin."""
        p_best = p_chosen if p_best is None else p_best
        if not all(math.isfinite(float(v)) for v in (tau, p_chosen, p_best)):  # a non-finite p_ref: the margin
            self._warn_not_finite(state_key)  # one NaN would poison the window's sums for good
            return
        if self.settings.enabled:
            self._call("decision", state_key, float(tau), float(p_chosen), float(p_best),
                       label_free_margin(self.margin, float(tau), p_ref))

    def record_feedback(self, state_key: str, tau: float, p_chosen: float, outcome: float) -> None:
        if not 0.0 <= outcome <= 1.0:
            raise ValueError(f"outcome must be in [0, 1]; got {outcome!r}")
        if not math.isfinite(float(p_chosen)):
            self._warn_not_finite(state_key)
            return
        if self.settings.enabled:
            self._call("feedback", state_key, float(p_chosen), float(outcome))

    def record_residual(self, deployment_id: str, residual: float, window: int) -> None:
        """A feedback label's residual in a per-deployment window (``deployment_residuals.py``)."""
        self._call("record_residual", deployment_id, residual, window)

    def residual_stats(self, deployment_ids: list[str]) -> dict[str, tuple[int, float, float]]:
        return self._call("residual_stats", deployment_ids)

    def clear_residuals(self, deployment_id: str) -> None:
        """The breaker's cooldown is over: the deployment's window starts afresh."""
        self._call("clear_residuals", deployment_id)

    def snapshot(self, state_key: str) -> dict[str, Any]:
        state: WindowState = self._call("newest", state_key)
        realised, lo, hi = realised_bounds(state.n_labels, state.sum_y)
        return {
            "n": state.n,
            "p_mean": state.sum_p / state.n if state.n else math.nan,
            "p_best_mean": state.sum_best / state.n if state.n else math.nan,
            "n_labels": state.n_labels,
            "realised_mean": realised,
            "realised_ci95": (lo, hi),
            "residual": state.sum_res / state.n_labels if state.n_labels else math.nan,
            "delta": state.delta,
            "infeasible": state.infeasible,
        }

    def _warn_not_finite(self, state_key: str) -> None:
        now = time.monotonic()
        if now - self._not_finite_warned >= 60.0:
            self._not_finite_warned = now
            logger.warning("PROTEUS compliance: %s: a decision or label with a p that is not a finite number is left out "
                           "of the controller's window", state_key)

    def _warn_infeasible(self, state_key: str, tau: float) -> None:
        now = time.monotonic()
        if now - self._infeasible_warned.get(state_key, -math.inf) >= 60.0:
            if len(self._infeasible_warned) > 1024:
                self._infeasible_warned.clear()
            self._infeasible_warned[state_key] = now
            logger.warning(
                "PROTEUS compliance: %s is infeasible: even the most accurate candidates are predicted below tau=%.4g "
                "on the recent window (requests are served at the top operating point and marked "
                "x-proteus-infeasible: true)", state_key, tau,
            )


_shared: dict[tuple, ComplianceController] = {}
_shared_lock = threading.Lock()


def _state_store(controller: ComplianceController) -> tuple:
    """Where a controller's states are kept: the Redis URL and the key prefix."""
    return (controller.redis.url if controller.redis is not None else None, controller.settings.key_prefix)


def shared_controller(
    settings: ComplianceSettings, redis_url: str | None, timeout_s: float, artifact_margin: float,
    replaces: ComplianceController | None = None,
) -> ComplianceController:
    """One controller per configuration per process: rebuilt routers keep the local state (and the
    Redis outage flag) of the ones they replace.  A new configuration gets a new controller; when it
    ``replaces`` the controller of the router's previous strategy and keeps its state store (Redis
    URL and key prefix), it goes on from that one's local state -- windows, delta, infeasible flag,
    residual windows -- with the new settings.  A state is keyed by its tier and tau (or tau
    bucket), so a change that alters what a state means starts another one.  ``release_unused``
    closes the controllers no live strategy uses."""
    key = (settings.model_dump_json(), redis_url, timeout_s, artifact_margin)
    with _shared_lock:
        if key not in _shared:
            same_store = replaces is not None and _state_store(replaces) == (redis_url, settings.key_prefix)
            _shared[key] = ComplianceController(settings, redis_url, timeout_s, artifact_margin,
                                                replaces.local.store if same_store else None)
        return _shared[key]


def release_unused(live: Any) -> list[ComplianceController]:
    """Close the shared controllers not in ``live`` (their Redis connections); returns them."""
    keep = {id(c) for c in live}
    with _shared_lock:
        released = [_shared.pop(k) for k in [k for k, c in _shared.items() if id(c) not in keep]]
    for controller in released:
        controller.close()
    return released
