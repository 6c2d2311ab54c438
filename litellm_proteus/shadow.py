"""Shadow evaluation: full-information rows from live traffic, off the request path, within a daily budget.

``shadow: {rate: 0.01, candidates: 1, judge_model: GROUP, daily_budget_usd: 5}`` in the strategy
config (off by default; ``tiers: {premium: 0.0}`` sets a tier's rate).  For a sampled share of the
requests PROTEUS routes (a ``/v1/completions`` prompt reaches the router as one user message, and is
shadowed as that message through chat completions):

1. at routing time the request is sampled (``rate_for(tier)``) and its candidates remembered (at
   most ``max_pending`` per process, the oldest forgotten: counted as ``no_answer``);
2. when LiteLLM's success callback reports the client's response complete, a background task (its
   own ``asyncio`` task: the callback returns at once, and LiteLLM's callback time limit does not
   apply) calls ``candidates`` other candidate models of the request (other slots, drawn uniformly;
   one deployment each) with the same messages, directly through ``litellm.acompletion`` with the
   deployment's parameters (no router retries, fallbacks or cooldowns: a failing shadow call never
   changes how clients are routed), ``timeout_s`` each;
3. the judge (``judge_model``, a model group of this proxy, called through the router) scores the
   served answer and each shadow answer with the rubric of ``proteus judge``
   (``litellm_proteus.judge_rubric``);
4. one shadow row (``litellm_proteus.shadow_rows``) is written beside the decision log.

Before its first call a job reserves its estimated cost in the daily budget
(``shadow_budget.DailyBudget``): the candidates' cost estimates of the decision plus, per answer to
judge, the judge prompt's ceil(characters / 4) tokens and ``judge_max_tokens`` at the judge group's
highest price.  A reservation that would pass the cap is refused and the request skipped (counted,
and a log line at most every ``WARN_EVERY_S``); a reserved job makes all its calls, so no paid answer
goes unjudged for want of budget.  When the job ends the reservation is settled to the calls' real
cost (usage x the deployment's price, ``costs.deployment_prices``, else LiteLLM's response cost; a
call that timed out, or whose cost neither gives, counts its estimate, as the provider may bill it).
A judge group with a deployment without a price is refused: every job is skipped (``unpriced_judge``,
logged naming ``shadow.judge_model`` and the fix) before any call, as the cap could not count it.
Errors and timeouts are counted and logged, never raised: the client's request is long answered.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import math
import random
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import shadow_metrics
from .costs import CHARS_PER_TOKEN, deployment_id, deployment_prices
from .decision_log import FILE_MODES, RotatingJsonl, finite_number
from .judge_rubric import judge_messages, parse_score
from .observability import RateLimitedWarnings
from .shadow_budget import DailyBudget
from .shadow_rows import SHADOW_PREFIX, shadow_row
from .shadow_settings import ShadowSettings

logger = logging.getLogger("litellm_proteus.shadow")
WARN_EVERY_S = 60.0
SHADOW_METADATA_KEY = "proteus_shadow_of"  # metadata of shadow and judge calls: never shadowed themselves


@dataclass(frozen=True)
class ShadowCandidate:
    model: str  # the artifact slot's name: the shadow row's column
    deployment: Mapping[str, Any]  # the router's deployment
    est_cost_usd: float  # the decision's cost estimate (the row's cost when the model is not called)


@dataclass(frozen=True)
class ShadowJob:
    call_id: str
    prompt: str
    messages: list[dict[str, Any]]
    tier: str
    tau: float  # tau_effective of the decision
    candidates: list[ShadowCandidate]  # one per slot, the served one included
    served: int  # index into candidates


def call_cost(response: Any, deployment: Mapping[str, Any] | None, unknown: float = 0.0) -> float:
    """Usage x the deployment's per-token prices; LiteLLM's own cost of the response when the
    deployment has no price; ``unknown`` (the call's estimate) when neither is known.  A response
    cost that is not a finite number >= 0 is unknown: one NaN charged would disable the cap."""
    usage = getattr(response, "usage", None)
    prices = deployment_prices(deployment) if deployment is not None else None
    if prices is not None and usage is not None:
        return (float(getattr(usage, "prompt_tokens", 0) or 0) * prices.input_per_token
                + float(getattr(usage, "completion_tokens", 0) or 0) * prices.output_per_token)
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost") if isinstance(hidden, Mapping) else None
    cost = finite_number(cost)
    return cost if cost is not None and cost >= 0 else unknown


def unpriced(deployments: Sequence[Mapping[str, Any]]) -> list[str]:
    """The deployments without a price (``costs.deployment_prices``), as ``group/model (id ...)``:
    the judge's calls on them could not be counted in the daily cap."""
    return [f"{d.get('model_name')}/{(d.get('litellm_params') or {}).get('model')} (id {deployment_id(d) or '?'})"
            for d in deployments if deployment_prices(d) is None]


def unpriced_judge_message(judge_model: str | None, names: Sequence[str]) -> str:
    return (f"shadow.judge_model {judge_model!r} has deployments without a price: {list(names)}; its calls cannot be "
            "counted in shadow.daily_budget_usd. Give each input_cost_per_token and output_cost_per_token (USD per "
            "token) in its litellm_params or model_info (LiteLLM's cost map does not know this model)")


def response_text(response: Any) -> str | None:
    try:
        choice = response.choices[0]
        message = getattr(choice, "message", None)
        text = message.content if message is not None else getattr(choice, "text", None)
    except (AttributeError, IndexError, TypeError):
        return None
    return text if isinstance(text, str) else None


# (model group, messages, **kwargs) -> response: the router's acompletion (judge calls)
JudgeCall = Callable[..., Awaitable[Any]]
# deployment id -> deployment dict (to price a judge call)
DeploymentLookup = Callable[[str], Mapping[str, Any] | None]
# the judge group's deployments (to estimate a judge call's cost before it is made)
JudgeDeployments = Callable[[], Sequence[Mapping[str, Any]]]


class ShadowEvaluator:
    """One per process and configuration.  ``rng``: the sampling and candidate draws."""

    def __init__(self, settings: ShadowSettings, log_dir: str, max_bytes: int, max_files: int, budget: DailyBudget,
                 rng: random.Random | None = None, file_mode: str = "0600"):
        self.settings = settings
        self.budget = budget
        self.files = RotatingJsonl(log_dir, max_bytes, max_files, prefix=SHADOW_PREFIX, file_mode=FILE_MODES[file_mode])
        self.rng = rng or random.Random()
        self.pending: OrderedDict[str, ShadowJob] = OrderedDict()
        self.tasks: set[asyncio.Task] = set()
        self._lock = threading.Lock()  # pending: routing and callbacks may run on different threads
        self._write_lock = threading.Lock()
        self._closed = False
        self._warnings = RateLimitedWarnings(logger, WARN_EVERY_S)

    # -- on the request path: cheap, never raises ------------------------------------------------
    def sample(self, tier: str | None) -> bool:
        rate = self.settings.rate_for(tier)
        return rate > 0 and self.rng.random() < rate

    def offer(self, job: ShadowJob) -> None:
        """Remember a sampled request until its response is complete."""
        with self._lock:
            self.pending[job.call_id] = job
            self.pending.move_to_end(job.call_id)
            while len(self.pending) > self.settings.max_pending:
                self.pending.popitem(last=False)
                shadow_metrics.record_skip("no_answer")

    def forget(self, call_id: str) -> None:
        with self._lock:
            self.pending.pop(call_id, None)

    def answered(self, call_id: str, response: Any, judge: JudgeCall, lookup: DeploymentLookup,
                 judge_deployments: JudgeDeployments) -> asyncio.Task | None:
        """The client's response for ``call_id`` is complete: start its shadow job in the background
        (never raises: it runs in LiteLLM's success callback)."""
        try:
            return self._start(call_id, response, judge, lookup, judge_deployments)
        except Exception as exc:
            self._skip("error", "start", "PROTEUS shadow: cannot start the job for %s: %s", call_id, _short(exc))
            return None

    def _start(self, call_id: str, response: Any, judge: JudgeCall, lookup: DeploymentLookup,
               judge_deployments: JudgeDeployments) -> asyncio.Task | None:
        with self._lock:
            job = self.pending.pop(call_id, None)
        if job is None:
            return None
        if len(self.tasks) >= self.settings.max_in_flight:
            self._skip("busy", "busy", "PROTEUS shadow: %d jobs running (max_in_flight); skipping sampled requests",
                       len(self.tasks))
            return None
        loop = asyncio.get_running_loop()
        served = job.candidates[job.served]
        served_cost = call_cost(response, served.deployment, served.est_cost_usd)
        coroutine = self.run(job, response_text(response), served_cost, judge, lookup, judge_deployments)
        # a fresh context: nothing of the callback's (LiteLLM's callback deadline) reaches the job
        task = loop.create_task(coroutine, context=contextvars.Context())
        self.tasks.add(task)  # referenced until done: the loop holds tasks weakly
        task.add_done_callback(self.tasks.discard)
        return task

    # -- the background job ------------------------------------------------------------------------
    async def run(self, job: ShadowJob, served_text: str | None, served_cost: float, judge: JudgeCall,
                  lookup: DeploymentLookup, judge_deployments: JudgeDeployments) -> dict[str, Any] | None:
        try:
            return await self._run(job, served_text, served_cost, judge, lookup, judge_deployments)
        except Exception as exc:  # never escapes: the request it shadows is long answered
            self._skip("error", "job", "PROTEUS shadow: job for %s failed: %s", job.call_id, exc)
            return None

    async def _run(self, job: ShadowJob, served_text: str | None, served_cost: float, judge: JudgeCall,
                   lookup: DeploymentLookup, judge_deployments: JudgeDeployments) -> dict[str, Any] | None:
        served = job.candidates[job.served]
        others = [c for i, c in enumerate(job.candidates) if i != job.served]
        picked = self.rng.sample(others, min(self.settings.candidates, len(others)))
        judges = list(judge_deployments())
        if not judges:  # nothing could judge the answers: pay for none of them
            self._skip("error", "judge_model", "PROTEUS shadow: shadow.judge_model %r is not a model group of this proxy; "
                       "no shadow calls", self.settings.judge_model)
            return None
        no_price = unpriced(judges)
        if no_price:  # a judge call the cap cannot count is not made, nor the calls it would judge
            self._skip("unpriced_judge", "unpriced_judge", "PROTEUS shadow: %s; no shadow calls",
                       unpriced_judge_message(self.settings.judge_model, no_price))
            return None
        judge_cost = self.judge_estimate(job.prompt, served_text or "", judges)
        reserved = sum(c.est_cost_usd for c in picked) + (len(picked) + 1) * judge_cost
        day, total, redis_down = await self.budget.areserve(reserved)
        shadow_metrics.record_budget(total)
        if day is None:
            if redis_down:  # a spend that cannot be checked against the shared cap is not made
                self._skip("budget_unavailable", "budget_unavailable", "PROTEUS shadow: the daily budget in Redis cannot "
                           "be read; no shadow calls until Redis answers (%.4f USD spent today as last read)", total)
            else:
                self._skip("budget", "budget", "PROTEUS shadow: daily budget of %.4f USD spent; no shadow calls until "
                           "00:00 UTC", self.budget.cap_usd)
            return None
        spend: list[float] = []  # the real cost of each call made
        try:
            return await self._calls(job, served, picked, served_text, served_cost, judge, lookup, judge_cost, spend)
        finally:  # the reservation becomes the calls' real cost (errors and cancellation too)
            shadow_metrics.record_budget(await self.budget.acharge(sum(spend) - reserved, day))

    async def _calls(self, job: ShadowJob, served: ShadowCandidate, picked: list[ShadowCandidate], served_text: str | None,
                     served_cost: float, judge: JudgeCall, lookup: DeploymentLookup, judge_cost: float,
                     spend: list[float]) -> dict[str, Any] | None:
        answers: dict[str, str | None] = {served.model: served_text}
        costs: dict[str, float] = {c.model: c.est_cost_usd for c in job.candidates}
        costs[served.model] = served_cost
        for candidate in picked:
            text, cost = await self._shadow_call(job, candidate, spend)
            answers[candidate.model], costs[candidate.model] = text, cost
        scores: dict[str, float | None] = {}
        for model, text in answers.items():
            if text is not None:
                scores[model] = await self._judge(job, text, judge, lookup, spend, judge_cost)
        if not any(v is not None for v in scores.values()):
            shadow_metrics.record_skip("unscored")
            return None
        row = shadow_row(call_id=job.call_id, prompt=job.prompt, tier=job.tier, tau=job.tau, models=[c.model for c in job.candidates],
                         scores=scores, costs=costs, served=served.model,
                         call_share=len(picked) / (len(job.candidates) - 1) if len(job.candidates) > 1 else 1.0)
        if not await asyncio.to_thread(self._write, row):
            self._skip("too_large", "too_large", "PROTEUS shadow: the row for %s is over max_bytes (%d): not written",
                       job.call_id, self.files.max_bytes)
            return None
        shadow_metrics.record_row()
        return row

    def judge_estimate(self, prompt: str, answer: str, deployments: Sequence[Mapping[str, Any]]) -> float:
        """One judge call's cost estimate: the judge prompt's ceil(characters / 4) tokens and
        ``judge_max_tokens`` at the highest price among the judge group's deployments (0: none priced)."""
        tokens_in = math.ceil(sum(len(m["content"]) for m in judge_messages(prompt, answer)) / CHARS_PER_TOKEN)
        prices = [p for p in map(deployment_prices, deployments) if p is not None]
        return max((tokens_in * p.input_per_token + self.settings.judge_max_tokens * p.output_per_token for p in prices),
                   default=0.0)

    async def _shadow_call(self, job: ShadowJob, candidate: ShadowCandidate, spend: list[float]) -> tuple[str | None, float]:
        import litellm

        params = dict(candidate.deployment.get("litellm_params") or {})
        try:
            response = await asyncio.wait_for(
                litellm.acompletion(**{**params, "messages": job.messages, "num_retries": 0, "timeout": self.settings.timeout_s,
                              "metadata": {SHADOW_METADATA_KEY: job.call_id}}),
                self.settings.timeout_s,
            )
        except Exception as exc:  # an upstream error or timeout: this candidate stays unscored
            self._record_call("candidate", False, billed_if_timed_out(exc, candidate.est_cost_usd), spend)
            self._warnings.warn("call", "PROTEUS shadow: call to %s failed: %s", candidate.model, _short(exc))
            return None, candidate.est_cost_usd
        cost = self._record_call("candidate", True, call_cost(response, candidate.deployment, candidate.est_cost_usd), spend)
        return response_text(response), cost

    async def _judge(self, job: ShadowJob, answer: str, judge: JudgeCall, lookup: DeploymentLookup,
                     spend: list[float], estimate: float) -> float | None:
        try:
            reply = await asyncio.wait_for(
                judge(model=self.settings.judge_model, messages=judge_messages(job.prompt, answer), temperature=0,
                      max_tokens=self.settings.judge_max_tokens, num_retries=0, timeout=self.settings.timeout_s,
                      metadata={SHADOW_METADATA_KEY: job.call_id}),
                self.settings.timeout_s,
            )
        except Exception as exc:
            self._record_call("judge", False, billed_if_timed_out(exc, estimate), spend)
            self._warnings.warn("judge", "PROTEUS shadow: judge call failed: %s", _short(exc))
            return None
        hidden = getattr(reply, "_hidden_params", None) or {}
        model_id = hidden.get("model_id") if isinstance(hidden, Mapping) else None
        self._record_call("judge", True, call_cost(reply, lookup(str(model_id)) if model_id else None, estimate), spend)
        return parse_score(response_text(reply))

    # -- what every outcome records ------------------------------------------------------------------
    def _skip(self, reason: str, kind: str, message: str, *args: Any) -> None:
        """A sampled request that gets no shadow row: counted by ``reason``, logged (rate-limited per ``kind``)."""
        shadow_metrics.record_skip(reason)
        self._warnings.warn(kind, message, *args)

    @staticmethod
    def _record_call(role: str, ok: bool, cost: float, spend: list[float]) -> float:
        """A shadow or judge call made (``ok``: it answered): counted in the metrics, its cost added to the job's spend."""
        shadow_metrics.record_call(role, ok, cost)
        spend.append(cost)
        return cost

    def _write(self, row: dict[str, Any]) -> bool:
        """Append the row (whole or not at all); False for a row over ``max_bytes``.  A folder removed
        under the writer is made again and the row written into a new file (``RotatingJsonl.write_lines``)."""
        with self._write_lock:
            try:
                return self.files.write(json.dumps(row, separators=(",", ":")) + "\n")
            finally:
                if self._closed:  # a job that outlived a settings change: its row is written, no file stays open
                    self.files.close()

    def close(self) -> None:
        """No live strategy uses this evaluator (a settings change replaced it): its file and its
        budget's Redis connections close; jobs still running write their rows and settle their
        reservations, and close both again."""
        with self._write_lock:
            self._closed = True
            self.files.close()
        self.budget.close()

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait for the running jobs (tests, shutdown)."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout)


def billed_if_timed_out(exc: BaseException, estimate: float) -> float:
    """What a failed call is charged: its estimate when it timed out (the provider may bill the
    answer the job stopped waiting for), else 0 (an error answer)."""
    import litellm

    # asyncio.TimeoutError: wait_for's on Python 3.10, where it is not the builtin TimeoutError
    return estimate if isinstance(exc, (TimeoutError, asyncio.TimeoutError, litellm.Timeout)) else 0.0


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def job_candidates(models: Sequence[str], deployments: Sequence[Mapping[str, Any]], costs: Sequence[float],
                   served: int) -> tuple[list[ShadowCandidate], int]:
    """One candidate per slot (the served deployment for its own slot, the first listed for the
    others) and the served one's index among them."""
    pick: dict[str, int] = {}
    for i, model in enumerate(models):
        if model not in pick or i == served:
            pick[model] = i
    index = sorted(pick.values())
    return [ShadowCandidate(models[i], deployments[i], float(costs[i])) for i in index], index.index(served)
