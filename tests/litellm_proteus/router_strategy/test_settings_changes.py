"""Settings changes at runtime (``Router.update_settings(routing_strategy_args=...)``, what LiteLLM's
DB-backed config sync calls): the strategy they replace releases what only it used -- decision-log
writers (thread, file), compliance controllers (Redis connection, gauge refreshes), tier stores,
shadow evaluators (file, their budget's Redis connection) -- and the new one goes on from the old one's state where its meaning is unchanged (the shadow
budget's included)."""

from __future__ import annotations

import asyncio
import copy
import os
import threading
import time

import httpx
import litellm
import pytest
from prometheus_client import REGISTRY

from litellm_proteus import compliance_metrics
from litellm_proteus.compliance import CLIENT_NAME_PREFIX
from litellm_proteus.feedback import submit_to_strategy
from litellm_proteus.tiers import CLIENT_NAME

from ..test_shadow import reply_lost
from .test_strategy import QUESTION, completion_body, model_list, upstream  # noqa: F401  (fixture)


@pytest.fixture(autouse=True)
def httpx_transport(monkeypatch):
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)  # respx mocks httpx


def wait_for(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def writer_threads() -> int:
    return sum(t.name == "proteus-decision-log" and t.is_alive() for t in threading.enumerate())


def open_logs(directory) -> int:
    """This process's open files under ``directory``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(directory))
        except OSError:  # closed meanwhile
            pass
    return count


def base_args(artifact, tier: str, **over) -> dict:
    """A tier of its own per test: routers with equal compliance settings share one controller."""
    args = {"artifact": str(artifact), "tiers": {tier: 0.9, "standard": 0.85, "economy": 0.7},
            "default_tier": tier, "compliance": {"min_decisions": 1}}
    args.update(over)
    return args


def route(router, n: int, prefix: str) -> list[str]:
    """The call ids of ``n`` requests; ``route.state_key``: the last one's compliance state."""
    async def go():
        ids = []
        for i in range(n):
            call_id, metadata = f"{prefix}-{i}", {}
            await router.acompletion(model="proteus-auto", messages=QUESTION, litellm_call_id=call_id, metadata=metadata)
            ids.append(call_id)
            route.state_key = metadata["proteus"]["state_key"]
        return ids

    return asyncio.run(go())


def test_decision_log_changes_close_the_old_writers_and_keep_feedback(steerable_artifact, tmp_path, upstream):  # noqa: F811
    threads_before = writer_threads()
    args = base_args(steerable_artifact, "logged", decision_log={"dir": str(tmp_path / "log0")})
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    first = route(router, 3, "first")
    old_writer = router.proteus_strategy.decision_log
    # only log_prompts changes: a new writer and desk, whose index holds the decisions routed before (no Redis)
    changed = copy.deepcopy(args)
    changed["decision_log"]["log_prompts"] = True
    router.update_settings(routing_strategy_args=changed)
    assert router.proteus_strategy.decision_log is not old_writer
    assert submit_to_strategy(router.proteus_strategy, first[0], 1.0, "api")["call_id"] == first[0]
    # the folder changes five times: each change closes the writer it replaces (its records written)
    for i in range(1, 6):
        changed = copy.deepcopy(args)
        changed["decision_log"] = {"dir": str(tmp_path / f"log{i}")}
        router.update_settings(routing_strategy_args=changed)
        route(router, 1, f"dir{i}")
    assert wait_for(lambda: writer_threads() <= threads_before + 1), threading.enumerate()
    assert wait_for(lambda: open_logs(tmp_path) <= 1)
    assert old_writer.submit({"type": "outcome", "call_id": "late"}) is False  # closed: counted as dropped
    from litellm_proteus.decision_log import iter_records

    logged = {r["call_id"] for r in iter_records(tmp_path / "log0") if r["type"] == "decision"}
    assert set(first) <= logged  # what the closed writer had queued was written


def test_a_pick_in_flight_across_a_decision_log_change_is_logged_and_takes_feedback(steerable_artifact, tmp_path, upstream):  # noqa: F811
    from litellm_proteus.decision_log import iter_records

    args = base_args(steerable_artifact, "inflight", decision_log={"dir": str(tmp_path / "log")})
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    old = router.proteus_strategy

    async def change_while_routing():
        pick = asyncio.create_task(router.acompletion(model="proteus-auto", messages=QUESTION,
                                                      litellm_call_id="inflight-1", metadata={}))
        await asyncio.sleep(0)  # the pick has begun under the old strategy and awaits its batcher
        changed = copy.deepcopy(args)
        changed["decision_log"]["log_prompts"] = True
        router.update_settings(routing_strategy_args=changed)
        await pick

    asyncio.run(change_while_routing())
    new = router.proteus_strategy
    assert new is not old and old.replaced_by is new and old.decision_log.dropped == 0
    assert new.decision_log.flush()
    assert "inflight-1" in {r["call_id"] for r in iter_records(tmp_path / "log") if r["type"] == "decision"}
    assert submit_to_strategy(new, "inflight-1", 1.0, "api")["call_id"] == "inflight-1"


def test_an_outcome_in_flight_across_a_decision_log_change_is_written_beside_its_decision(steerable_artifact, tmp_path, upstream,  # noqa: F811
                                                                                        monkeypatch):
    """The log moved to another folder, or turned off, while the upstream answers: the pick's outcome
    goes to the folder that holds its decision, not to the new one (nor nowhere)."""
    from litellm_proteus.decision_log import iter_records
    from litellm_proteus.router_strategy import proteus_hook

    monkeypatch.setattr(litellm, "callbacks", [proteus_hook])  # the outcome callbacks, as the proxy's config loads them

    async def slow(request):
        await asyncio.sleep(0.6)
        return httpx.Response(200, json=completion_body("slow"))

    for answer in upstream.values():
        answer.mock(side_effect=slow)
    args = base_args(steerable_artifact, "moving", decision_log={"dir": str(tmp_path / "A")})
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)

    async def change_while_answering(call_id, changed):
        pick = asyncio.create_task(router.acompletion(model="proteus-auto", messages=QUESTION, litellm_call_id=call_id,
                                                      metadata={}))
        await asyncio.sleep(0.3)  # routed and logged; the upstream is still answering
        router.update_settings(routing_strategy_args=changed)
        await pick
        await asyncio.sleep(0.3)  # LiteLLM runs its success callbacks as tasks of this loop

    moved = copy.deepcopy(args)
    moved["decision_log"] = {"dir": str(tmp_path / "B")}
    asyncio.run(change_while_answering("moved-1", moved))
    router.update_settings(routing_strategy_args=args)  # back to A
    asyncio.run(change_while_answering("off-1", base_args(steerable_artifact, "moving")))  # no decision_log
    in_a = lambda: {(r["type"], r["call_id"]) for r in iter_records(tmp_path / "A")}  # noqa: E731
    expected = {(kind, call_id) for kind in ("decision", "outcome") for call_id in ("moved-1", "off-1")}
    assert wait_for(lambda: expected <= in_a()), in_a()
    assert not (tmp_path / "B").exists() or not any(r["type"] == "outcome" for r in iter_records(tmp_path / "B"))


def test_a_decision_log_turned_off_and_on_again_keeps_its_feedback_index(steerable_artifact, tmp_path, upstream):  # noqa: F811
    args = base_args(steerable_artifact, "toggled", decision_log={"dir": str(tmp_path / "log")})
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    [before] = route(router, 1, "before-off")
    router.update_settings(routing_strategy_args=base_args(steerable_artifact, "toggled"))  # the log off
    assert router.proteus_strategy.feedback_desk is None
    router.update_settings(routing_strategy_args=args)  # and on again, no Redis: the index was in memory only
    assert submit_to_strategy(router.proteus_strategy, before, 1.0, "api")["call_id"] == before


def test_a_compliance_settings_change_keeps_the_state_of_the_same_tier_and_tau(steerable_artifact, upstream):  # noqa: F811
    args = base_args(steerable_artifact, "kept")
    args["compliance"]["window"] = 123  # settings of its own: a controller no other router shares
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    route(router, 4, "a")
    key = route.state_key
    old = router.proteus_strategy.compliance
    before = old.snapshot(key)
    assert before["n"] == 4
    changed = copy.deepcopy(args)
    changed["compliance"]["ttl_s"] = 3600  # what a state means is unchanged: it goes on
    router.update_settings(routing_strategy_args=changed)
    new = router.proteus_strategy.compliance
    after = new.snapshot(key)
    assert (after["n"], after["delta"], after["infeasible"]) == (before["n"], before["delta"], before["infeasible"])
    assert new is not old and old.released and not new.released  # the replaced one closed


def test_a_tier_whose_tau_changes_starts_a_new_state_and_old_feedback_finds_its_own(steerable_artifact, tmp_path, upstream):  # noqa: F811
    args = base_args(steerable_artifact, "moved", decision_log={"dir": str(tmp_path / "log")})
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    earlier = route(router, 3, "at-0.9")
    changed = copy.deepcopy(args)
    changed["tiers"]["moved"] = 0.8
    router.update_settings(routing_strategy_args=changed)
    md: dict = {}
    asyncio.run(router.acompletion(model="proteus-auto", messages=QUESTION, metadata=md))
    assert md["proteus"]["state_key"] == "tier:moved@0.8"
    controller = router.proteus_strategy.compliance
    assert controller.snapshot("tier:moved@0.8")["n"] == 1  # not the 3 decisions learnt at 0.9
    assert controller.snapshot("tier:moved@0.9")["n"] == 3
    decision = submit_to_strategy(router.proteus_strategy, earlier[0], 1.0, "api")
    assert decision["state_key"] == "tier:moved@0.9"  # its label counts where its decision was recorded
    assert controller.snapshot("tier:moved@0.9")["n_labels"] == 1
    assert controller.snapshot("tier:moved@0.8")["n_labels"] == 0


def test_redis_settings_changes_leave_one_compliance_and_one_tier_connection(steerable_artifact, redis_server, upstream):  # noqa: F811
    import redis

    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)

    def connections(name: str) -> int:
        return sum(c.get("name") == name for c in raw.client_list())

    mine = f"{CLIENT_NAME_PREFIX}{os.getpid()}"
    args = base_args(steerable_artifact, "shared", redis={"url": redis_server.url, "cache_ttl_s": 0})

    async def go():
        router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
        headers = {"user_api_key_hash": "h" * 64}  # a key: its tier is looked up in Redis
        for i in range(5):
            changed = copy.deepcopy(args)
            changed["compliance"]["window"] = 100 + i
            changed["redis"]["timeout_ms"] = 100 + i
            router.update_settings(routing_strategy_args=changed)
            md = dict(headers)
            await router.acompletion(model="proteus-auto", messages=QUESTION, metadata=md)
            assert md["proteus"]["tier_source"] == "default"  # Redis was asked (and had no tier)
        for _ in range(100):  # the replaced tier stores' clients close as tasks of this loop
            if connections(CLIENT_NAME) <= 1:
                break
            await asyncio.sleep(0.05)
        return router

    router = asyncio.run(go())
    assert connections(mine) == 1
    assert router.proteus_strategy.compliance.snapshot("tier:shared@0.9")["n"] == 5  # the state went on
    raw.close()


def test_turning_compliance_off_stops_the_old_controllers_gauge_refresh(steerable_artifact, upstream, monkeypatch):  # noqa: F811
    monkeypatch.setattr(compliance_metrics, "EXPORT_EVERY_S", 3600.0)  # the second decision leaves a pending refresh
    args = base_args(steerable_artifact, "gauges")
    args["compliance"]["window"] = 124
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    route(router, 2, "g")
    key = route.state_key
    old = router.proteus_strategy.compliance
    pending = compliance_metrics._trailing.get(key)
    assert pending is not None and pending[1] is old
    off = copy.deepcopy(args)
    off["compliance"] = {"enabled": False}
    router.update_settings(routing_strategy_args=off)
    assert old.released and key not in compliance_metrics._trailing  # cancelled with the controller
    gauges = compliance_metrics.gauges()
    gauges.infeasible.labels(key).set(0.0)
    gauges.delta.labels(key).set(0.0)
    old.snapshot = lambda state_key: {"n": 9, "delta": 0.2, "infeasible": True}
    compliance_metrics._trailing_export(key, old)  # as a refresh that had already started
    assert REGISTRY.get_sample_value("proteus_infeasible", {"state_key": key}) == 0.0
    assert REGISTRY.get_sample_value("proteus_delta", {"state_key": key}) == 0.0


@pytest.mark.parametrize("with_redis", [False, True], ids=["process", "redis"])
def test_a_shadow_settings_change_hands_the_budget_to_the_new_evaluator(steerable_artifact, tmp_path, request, with_redis):
    """The new evaluator's budget counts the replaced one's running job until it settles, and sends
    the release the replaced one could not (a reservation whose reply was lost)."""
    import redis

    shadow = {"rate": 0.5, "judge_model": "plain", "daily_budget_usd": 1.0, "redis_key_prefix": "t:change:"}
    args = base_args(steerable_artifact, "shadowed", decision_log={"dir": str(tmp_path), "log_prompts": True}, shadow=shadow)
    if with_redis:
        args["redis"] = {"url": request.getfixturevalue("redis_server").url}
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    old = router.proteus_strategy.shadow.budget
    day = old.reserve(0.6).day  # a job of the evaluator the change replaces, still running
    if with_redis:
        applied = old._reserve
        old._reserve = reply_lost(applied)
        assert old.reserve(0.3)[0] is None  # made in Redis, its job never runs: its release is pending
        old._reserve = applied
    changed = copy.deepcopy(args)
    changed["shadow"]["rate"] = 0.25
    router.update_settings(routing_strategy_args=changed)
    new = router.proteus_strategy.shadow.budget
    assert new is not old
    assert new.spent() == pytest.approx(0.6)
    assert new.reserve(0.5) == (None, pytest.approx(0.6), False)  # with the running job, past the cap
    old.charge(0.1 - 0.6, day)  # the job ends after the change: it cost 0.1
    assert new.spent() == pytest.approx(0.1) and new.reserve(0.5)[0] == day
    if with_redis:
        raw = redis.Redis.from_url(args["redis"]["url"], decode_responses=True)
        assert float(raw.get(f"t:change:{day}")) == pytest.approx(0.6) and not new._pending


def test_shadow_settings_changes_close_the_replaced_budgets_redis_connections(steerable_artifact, tmp_path, redis_server, upstream):  # noqa: F811
    """Four settings changes, each replacing the shadow evaluator while a job of it waits on its
    shadow call: each replaced budget's Redis connection closes, the budget replacing them (their
    ledger shared) keeps counting, and the jobs settling afterwards through their closed budgets
    leave no connection open; turning shadow evaluation off closes the last one."""
    import redis

    from litellm_proteus.shadow import ShadowJob, job_candidates, response_text
    from litellm_proteus.shadow_budget import CLIENT_NAME

    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)

    def budget_connections() -> int:
        return sum(c.get("name") == CLIENT_NAME for c in raw.client_list())

    shadow = {"rate": 0.5, "judge_model": "plain", "daily_budget_usd": 1.0, "redis_key_prefix": "t:close:"}
    args = base_args(steerable_artifact, "closing", decision_log={"dir": str(tmp_path), "log_prompts": True},
                     shadow=shadow, redis={"url": redis_server.url})
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    deployments = {d["model_info"]["id"]: d for d in router.model_list}
    # served by mixtral; the shadow call goes to GPT-4 (reserved at 0.05; it costs 5 x 10e-6 + 1 x 30e-6)
    candidates, served = job_candidates(["mixtral", "gpt-4"], [deployments["mixtral-8x7b-chat"],
                                        deployments["gpt-4-1106-preview"]], [0.0, 0.05], 0)
    upstream["plain"].mock(return_value=httpx.Response(200, json=completion_body("Fine.\nSCORE: 1")))  # the judge

    async def go():
        arrived, gate = asyncio.Event(), asyncio.Event()

        async def held(request: httpx.Request) -> httpx.Response:
            arrived.set()
            await gate.wait()
            return httpx.Response(200, json=completion_body("late answer"))

        upstream["gpt-4-1106-preview"].mock(side_effect=held)
        served_response = await router.acompletion(model="plain", messages=QUESTION)
        jobs = []
        for i in range(4):
            evaluator = router.proteus_strategy.shadow
            evaluator.offer(ShadowJob(f"closing-{i}", "q", QUESTION, "closing", 0.9, candidates, served))
            jobs.append(evaluator.answered(f"closing-{i}", served_response, router.acompletion, deployments.get,
                                           lambda: router.get_model_list(model_name="plain")))
            await arrived.wait()  # reserved in Redis, waiting on its shadow call
            arrived.clear()
            changed = copy.deepcopy(args)
            changed["shadow"]["rate"] = 0.1 * (i + 1)
            router.update_settings(routing_strategy_args=changed)
            assert router.proteus_strategy.shadow is not evaluator
        live = router.proteus_strategy.shadow.budget
        # each running job reserved its shadow call and two judge calls (the served and the shadow answer)
        judging = router.proteus_strategy.shadow.judge_estimate("q", response_text(served_response),
                                                                router.get_model_list(model_name="plain"))
        assert live.spent() == pytest.approx(4 * (0.05 + 2 * judging))
        assert wait_for(lambda: budget_connections() == 1), budget_connections()  # the live budget's alone
        gate.set()
        rows = await asyncio.gather(*jobs)
        assert [row["gpt-4"] for row in rows] == [1.0] * 4  # each job judged, settled and wrote its row
        assert wait_for(lambda: budget_connections() == 1), budget_connections()
        # what the closed budgets settled reached the shared total: per job GPT-4's 8e-5 and two judge calls
        # of 5 prompt and 1 completion tokens at 1e-6 / 2e-6 USD
        assert live.spent() == pytest.approx(4 * (8e-5 + 2 * 7e-6))
        assert live.reserve(0.5)[0] is not None

    asyncio.run(go())
    off = copy.deepcopy(args)
    off["shadow"]["rate"] = 0.0
    router.update_settings(routing_strategy_args=off)
    assert router.proteus_strategy.shadow is None
    assert wait_for(lambda: budget_connections() == 0), budget_connections()
    raw.close()


def test_an_outcome_whose_log_moved_to_redis_only_is_written_beside_its_decision(tmp_path):
    """The strategy serving now logs to a Redis stream only (no folder): the outcome of a pick whose
    decision sits in a folder goes there, kept as that log keeps records (no response text)."""
    from types import SimpleNamespace

    from litellm_proteus.attempts import Attempt
    from litellm_proteus.config import DecisionLogSettings
    from litellm_proteus.decision_log import iter_records
    from litellm_proteus.router_strategy.serving_log import _write_outcome

    stream_only = SimpleNamespace(decision_log=SimpleNamespace(settings=DecisionLogSettings(dir=None, redis_stream="s"),
                                                               submit=lambda *a: pytest.fail("not this log's")),
                                  feedback_desk=None, shadow=None, replaced_by=None)
    folder = tmp_path / "A"
    folder.mkdir()
    attempt = Attempt("d1", stream_only, "k", DecisionLogSettings(dir=str(folder)))
    _write_outcome(attempt, "moved-to-redis", True, response_cost=0.001, latency_ms=5.0)
    [record] = list(iter_records(folder))
    assert (record["type"], record["call_id"], record["deployment_id"], record["success"]) == ("outcome", "moved-to-redis", "d1", True)
