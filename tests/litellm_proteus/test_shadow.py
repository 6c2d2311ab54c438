"""Shadow evaluation's parts: the daily budget (per process and through a real redis-server), the
sampling, the pending-request bound, one candidate per slot, the settings' validation."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import httpx
import litellm
import pytest
import redis
import respx

from litellm_proteus import shadow_metrics
from litellm_proteus.config import ProteusConfig, ProteusConfigError
from litellm_proteus.shadow import ShadowEvaluator, ShadowJob, job_candidates
from litellm_proteus.shadow_budget import CLIENT_NAME, KEY_TTL_S, DailyBudget, utc_day
from litellm_proteus.shadow_settings import ShadowSettings


def reply_lost(applied):
    """``applied`` (a budget's Redis call) with its reply lost: Redis applies it, the caller times out."""

    def applied_then_timed_out(**kwargs):
        applied(**kwargs)
        raise redis.exceptions.TimeoutError("reply lost")

    return applied_then_timed_out

DAY = 1_800_000_000.0  # 2027-01-15 08:00 UTC
ON = {"rate": 0.25, "judge_model": "judge", "daily_budget_usd": 1.0}


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def admits(budget: DailyBudget) -> bool:
    """Whether any budget is left today, as a job learns it: a reservation of nothing is admitted."""
    return budget.reserve(0.0)[0] is not None


def test_budget_per_process_stops_at_the_cap_and_starts_again_the_next_utc_day():
    clock = Clock(DAY)
    budget = DailyBudget(0.01, clock=clock)
    assert admits(budget)
    assert budget.charge(0.004) == pytest.approx(0.004) and budget.charge(0.0) == pytest.approx(0.004)
    assert admits(budget)
    assert budget.charge(0.007) == pytest.approx(0.011) and not admits(budget)
    clock.now = DAY + 86400  # the next UTC day
    assert utc_day(clock.now) != utc_day(DAY) and budget.spent() == 0.0 and admits(budget)


def test_budget_through_redis_is_shared_atomically_and_expires(redis_server):
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    clock = Clock(DAY)
    a, b = (DailyBudget(0.05, redis.Redis.from_url(redis_server.url, decode_responses=True), "t:spend:", clock=clock)
            for _ in range(2))
    for _ in range(20):  # two workers charging in turn
        a.charge(0.001)
        b.charge(0.0015)
    key = f"t:spend:{utc_day(DAY)}"
    assert float(client.get(key)) == pytest.approx(0.05) and a.spent() == pytest.approx(0.05) == b.spent()
    assert not admits(a) and not admits(b)
    assert 0 < client.ttl(key) <= KEY_TTL_S
    clock.now = DAY + 86400
    assert admits(a)


def test_while_redis_is_down_nothing_is_admitted_and_settlements_reach_redis_when_it_is_back(redis_server):
    from .conftest import start_redis

    client = redis.Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=0.5, socket_connect_timeout=0.5)
    budget = DailyBudget(1.0, client, "t:down:", retry_after_s=0.0, clock=Clock(DAY))
    day, total = budget.reserve(0.004)[:2]
    assert day == utc_day(DAY) and total == pytest.approx(0.004)
    redis_server.stop()
    # a process counting from its own zero could spend the whole shared cap again: refuse instead
    assert budget.reserve(0.001) == (None, pytest.approx(0.004), True)  # Redis is down; the total it last gave
    assert not admits(budget)
    # a running job settles: kept for Redis, and counted in what the process reports meanwhile
    assert budget.charge(0.003, day) == pytest.approx(0.007) and budget.spent() == pytest.approx(0.007)
    restarted = start_redis(redis_server.port)
    try:
        # Redis answers again (a fresh, empty server): the settlement is added to the shared total first
        assert admits(budget)
        assert float(client.get(f"t:down:{day}")) == pytest.approx(0.003) and budget.spent() == pytest.approx(0.003)
        assert budget.charge(0.001) == pytest.approx(0.004)  # added once, not again
    finally:
        restarted.stop()


def test_a_settlement_whose_reply_was_lost_is_added_to_redis_once(redis_server):
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    budget = DailyBudget(1.0, client, "t:lost:", retry_after_s=0.0, clock=Clock(DAY))
    day = budget.reserve(0.10).day
    applied = budget._charge
    budget._charge = reply_lost(applied)  # Redis adds it, the reply never arrives
    budget.charge(0.05, day)
    budget._charge = applied
    assert budget.spent() == pytest.approx(0.15)  # the pending settlement is sent again, added once
    assert float(client.get(f"t:lost:{day}")) == pytest.approx(0.15) and not budget._pending


def test_a_reservation_whose_reply_was_lost_is_released_once(redis_server):
    """Redis makes the reservation, its reply is lost: the job does not run, and the release sent on
    the next call takes the amount back once, however often it is sent."""
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    budget = DailyBudget(1.0, client, "t:lostres:", retry_after_s=0.0, clock=Clock(DAY))
    day = budget.reserve(0.10).day  # a job that runs
    key = f"t:lostres:{day}"
    applied = budget._reserve
    budget._reserve = reply_lost(applied)
    assert budget.reserve(0.30) == (None, pytest.approx(0.10), True)  # refused to its job, which never calls
    assert float(client.get(key)) == pytest.approx(0.40)  # yet charged in Redis
    [release] = budget._pending
    budget._reserve = applied
    assert budget.spent() == pytest.approx(0.10) and float(client.get(key)) == pytest.approx(0.10)
    assert not budget._pending and client.get(budget._reservation_key(day, release[1])) == "released"
    assert budget._send(release) == pytest.approx(0.10)  # sent again (its own reply lost): taken back once
    assert budget.charge(0.02 - 0.10, day) == pytest.approx(0.02)  # the job that ran settles as before
    assert float(client.get(key)) == pytest.approx(0.02)


def test_a_reservation_that_reaches_redis_after_its_release_is_refused(redis_server):
    """The client gave up on a reservation still in flight and its release got there first: the
    release takes back nothing, and the late reservation charges nothing."""
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    budget = DailyBudget(1.0, client, "t:late:", retry_after_s=0.0, clock=Clock(DAY))
    day = budget.reserve(0.10).day
    applied, in_flight = budget._reserve, {}

    def not_there_yet(**kwargs):
        in_flight.update(kwargs)
        raise redis.exceptions.TimeoutError("no reply yet")

    budget._reserve = not_there_yet
    assert budget.reserve(0.30)[0] is None
    budget._reserve = applied
    assert budget.spent() == pytest.approx(0.10) and not budget._pending  # released: a tombstone, nothing taken
    ok, total = applied(**in_flight)  # the reservation arrives
    assert int(ok) == 0 and float(total) == pytest.approx(0.10)
    assert float(client.get(f"t:late:{day}")) == pytest.approx(0.10) and budget.spent() == pytest.approx(0.10)


def test_settlements_pending_for_an_earlier_day_survive_a_day_change(redis_server):
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    clock = Clock(DAY)
    budget = DailyBudget(1.0, client, "t:days:", retry_after_s=0.0, clock=clock)
    day_a = budget.reserve(0.10).day
    applied = budget._charge

    def down(**kwargs):
        raise redis.exceptions.ConnectionError("down")

    budget._charge = down
    budget.charge(-0.04, day_a)  # a job of day A settles while Redis is down
    clock.now = DAY + 86400
    budget.charge(0.01)  # and one of the next day
    budget._charge = applied  # Redis answers again
    budget.spent()
    assert float(client.get(f"t:days:{day_a}")) == pytest.approx(0.06)
    assert float(client.get(f"t:days:{utc_day(clock.now)}")) == pytest.approx(0.01)


def test_a_budget_replacing_one_in_process_memory_counts_the_days_spend_and_its_running_jobs():
    """A settings change gives the shadow evaluator a new budget (here a lower cap): the replaced
    one's running job stays reserved in it until that job settles through the replaced budget."""
    clock = Clock(DAY)
    old = DailyBudget(1.0, clock=clock)
    day = old.reserve(0.6).day  # a job of the replaced evaluator, still running
    new = DailyBudget(0.8, clock=clock, replaces=old)
    assert new.spent() == pytest.approx(0.6)
    assert new.reserve(0.3) == (None, pytest.approx(0.6), False)  # 0.9 would pass the new cap
    old.charge(0.1 - 0.6, day)  # the job ends: it cost 0.1
    assert new.spent() == pytest.approx(0.1) and new.reserve(0.3)[0] == day
    clock.now = DAY + 86400
    assert new.spent() == 0.0 and new.reserve(0.8)[0] is not None  # the next UTC day starts from 0


def test_a_budget_replacing_one_on_the_same_redis_sends_what_it_left_unsent(tmp_path):
    """Redis goes down with a release and a settlement of the replaced budget unsent, and a running
    job of it settles after the change: the new budget sends all three once Redis is back."""
    from .conftest import start_redis

    server = start_redis(directory=tmp_path)  # its SAVE outlives a restart on the same port

    def client():
        return redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=0.5, socket_connect_timeout=0.5)

    try:
        clock = Clock(DAY)
        old = DailyBudget(1.0, client(), "t:handover:", retry_after_s=0.0, clock=clock, redis_url=server.url)
        day = old.reserve(0.10).day  # job 1
        old.reserve(0.20)  # job 2
        applied = old._reserve
        old._reserve = reply_lost(applied)
        assert old.reserve(0.30)[0] is None  # charged in Redis, its job never runs: a release is pending
        old._reserve = applied
        key = f"t:handover:{day}"
        saved = client()
        assert float(saved.get(key)) == pytest.approx(0.60)
        saved.save()
        server.stop()
        old.charge(0.05 - 0.10, day)  # job 1 settles while Redis is down
        assert [kind for kind, *_ in old._pending] == ["release", "charge"]
        other = DailyBudget(1.0, client(), "t:elsewhere:", retry_after_s=0.0, clock=clock, redis_url=server.url, replaces=old)
        assert not other._pending  # another key prefix: none of it belongs there
        new = DailyBudget(2.0, client(), "t:handover:", retry_after_s=0.0, clock=clock, redis_url=server.url, replaces=old)
        assert new.reserve(0.01)[0] is None  # Redis is down: nothing admitted
        old.charge(0.15 - 0.20, day)  # job 2 settles after the change, Redis still down
        server = start_redis(server.port, directory=tmp_path)  # the saved 0.60
        assert new.spent() == pytest.approx(0.60 - 0.30 - 0.05 - 0.05)
        assert float(saved.get(key)) == pytest.approx(0.20) and not new._pending and not old._pending
        assert old.spent() == pytest.approx(0.20)  # the replaced budget sends nothing twice
    finally:
        server.stop()


def eventually(condition, timeout_s: float = 10.0) -> bool:
    """``condition()`` once it holds (Redis handles a closed socket or a paused command when it gets to it)."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_a_budget_closed_during_its_call_closes_the_connection_once_the_call_ends(redis_server):
    """A settings change releases the budget of a replaced evaluator while one of its jobs settles:
    the settlement runs to its end on the connection it started on (a cut one would be sent again
    on a new connection), which closes then; a later settlement opens and closes one again."""
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)

    def budget_connections() -> list[dict]:
        return [c for c in raw.client_list() if c.get("name") == CLIENT_NAME]

    def received() -> int:
        return raw.info("stats")["total_connections_received"]

    client = redis.Redis.from_url(redis_server.url, decode_responses=True, client_name=CLIENT_NAME, socket_timeout=30)
    budget = DailyBudget(1.0, client, "t:closing:", redis_url=redis_server.url)
    day = budget.reserve(0.5).day
    settled: list[float] = []
    raw.client_pause(30_000, all=False)  # write commands wait in Redis: the settlement is held mid-call
    try:
        settling = threading.Thread(target=lambda: settled.append(budget.charge(0.2 - 0.5, day)))
        settling.start()
        assert eventually(lambda: [c["flags"] for c in budget_connections()] == ["b"])  # its call is in Redis
        opened = received()
        budget.close()
        assert len(budget_connections()) == 1
    finally:
        raw.client_unpause()
    settling.join()
    assert settled == [pytest.approx(0.2)] and received() == opened
    assert eventually(lambda: not budget_connections())
    assert budget.charge(0.1, day) == pytest.approx(0.3) and eventually(lambda: not budget_connections())
    assert float(raw.get(f"t:closing:{day}")) == pytest.approx(0.3)
    raw.close()


def evaluator(tmp_path, **settings) -> ShadowEvaluator:
    return ShadowEvaluator(ShadowSettings(**{**ON, **settings}), str(tmp_path), 1 << 20, 10, DailyBudget(1.0),
                           rng=random.Random(0))


def test_sampling_follows_the_tier_rate(tmp_path):
    shadow = evaluator(tmp_path, tiers={"premium": 0.0, "economy": 1.0})
    n = 4000
    share = sum(shadow.sample("standard") for _ in range(n)) / n
    assert abs(share - 0.25) < 0.025  # binomial sd 0.007
    assert not any(shadow.sample("premium") for _ in range(200)) and all(shadow.sample("economy") for _ in range(200))
    off = ShadowEvaluator(ShadowSettings(), str(tmp_path), 1 << 20, 10, DailyBudget(1.0))
    assert not off.settings.enabled and not any(off.sample("standard") for _ in range(200))


def job(call_id: str) -> ShadowJob:
    return ShadowJob(call_id, "q", [{"role": "user", "content": "q"}], "standard", 0.85, [], 0)


def test_pending_requests_are_bounded_and_the_oldest_are_counted(tmp_path):
    shadow = evaluator(tmp_path, max_pending=3)
    before = shadow_metrics.snapshot().get("skipped:no_answer", 0)
    for i in range(5):
        shadow.offer(job(f"c{i}"))
    assert list(shadow.pending) == ["c2", "c3", "c4"]
    assert shadow_metrics.snapshot()["skipped:no_answer"] - before == 2
    shadow.forget("c3")
    assert list(shadow.pending) == ["c2", "c4"]


def test_one_candidate_per_slot_keeps_the_served_deployment():
    a1, a2, b = {"id": "a1"}, {"id": "a2"}, {"id": "b"}
    candidates, served = job_candidates(["A", "A", "B"], [a1, a2, b], [1.0, 2.0, 3.0], served=1)
    assert [(c.model, c.deployment["id"], c.est_cost_usd) for c in candidates] == [("A", "a2", 2.0), ("B", "b", 3.0)]
    assert served == 0
    candidates, served = job_candidates(["A", "A", "B"], [a1, a2, b], [1.0, 2.0, 3.0], served=2)
    assert [c.deployment["id"] for c in candidates] == ["a1", "b"] and served == 1


@pytest.mark.parametrize("raw, message", [
    ({"shadow": {"rate": 0.1}}, r"shadow: shadow evaluation \(a rate > 0\) needs judge_model and daily_budget_usd"),
    ({"shadow": ON}, "shadow evaluation writes its rows beside the decision log: set decision_log.dir"),
    ({"shadow": {**ON, "rate": 1.5}}, "shadow.rate: Input should be less than or equal to 1"),
    ({"shadow": {**ON, "daily_budget_usd": 0}}, "shadow.daily_budget_usd: Input should be greater than 0"),
    ({"decision_log": {"dir": "/tmp/x"}, "shadow": {**ON, "tiers": {"gold": 0.5}}}, r"shadow.tiers names unknown tiers \['gold'\]"),
    ({"shadow": {"candidate": 2}}, r"shadow.candidate: Extra inputs are not permitted \(allowed: \['candidates'"),
    # a shadow row holds the prompt text: not where the operator asked for hashes only
    ({"decision_log": {"dir": "/tmp/x"}, "shadow": ON},
     r"shadow rows store the prompt text: set decision_log.log_prompts: true \(or shadow.rate: 0\)"),
])
def test_bad_shadow_settings_name_the_field(raw, message):
    with pytest.raises(ProteusConfigError, match=message):
        ProteusConfig.parse(raw)


def test_shadow_is_off_by_default():
    assert not ProteusConfig.parse({}).shadow.enabled
    config = ProteusConfig.parse({"decision_log": {"dir": "/tmp/x", "log_prompts": True},
                                  "shadow": {**ON, "tiers": {"premium": 0.0}}})
    assert config.shadow.rate_for("premium") == 0.0 and config.shadow.rate_for("economy") == 0.25


def test_a_job_that_cannot_start_is_counted_never_raised(tmp_path):
    shadow = evaluator(tmp_path)
    candidates, served = job_candidates(["A", "B"], [{"litellm_params": {}}, {"litellm_params": {}}], [1e-3, 2e-3], 0)
    shadow.offer(ShadowJob("c1", "q", [{"role": "user", "content": "q"}], "standard", 0.85, candidates, served))
    before = shadow_metrics.snapshot().get("skipped:error", 0)
    # outside an event loop (a sync callback): no task can be created
    assert shadow.answered("c1", None, judge=None, lookup=lambda _: None, judge_deployments=tuple) is None
    assert shadow_metrics.snapshot()["skipped:error"] == before + 1 and "c1" not in shadow.pending
    assert shadow.answered("unknown", None, judge=None, lookup=lambda _: None, judge_deployments=tuple) is None  # not sampled: nothing to do


def test_budget_reservation_is_refused_past_the_cap_and_settles_to_the_real_cost(redis_server):
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    clock = Clock(DAY)
    for budget in (DailyBudget(0.01, clock=clock), DailyBudget(0.01, client, "t:reserve:", clock=clock)):
        day, total = budget.reserve(0.006)[:2]
        assert day == utc_day(DAY) and total == pytest.approx(0.006)
        assert budget.reserve(0.005) == (None, pytest.approx(0.006), False)  # would pass the cap: nothing added
        clock.now = DAY + 16 * 3600 - 1.0  # 23:59:59 UTC
        day2 = budget.reserve(0.004).day
        clock.now = DAY + 16 * 3600  # the job ends after midnight: its settlement goes to the day it reserved on
        assert budget.charge(0.001 - 0.004, day2) == pytest.approx(0.007) and budget.spent() == 0.0
        clock.now = DAY
        assert budget.spent() == pytest.approx(0.007) and budget.reserve(0.003)[0] is not None
        assert budget.spent() == pytest.approx(0.01) and not admits(budget)
    assert 0 < client.ttl(f"t:reserve:{utc_day(DAY)}") <= KEY_TTL_S


SHADOW_PRICE, JUDGE_PRICE = 6.0e-7, 1.0e-6  # per token; every upstream answer reports 1,000 + 1,000 tokens
SHADOW_CALL_USD, JUDGE_CALL_USD = 2000 * SHADOW_PRICE, 2000 * JUDGE_PRICE


def completion(text: str) -> httpx.Response:
    return httpx.Response(200, json={
        "id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "upstream",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 1000, "total_tokens": 2000}})


SHADOW_DEPLOYMENT = {"model_name": "g", "model_info": {"id": "b1"}, "litellm_params": {
    "model": "openai/b", "api_base": "http://shadow.test/v1", "api_key": "sk-test",
    "input_cost_per_token": SHADOW_PRICE, "output_cost_per_token": SHADOW_PRICE}}
JUDGE_GROUP = {"model_name": "judge", "litellm_params": {
    "model": "openai/judge", "api_base": "http://judge.test/v1", "api_key": "sk-test",
    "input_cost_per_token": JUDGE_PRICE, "output_cost_per_token": JUDGE_PRICE}}


def run_jobs(shadow: ShadowEvaluator, router: litellm.Router, n: int, shadow_upstream) -> list:
    """``n`` sampled requests (A served, B the other candidate) answered at once; the upstream HTTP
    of B and of the judge group mocked by respx; each job's result."""
    candidates, served = job_candidates(["A", "B"], [{"model_name": "g", "litellm_params": {}}, SHADOW_DEPLOYMENT],
                                        [1e-3, SHADOW_CALL_USD], 0)
    jobs = [ShadowJob(f"c{i}", "q", [{"role": "user", "content": "q"}], "standard", 0.85, candidates, served)
            for i in range(n)]

    def lookup(model_id: str) -> dict | None:
        return next((d for d in router.model_list if d["model_info"]["id"] == model_id), None)

    async def answer_all() -> list:
        running = [shadow.run(j, "served answer", 1e-3, router.acompletion, lookup,
                              lambda: router.get_model_list(model_name=shadow.settings.judge_model) or []) for j in jobs]
        return await asyncio.wait_for(asyncio.gather(*running), 30)

    with respx.mock(assert_all_called=False) as mock:
        mock.post("http://shadow.test/v1/chat/completions").mock(side_effect=shadow_upstream)
        mock.post("http://judge.test/v1/chat/completions").mock(return_value=completion("Fine.\nSCORE: 1"))
        return asyncio.run(answer_all())


def test_concurrent_jobs_stay_within_the_daily_budget_and_every_paid_answer_is_judged(tmp_path, monkeypatch):
    """Eight sampled requests answered at once, a budget for two jobs: reservations stop the other
    six before any call (checked-then-charged, all eight would pass the check and spend 4x the cap)."""
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)  # respx mocks httpx

    async def shadow_upstream(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.2)  # every admitted job is in flight before any is charged
        return completion("shadow answer")

    router = litellm.Router(model_list=[JUDGE_GROUP])
    shadow = evaluator(tmp_path, judge_max_tokens=2000)  # the judge estimate (~0.00214 USD) covers its real cost
    budget = shadow.budget = DailyBudget(0.012)  # two jobs of 0.0012 + 2 x 0.00214 reserved
    skipped = shadow_metrics.snapshot().get("skipped:budget", 0)
    rows = [r for r in run_jobs(shadow, router, 8, shadow_upstream) if r is not None]
    assert len(rows) == 2 and all(r["A"] == 1.0 and r["B"] == 1.0 for r in rows)  # both answers of each judged
    assert shadow_metrics.snapshot()["skipped:budget"] - skipped == 6
    assert budget.spent() == pytest.approx(2 * (SHADOW_CALL_USD + 2 * JUDGE_CALL_USD)) and budget.spent() <= 0.012


@pytest.mark.parametrize("retry_after_s", [30.0, 0.0])  # 0: the retry window is over before the job reads why
def test_a_job_whose_budget_redis_is_down_is_skipped_as_unavailable_not_as_spent(tmp_path, monkeypatch, redis_server, caplog,
                                                                                  retry_after_s):
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)  # respx mocks httpx

    async def shadow_upstream(request: httpx.Request) -> httpx.Response:
        return completion("shadow answer")

    client = redis.Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=0.5, socket_connect_timeout=0.5)
    shadow = evaluator(tmp_path, judge_max_tokens=2000)
    shadow.budget = DailyBudget(5.0, client, "t:unavailable:", retry_after_s=retry_after_s)
    redis_server.stop()
    before = shadow_metrics.snapshot()
    with caplog.at_level("WARNING", logger="litellm_proteus"):
        rows = run_jobs(shadow, litellm.Router(model_list=[JUDGE_GROUP]), 2, shadow_upstream)
    after = shadow_metrics.snapshot()
    assert rows == [None, None]  # nothing spent without the shared cap
    assert after.get("skipped:budget_unavailable", 0) - before.get("skipped:budget_unavailable", 0) == 2
    assert after.get("skipped:budget", 0) == before.get("skipped:budget", 0)  # the budget is not spent
    assert "cannot be read" in caplog.text and "budget of 5.0000 USD spent" not in caplog.text


def test_a_judge_model_that_is_no_model_group_spends_nothing(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    calls: list[httpx.Request] = []

    def shadow_upstream(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return completion("shadow answer")

    shadow = evaluator(tmp_path, judge_model="judge-typo")
    errors = shadow_metrics.snapshot().get("skipped:error", 0)
    assert run_jobs(shadow, litellm.Router(model_list=[JUDGE_GROUP]), 1, shadow_upstream) == [None]
    assert calls == [] and shadow.budget.spent() == 0.0
    assert shadow_metrics.snapshot()["skipped:error"] == errors + 1
    assert "shadow.judge_model 'judge-typo' is not a model group of this proxy" in caplog.text


def test_a_shadow_call_that_times_out_is_charged_its_estimate(tmp_path, monkeypatch):
    """The provider may bill a call the job gave up on: a deployment slower than timeout_s on every
    call must still use up the budget, not spend without limit."""
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)

    async def slow_upstream(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(3.0)
        return completion("too late")

    shadow = evaluator(tmp_path, timeout_s=0.3)
    assert run_jobs(shadow, litellm.Router(model_list=[JUDGE_GROUP]), 1, slow_upstream)[0]["B"] is None
    assert shadow.budget.spent() == pytest.approx(SHADOW_CALL_USD + JUDGE_CALL_USD)  # the estimate + the served answer's judge


def test_a_shadow_log_folder_removed_while_rows_are_written_is_made_again(tmp_path):
    import json
    import shutil

    from litellm_proteus.shadow_rows import SHADOW_PREFIX

    directory = tmp_path / "log"
    shadow = ShadowEvaluator(ShadowSettings(**ON), str(directory), 1 << 20, 10, DailyBudget(1.0))
    assert shadow._write({"call_id": "before"})
    shutil.rmtree(directory)
    assert shadow._write({"call_id": "after-0"})  # into the same (deleted) file: no rotation
    assert shadow._write({"call_id": "after-1"})
    shadow.files.close()
    rows = [json.loads(line)["call_id"] for path in sorted(directory.glob(f"{SHADOW_PREFIX}*.jsonl"))
            for line in path.read_text().splitlines()]
    assert rows == ["after-0", "after-1"]


def test_a_judge_that_copies_a_rubric_answer_line_with_its_note_is_scored(tmp_path, monkeypatch):
    """A judge answering ``SCORE: 1    (correct)`` (an answer line with a note) scores the answers:
    its calls are paid for, so the row is written."""
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    shadow = evaluator(tmp_path)
    router = litellm.Router(model_list=[JUDGE_GROUP])
    unscored = shadow_metrics.snapshot().get("skipped:unscored", 0)
    candidates, served = job_candidates(["A", "B"], [{"model_name": "g", "litellm_params": {}}, SHADOW_DEPLOYMENT],
                                        [1e-3, SHADOW_CALL_USD], 0)
    job = ShadowJob("c0", "What is 2+2?", [{"role": "user", "content": "What is 2+2?"}], "standard", 0.85, candidates, served)
    with respx.mock(assert_all_called=False) as mock:
        mock.post("http://shadow.test/v1/chat/completions").mock(return_value=completion("4"))
        mock.post("http://judge.test/v1/chat/completions").mock(
            return_value=completion("The answer is right.\nSCORE: 1    (correct)"))
        row = asyncio.run(shadow.run(job, "4", 1e-3, router.acompletion, lambda _: None,
                                     lambda: router.get_model_list(model_name="judge")))
    assert row is not None and row["A"] == 1.0 and row["B"] == 1.0
    assert shadow_metrics.snapshot().get("skipped:unscored", 0) == unscored


SERVED_ONLY = job_candidates(["A"], [SHADOW_DEPLOYMENT], [SHADOW_CALL_USD], 0)  # one answer to judge, no shadow call


def judge_only_job(shadow: ShadowEvaluator, judge, lookup=lambda _: None):
    """One job whose only call is the judge's (``judge``: the router's acompletion stand-in)."""
    candidates, served = SERVED_ONLY
    job = ShadowJob("c0", "q", [{"role": "user", "content": "q"}], "standard", 0.85, candidates, served)
    return asyncio.run(shadow.run(job, "served answer", SHADOW_CALL_USD, judge, lookup, lambda: [JUDGE_GROUP]))


class Py310TimeoutError(Exception):
    """asyncio.TimeoutError on Python 3.10: what asyncio.wait_for raises there, not the builtin TimeoutError."""


@pytest.mark.parametrize("python310", [False, True])
def test_a_judge_call_that_asyncio_timed_out_is_charged_its_estimate(tmp_path, monkeypatch, python310):
    if python310:
        monkeypatch.setattr(asyncio, "TimeoutError", Py310TimeoutError)

    async def judge(**kwargs):
        raise asyncio.TimeoutError()

    shadow = evaluator(tmp_path)
    estimate = shadow.judge_estimate("q", "served answer", [JUDGE_GROUP])
    assert estimate > 0 and judge_only_job(shadow, judge) is None  # unscored: no row
    assert shadow.budget.spent() == pytest.approx(estimate)  # the provider may bill what the job gave up on


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.5, True, "0.1"])
def test_a_response_cost_that_is_no_finite_number_at_least_0_is_unknown(bad):
    from litellm_proteus.shadow import call_cost

    class Reply:  # no usage, an unpriced deployment: LiteLLM's response cost would be the charge
        usage = None
        _hidden_params = {"response_cost": bad}

    assert call_cost(Reply(), None) == 0.0 and call_cost(Reply(), None, 0.003) == 0.003
    Reply._hidden_params = {"response_cost": 0.002}
    assert call_cost(Reply(), None, 0.003) == 0.002


def test_a_judge_reply_with_a_nan_cost_is_charged_its_estimate_and_the_cap_holds(tmp_path):
    async def judge(**kwargs):
        reply = litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": "Fine.\nSCORE: 1"}}])
        reply.usage = None
        reply._hidden_params = {"model_id": "unknown", "response_cost": float("nan")}
        return reply

    shadow = evaluator(tmp_path)
    estimate = shadow.judge_estimate("q", "served answer", [JUDGE_GROUP])
    assert judge_only_job(shadow, judge)["A"] == 1.0
    assert shadow.budget.spent() == pytest.approx(estimate)
    assert shadow.budget.reserve(1000.0).day is None  # the cap still counts


@pytest.mark.parametrize("redis_backed", [False, True])
def test_a_budget_refuses_amounts_that_are_no_finite_number(redis_backed, redis_server):
    client = redis.Redis.from_url(redis_server.url, decode_responses=True) if redis_backed else None
    budget = DailyBudget(1.0, client, "t:finite:", retry_after_s=0.0, clock=Clock(DAY))
    day = budget.reserve(0.5).day
    for bad in (float("nan"), float("inf"), -0.1):
        with pytest.raises(ValueError, match="must be a finite number >= 0"):
            budget.reserve(bad)
    for bad in (float("nan"), float("-inf")):
        with pytest.raises(ValueError, match="must be a finite number"):
            budget.charge(bad, day)
    assert budget.charge(-0.2, day) == pytest.approx(0.3)  # a settlement below the reservation: a refund
    assert budget.spent() == pytest.approx(0.3) and budget.reserve(1000.0).day is None and not budget._pending


def test_a_settlement_the_budget_refuses_is_counted_never_raised(tmp_path, monkeypatch):
    monkeypatch.setattr("litellm_proteus.shadow.call_cost", lambda *args: float("nan"))

    async def judge(**kwargs):
        return litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": "SCORE: 1"}}])

    shadow = evaluator(tmp_path)
    errors = shadow_metrics.snapshot().get("skipped:error", 0)
    assert judge_only_job(shadow, judge) is None
    assert shadow_metrics.snapshot()["skipped:error"] == errors + 1
    assert shadow.budget.spent() == pytest.approx(shadow.judge_estimate("q", "served answer", [JUDGE_GROUP]))  # held


UNPRICED_JUDGE = {"model_name": "judge", "model_info": {"id": "j-unpriced"}, "litellm_params": {
    "model": "openai/proteus-test-unpriced-judge", "api_base": "http://judge.test/v1", "api_key": "sk-test"}}


def test_an_unpriced_judge_is_refused_before_any_call(tmp_path, monkeypatch, caplog):
    """The daily cap could not count its calls: no shadow call is made, the skip is counted and the
    log names the setting and the fix."""
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    calls: list[httpx.Request] = []

    def shadow_upstream(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return completion("shadow answer")

    shadow = evaluator(tmp_path)
    skipped = shadow_metrics.snapshot().get("skipped:unpriced_judge", 0)
    with caplog.at_level("WARNING", logger="litellm_proteus"):
        rows = run_jobs(shadow, litellm.Router(model_list=[JUDGE_GROUP, UNPRICED_JUDGE]), 3, shadow_upstream)
    assert rows == [None, None, None] and calls == [] and shadow.budget.spent() == 0.0
    assert shadow_metrics.snapshot()["skipped:unpriced_judge"] - skipped == 3
    assert "shadow.judge_model 'judge' has deployments without a price" in caplog.text
    assert "judge/openai/proteus-test-unpriced-judge (id j-unpriced)" in caplog.text
    assert "input_cost_per_token and output_cost_per_token" in caplog.text and caplog.text.count("without a price") == 1


def test_a_shadow_row_names_the_served_model_and_the_share_of_the_others_it_called(tmp_path, monkeypatch):
    """The served answer is always scored and each other candidate only with probability call_share:
    an estimate over shadow rows needs both (train/off_policy.py weighs by them)."""
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    shadow = evaluator(tmp_path, candidates=1)
    router = litellm.Router(model_list=[JUDGE_GROUP])
    plain = {"model_name": "g", "litellm_params": {}}
    candidates, served = job_candidates(["A", "B", "C"], [plain, SHADOW_DEPLOYMENT, SHADOW_DEPLOYMENT],
                                        [1e-3, SHADOW_CALL_USD, SHADOW_CALL_USD], 0)
    job = ShadowJob("c0", "What is 2+2?", [{"role": "user", "content": "What is 2+2?"}], "standard", 0.85, candidates, served)
    with respx.mock(assert_all_called=False) as mock:
        mock.post("http://shadow.test/v1/chat/completions").mock(return_value=completion("4"))
        mock.post("http://judge.test/v1/chat/completions").mock(return_value=completion("SCORE: 1"))
        row = asyncio.run(shadow.run(job, "4", 1e-3, router.acompletion, lambda _: None,
                                     lambda: router.get_model_list(model_name="judge")))
    assert row["served"] == "A" and row["call_share"] == 0.5  # one of the two other candidates
    assert row["A"] == 1.0 and sum(row[m] is not None for m in ("B", "C")) == 1
