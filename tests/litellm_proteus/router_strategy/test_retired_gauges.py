"""Gauge series that no live strategy writes any more leave ``/metrics``: the compliance states of a
tier whose tau changed, the delta / infeasible values of states whose controller was turned off,
deployments that left the router -- in one process and across prometheus_client's multiprocess
files -- and a refresh or a pick still under way across the change does not bring one back."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import litellm
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.parser import text_string_to_metric_families

from litellm_proteus import compliance_metrics
from litellm_proteus.feedback import submit_to_strategy
from litellm_proteus.router_strategy import strategy as strategy_module

from .test_settings_changes import base_args, route
from .test_strategy import QUESTION, model_list, upstream  # noqa: F401  (fixture)

STATE_GAUGES = ("proteus_predicted_accuracy", "proteus_realised_accuracy", "proteus_realised_labels",
                "proteus_delta", "proteus_infeasible", "proteus_tau")


@pytest.fixture(autouse=True)
def httpx_transport(monkeypatch):
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)  # respx mocks httpx


def without_gpt4() -> list[dict]:
    """The group without its strongest deployment: no candidate reaches tau 0.8 or 0.9 (the
    steerable artifact predicts 0.70 at best), so those tiers' states are infeasible at once."""
    return [d for d in model_list() if d["model_info"]["id"] != "gpt-4-1106-preview"]


def series(text: str, label: str, value: str) -> dict[str, float]:
    """Per sample name, the value of the series labelled ``label=value`` in an exposition."""
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.labels.get(label) == value}


def scraped(state_key: str) -> dict[str, float]:
    return series(generate_latest(REGISTRY).decode(), "state_key", state_key)


def test_a_tier_whose_tau_changes_leaves_metrics_and_its_current_state_stays(steerable_artifact, tmp_path, upstream):  # noqa: F811
    args = base_args(steerable_artifact, "retiring", decision_log={"dir": str(tmp_path / "log")})
    router = litellm.Router(model_list=without_gpt4(), routing_strategy="proteus", routing_strategy_args=args)
    earlier = route(router, 1, "at-0.9")
    asyncio.run(router.acompletion(model="proteus-auto", messages=QUESTION, metadata={"tau": 0.75}))
    assert scraped("tier:retiring@0.9")["proteus_infeasible"] == 1.0
    assert set(scraped("tau:0.75")) >= {"proteus_delta", "proteus_infeasible"}
    changed = copy.deepcopy(args)
    changed["tiers"]["retiring"] = 0.8
    router.update_settings(routing_strategy_args=changed)
    assert scraped("tier:retiring@0.9") == {}  # every gauge of the retired state is gone at once
    assert "tier:retiring@0.9" not in compliance_metrics._windows
    assert set(scraped("tau:0.75")) >= {"proteus_delta", "proteus_infeasible"}  # request taus share buckets still routed
    route(router, 1, "at-0.8")
    assert route.state_key == "tier:retiring@0.8" and scraped("tier:retiring@0.8")["proteus_infeasible"] == 1.0
    # feedback on a decision of the old state still counts in its controller state, with no gauge for it
    decision = submit_to_strategy(router.proteus_strategy, earlier[0], 1.0, "api")
    assert decision["state_key"] == "tier:retiring@0.9"
    assert router.proteus_strategy.compliance.snapshot("tier:retiring@0.9")["n_labels"] == 1
    assert scraped("tier:retiring@0.9") == {}


def test_turning_compliance_off_sets_delta_and_infeasible_to_0_at_once(steerable_artifact, upstream):  # noqa: F811
    args = base_args(steerable_artifact, "switched-off")
    router = litellm.Router(model_list=without_gpt4(), routing_strategy="proteus", routing_strategy_args=args)
    route(router, 1, "on")
    key = route.state_key
    assert scraped(key)["proteus_infeasible"] == 1.0 and scraped(key)["proteus_delta"] > 0.0
    off = copy.deepcopy(args)
    off["compliance"] = {"enabled": False}
    router.update_settings(routing_strategy_args=off)  # no request after it
    gauges = scraped(key)
    assert (gauges["proteus_delta"], gauges["proteus_infeasible"]) == (0.0, 0.0)
    assert gauges["proteus_predicted_accuracy"] < 0.9  # this process's window of the decision routed


def test_a_refresh_under_way_across_the_change_does_not_bring_the_series_back(steerable_artifact, upstream, monkeypatch):  # noqa: F811
    args = base_args(steerable_artifact, "refreshing")
    args["compliance"]["window"] = 127  # a controller of its own: the held snapshot below is this test's
    router = litellm.Router(model_list=without_gpt4(), routing_strategy="proteus", routing_strategy_args=args)
    key, controller = "tier:refreshing@0.9", router.proteus_strategy.compliance
    # the refresh timer's thread is held inside the controller's snapshot, past export's first check
    entered, resume, held = threading.Event(), threading.Event(), []
    snapshot = controller.snapshot

    def held_snapshot(state_key):
        if state_key == key and isinstance(threading.current_thread(), threading.Timer) and not held:
            held.append(threading.current_thread())
            entered.set()
            resume.wait()
        return snapshot(state_key)

    monkeypatch.setattr(controller, "snapshot", held_snapshot)
    for i in range(20):  # until a decision comes within EXPORT_EVERY_S of the last export: it leaves a refresh
        route(router, 1, f"r{i}")
        if key in compliance_metrics._trailing:
            break
    assert entered.wait(60)
    assert scraped(key)["proteus_infeasible"] == 1.0
    changed = copy.deepcopy(args)
    changed["tiers"]["refreshing"] = 0.8  # the same compliance settings: the controller stays, the state goes
    router.update_settings(routing_strategy_args=changed)
    assert router.proteus_strategy.compliance is controller and not controller.released
    assert scraped(key) == {}
    resume.set()
    held[0].join()
    assert scraped(key) == {}


def test_a_pick_under_way_across_the_change_writes_no_gauge_for_the_old_tau(steerable_artifact, upstream, monkeypatch):  # noqa: F811
    args = base_args(steerable_artifact, "picking")
    router = litellm.Router(model_list=without_gpt4(), routing_strategy="proteus", routing_strategy_args=args)
    old = router.proteus_strategy
    changed = copy.deepcopy(args)
    changed["tiers"]["picking"] = 0.8

    async def change_while_picking() -> dict:
        reached, resume = asyncio.Event(), asyncio.Event()
        submit = old.batcher.submit

        async def held_submit(request):  # the pick has its state key (tau 0.9) and waits for its decision
            reached.set()
            await resume.wait()
            return await submit(request)

        monkeypatch.setattr(old.batcher, "submit", held_submit)
        metadata: dict = {}
        pick = asyncio.create_task(router.acompletion(model="proteus-auto", messages=QUESTION, metadata=metadata))
        await reached.wait()
        router.update_settings(routing_strategy_args=changed)
        resume.set()
        await pick
        return metadata

    metadata = asyncio.run(change_while_picking())
    assert router.proteus_strategy is not old and metadata["proteus"]["state_key"] == "tier:picking@0.9"
    assert old.compliance.snapshot("tier:picking@0.9")["n"] == 1  # the decision counts in its state
    assert scraped("tier:picking@0.9") == {}
    assert "tier:picking@0.9" not in compliance_metrics._windows


def test_deployments_that_leave_lose_their_breaker_and_correction_gauges(steerable_artifact, upstream, monkeypatch):  # noqa: F811
    deployments = model_list()
    for d in deployments:  # ids of their own: another test's live router keeps the usual ones' series
        d["model_info"]["id"] += "-leaving"
    ids = [d["model_info"]["id"] for d in deployments if d["model_name"] == "proteus-auto"]
    args = base_args(steerable_artifact, "leaving")
    args["compliance"]["breaker"] = {"enabled": True}
    router = litellm.Router(model_list=deployments, routing_strategy="proteus", routing_strategy_args=args)

    def present(name: str) -> set[str]:
        text = generate_latest(REGISTRY).decode()
        return {d for d in ids if name in series(text, "deployment", d)}

    route(router, 1, "all")
    assert present("proteus_breaker_open") == present("proteus_deployment_correction") == set(ids)
    gone = ids[-1]
    router.delete_deployment(id=gone)  # what /model/delete and the DB sync do: no settings change
    monkeypatch.setattr(strategy_module, "_next_sweep", 0.0, raising=False)  # the sweep is due on the next decision
    route(router, 1, "after-delete")
    assert present("proteus_breaker_open") == present("proteus_deployment_correction") == set(ids) - {gone}
    changed = copy.deepcopy(args)
    changed["compliance"]["breaker"] = {"enabled": False}
    changed["compliance"]["correction"] = {"enabled": False}
    router.update_settings(routing_strategy_args=changed)
    assert present("proteus_breaker_open") == present("proteus_deployment_correction") == set()


def test_a_decision_does_not_wait_for_the_sweep_of_removed_deployments(steerable_artifact, upstream, monkeypatch):  # noqa: F811
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus",
                            routing_strategy_args=base_args(steerable_artifact, "sweeping"))
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow_sweep() -> int:
        started.set()
        release.wait(5)
        finished.set()
        return 0

    monkeypatch.setattr(strategy_module, "sweep_deployments", slow_sweep)
    monkeypatch.setattr(strategy_module, "_next_sweep", 0.0, raising=False)

    async def go():
        metadata: dict = {}
        await router.acompletion(model="proteus-auto", messages=QUESTION, metadata=metadata)
        answered_during_sweep = started.wait(10) and not finished.is_set()
        await router.acompletion(model="proteus-auto", messages=QUESTION, metadata={})  # not due again
        release.set()
        return answered_during_sweep, metadata

    answered_during_sweep, metadata = asyncio.run(go())
    assert answered_during_sweep and metadata["proteus"]["state_key"] == "tier:sweeping@0.9"
    assert strategy_module._next_sweep > 0  # the next sweep waits SWEEP_EVERY_S

# -- several workers: PROMETHEUS_MULTIPROC_DIR ---------------------------------------------------------
# One proxy worker: a Router with PROTEUS routes one request at the tier's tau 0.9, and with a second
# argument takes those settings (tau 0.8, as LiteLLM's DB sync would) and routes one more.
WORKER = r"""
import asyncio, json, sys
import httpx, litellm, respx
sys.path.insert(0, sys.argv[1])
from test_strategy import HOSTS, QUESTION, completion_body, model_list

litellm.disable_aiohttp_transport = True


async def main(args, changed):
    with respx.mock(assert_all_called=False) as mock:
        for slot, (base, _) in HOSTS.items():
            mock.post(f"{base}/chat/completions").mock(return_value=httpx.Response(200, json=completion_body(slot)))
        deployments = [d for d in model_list() if d["model_info"]["id"] != "gpt-4-1106-preview"]
        router = litellm.Router(model_list=deployments, routing_strategy="proteus", routing_strategy_args=args)
        await router.acompletion(model="proteus-auto", messages=QUESTION, metadata={})
        if changed is not None:
            router.update_settings(routing_strategy_args=changed)
            await router.acompletion(model="proteus-auto", messages=QUESTION, metadata={})


asyncio.run(main(json.loads(sys.argv[2]), json.loads(sys.argv[3]) if len(sys.argv) > 3 else None))
"""


@pytest.mark.e2e
def test_several_workers_a_retired_state_leaves_the_multiprocess_scrape(steerable_artifact, tmp_path):
    directory = tmp_path / "prometheus"
    directory.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    args = base_args(steerable_artifact, "workers")
    changed = copy.deepcopy(args)
    changed["tiers"]["workers"] = 0.8
    here = str(Path(__file__).parent)
    command = [sys.executable, "-c", WORKER, here, json.dumps(args)]
    # one worker takes the new settings; the other has not yet (its DB sync is still to come)
    logs = [tmp_path / "moved.log", tmp_path / "behind.log"]
    with logs[0].open("w") as moved_log, logs[1].open("w") as behind_log:
        moved = subprocess.Popen([*command, json.dumps(changed)], env=env, stdout=moved_log, stderr=subprocess.STDOUT)
        behind = subprocess.Popen(command, env=env, stdout=behind_log, stderr=subprocess.STDOUT)
        for worker, log in zip((moved, behind), logs):
            assert worker.wait(timeout=600) == 0, log.read_text()[-3000:]

    def collected(state_key: str) -> dict[str, float]:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(directory))  # what LiteLLM's /metrics reads with several workers
        return series(generate_latest(registry).decode(), "state_key", state_key)

    assert collected("tier:workers@0.8")["proteus_infeasible"] == 1.0
    assert collected("tier:workers@0.9")["proteus_infeasible"] == 1.0  # the worker still routing at 0.9 says so
    mark_process_dead(behind.pid, str(directory))  # that worker gone: only the one that retired the state is left
    assert collected("tier:workers@0.9") == {}
    assert set(collected("tier:workers@0.8")) >= set(STATE_GAUGES) - {"proteus_realised_accuracy"}  # no labels yet


def test_compliance_off_on_one_router_keeps_another_routers_flag_on_a_shared_tau_bucket():
    from types import SimpleNamespace

    class Controller:  # what export reads of a controller: its settings and snapshot
        released = False

        def __init__(self, enabled: bool, infeasible: bool):
            self.settings = SimpleNamespace(enabled=enabled)
            self.infeasible = infeasible

        def snapshot(self, state_key):
            return {"n": 60, "p_mean": 0.7, "n_labels": 0, "realised_mean": None, "delta": 0.3,
                    "infeasible": self.infeasible}

    key = "tau:0.7511"  # a bucket no other test writes
    router_b = compliance_metrics.Writer(Controller(True, True), states={key})
    router_a_old = compliance_metrics.Writer(Controller(True, True), states={key})
    compliance_metrics.export(key, router_b.controller, writer=router_b)
    compliance_metrics.export(key, router_a_old.controller, writer=router_a_old)  # router A wrote it last
    router_a_off = compliance_metrics.Writer(Controller(False, False), states={key})
    compliance_metrics.retire_unused([router_a_off, router_b], (), ())
    # router B's controller still routes on the bucket and says infeasible: its flag stays until it writes again
    assert scraped(key)["proteus_infeasible"] == 1.0
    compliance_metrics.retire_unused([router_a_off], (), ())  # B gone too: nothing on that key is on
    assert (scraped(key)["proteus_delta"], scraped(key)["proteus_infeasible"]) == (0.0, 0.0)
