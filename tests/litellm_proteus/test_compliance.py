"""The live compliance controller: window, dual update, labels, delta < 0 rule, decay, infeasible,
and the Redis-shared state (a real redis-server) with its local fallback."""

from __future__ import annotations

import logging
import math

import pytest
from pydantic import ValidationError

from litellm_proteus.compliance import ComplianceController, ComplianceSettings, StateKeys, realised_bounds, state_key_for

TAU = 0.8
KEY = "tier:standard"
LABEL_Z = ComplianceSettings().label_z  # the labels' one-sided lower 95 % bound


def settings(**overrides) -> ComplianceSettings:
    base = dict(step=0.1, window=10, label_window=20, min_decisions=5, min_labels=5, decay=0.0, margin=0.0,
                delta_min=-0.05, delta_max=0.3, label_prior=10.0, start_z=0.0)
    return ComplianceSettings(**{**base, **overrides})


def feed(controller: ComplianceController, values, p_best=None, key=KEY) -> None:
    for p in values:
        controller.record_decision(key, TAU, p, p if p_best is None else p_best)


def test_window_keeps_the_last_decisions_only():
    controller = ComplianceController(settings())
    feed(controller, [0.5] * 10 + [0.9] * 10)
    snap = controller.snapshot(KEY)
    assert snap["n"] == 10 and snap["p_mean"] == pytest.approx(0.9)


def test_delta_follows_the_dual_update_and_waits_for_min_decisions():
    controller = ComplianceController(settings())
    feed(controller, [0.7] * 4)
    assert controller.control(KEY, TAU).delta == 0.0  # fewer than min_decisions
    feed(controller, [0.7] * 3)  # 3 updates, each + 0.1 * (0.8 - 0.7)
    control = controller.control(KEY, TAU)
    assert control.delta == pytest.approx(0.03) and control.tau_target == pytest.approx(TAU + 0.03)
    feed(controller, [0.7] * 100)
    assert controller.control(KEY, TAU).delta == pytest.approx(0.3)  # delta_max


def test_margin_defaults_to_the_artifacts():
    controller = ComplianceController(settings(margin=None), artifact_margin=0.02)
    feed(controller, [0.81] * 5)  # above tau, below tau + margin: one step of 0.1 * 0.01
    assert controller.control(KEY, TAU).delta == pytest.approx(0.001)


def test_labels_win_over_predictions():
    controller = ComplianceController(settings(margin=0.3))
    for _ in range(10):  # predicted 0.9, realised 0.6: half-weighted (10 labels, prior 10) residual -0.15
        controller.record_feedback(KEY, TAU, 0.9, 0.6)
    feed(controller, [0.9] * 5)
    ci_half = 0.6 - realised_bounds(10, 6.0, LABEL_Z)[1]
    target = TAU + 0.5 * 0.3 + 0.5 * ci_half  # the margin gives way to the labels' uncertainty
    assert controller.control(KEY, TAU).delta == pytest.approx(0.1 * (target - 0.75))
    snap = controller.snapshot(KEY)
    assert snap["n_labels"] == 10 and snap["residual"] == pytest.approx(-0.3) and snap["realised_mean"] == pytest.approx(0.6)


def test_delta_goes_below_zero_only_when_the_labels_lower_bound_is_above_tau():
    sure = ComplianceController(settings(label_window=200))
    for outcome in [1.0] * 98 + [0.0] * 2:  # realised 0.98, one-sided Wilson lower 95 % bound ~0.94 > tau
        sure.record_feedback(KEY, TAU, 0.9, outcome)
    feed(sure, [0.9] * 50)
    assert sure.control(KEY, TAU).delta == pytest.approx(-0.05)  # delta_min
    assert sure.snapshot(KEY)["realised_ci95"][0] > TAU

    unsure = ComplianceController(settings())
    for outcome in [1.0] * 18 + [0.0] * 2:  # realised 0.9 but 20 labels: one-sided lower bound ~0.74 < tau
        unsure.record_feedback(KEY, TAU, 0.75, outcome)
    assert realised_bounds(20, 18.0, LABEL_Z)[1] < TAU
    feed(unsure, [0.95] * 50)
    assert unsure.control(KEY, TAU).delta == 0.0

    no_labels = ComplianceController(settings())
    feed(no_labels, [0.99] * 50)
    assert no_labels.control(KEY, TAU).delta == 0.0


@pytest.mark.parametrize("shared", [False, True])
def test_the_labels_lower_bound_is_one_sided_95_percent_by_default(redis_server, shared):
    outcomes = [1.0] * 87 + [0.0] * 13  # realised 0.87: one-sided bound above tau, two-sided below
    assert realised_bounds(100, 87.0, 1.645)[1] > TAU > realised_bounds(100, 87.0, 1.96)[1]
    deltas = {}
    for z in (None, 1.96):
        controller = ComplianceController(settings(label_window=200, **({} if z is None else {"label_z": z})),
                                          redis_url=redis_server.url if shared else None)
        key = f"{KEY}:z:{z}:{shared}"
        for outcome in outcomes:
            controller.record_feedback(key, TAU, 0.87, outcome)
        for _ in range(50):  # p_hat 0.9 + 0.909 * 0 = 0.9: its bound is above tau too
            controller.record_decision(key, TAU, 0.9, 0.9)
        assert controller.shared == shared
        deltas[z] = controller.control(key, TAU).delta
        # the interval gauges and reports show stays two-sided 95 %
        assert controller.snapshot(key)["realised_ci95"][0] == pytest.approx(realised_bounds(100, 87.0, 1.96)[1])
    assert deltas[None] == pytest.approx(-0.05) and deltas[1.96] == 0.0


@pytest.mark.parametrize("shared", [False, True])
def test_good_labels_from_before_a_drop_license_no_delta_below_zero(redis_server, shared):
    """The label window still holds 100 successes, but what is served now is predicted lower:
    p_hat less the labels' uncertainty is below tau, so delta stays at 0 (it went to delta_min
    while the predictions stayed high)."""
    def run(p_now: float) -> float:
        controller = ComplianceController(settings(label_window=200), redis_url=redis_server.url if shared else None)
        key = f"{KEY}:stale:{p_now}:{shared}"
        for _ in range(100):  # predicted 0.95, all right: residual +0.05, realised lower bound ~0.97
            controller.record_feedback(key, TAU, 0.95, 1.0)
        for _ in range(30):
            controller.record_decision(key, TAU, p_now, p_now)
        assert controller.shared == shared and controller.snapshot(key)["realised_ci95"][0] > TAU
        return controller.control(key, TAU).delta

    # p_hat = 0.77 + 100/110 * 0.05 = 0.8155 > tau (delta would fall), but 0.8155 - 0.026 < tau
    assert run(0.77) == 0.0
    assert run(0.95) == pytest.approx(-0.05)


@pytest.mark.parametrize("shared", [False, True])
def test_a_negative_label_residual_counts_in_full_against_delta_below_zero(redis_server, shared):
    """Labels predicted 0.95 came back 0.90: the realised bound is above tau, and so is what is served
    now with the residual shrunk (label_prior 200: 0.88 - 0.5 * 0.05 - 0.040 > tau), but not with the
    whole residual (0.88 - 0.05 - 0.040 < tau): delta stays at 0.  Without the residual it would fall."""
    def run(p_now: float, prior: float) -> float:
        controller = ComplianceController(settings(label_window=200, label_prior=prior),
                                          redis_url=redis_server.url if shared else None)
        key = f"{KEY}:negative:{p_now}:{prior}:{shared}"
        for outcome in [1.0] * 180 + [0.0] * 20:
            controller.record_feedback(key, TAU, 0.95, outcome)
        for _ in range(30):
            controller.record_decision(key, TAU, p_now, p_now)
        assert controller.shared == shared
        return controller.control(key, TAU).delta

    half = 0.9 - realised_bounds(200, 180.0, LABEL_Z)[1]
    assert realised_bounds(200, 180.0, LABEL_Z)[1] > TAU
    assert 0.88 - 0.5 * 0.05 - half > TAU > 0.88 - 0.05 - half
    assert run(0.88, prior=200.0) == 0.0
    assert run(0.95, prior=200.0) == pytest.approx(-0.05)  # 0.95 - 0.05 - half > tau


def test_delta_decays_back_to_zero_when_traffic_eases():
    controller = ComplianceController(settings(decay=0.05))
    feed(controller, [0.6] * 30)
    assert controller.control(KEY, TAU).delta > 0.1
    feed(controller, [0.8] * 200)  # p_hat exactly at tau: only the decay moves delta
    assert 0.0 <= controller.control(KEY, TAU).delta < 1e-3


def test_infeasible_when_even_the_best_candidate_is_below_tau(caplog):
    controller = ComplianceController(settings())
    feed(controller, [0.7] * 10, p_best=0.75)
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.compliance"):
        first = controller.control(KEY, TAU)
        controller.control(KEY, TAU)
    assert first.infeasible and controller.snapshot(KEY)["infeasible"]
    assert sum("infeasible" in r.getMessage() for r in caplog.records) == 1  # rate-limited
    feed(controller, [0.7] * 10, p_best=0.9)
    assert not controller.control(KEY, TAU).infeasible


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("tau", [0.85, 0.93, 0.77, 0.6])
def test_a_best_p_exactly_at_tau_is_feasible_in_both_backends(redis_server, shared, tau):
    """The running sums round differently (doubles here, long doubles in Redis); the flag must not
    follow the rounding: best p at tau is feasible, a hair below it is not."""
    def infeasible(p_best: float) -> bool:
        controller = ComplianceController(settings(), redis_url=redis_server.url if shared else None)
        key = f"{KEY}:boundary:{tau}:{p_best}"
        for _ in range(25):
            controller.record_decision(key, tau, p_best, p_best)
        assert controller.shared == shared
        return controller.control(key, tau).infeasible

    assert not infeasible(tau)
    assert infeasible(tau - 1e-6)


def test_disabled_controller_routes_at_tau_and_records_nothing():
    controller = ComplianceController(settings(enabled=False))
    feed(controller, [0.1] * 50)
    assert controller.control(KEY, TAU) == controller.control(KEY, TAU)
    control = controller.control(KEY, TAU)
    assert (control.delta, control.infeasible, control.tau_target) == (0.0, False, TAU)
    assert controller.snapshot(KEY)["n"] == 0


def test_feedback_outside_unit_interval_is_refused():
    with pytest.raises(ValueError, match=r"outcome must be in \[0, 1\]"):
        ComplianceController(settings()).record_feedback(KEY, TAU, 0.8, 1.5)


def test_state_keys_per_tier_and_per_tau_bucket():
    assert state_key_for("premium", "key_metadata", 0.9, 0.01) == "tier:premium@0.9"
    # a tier's state is its tau's: a tier moved to another tau starts afresh (its old state expires)
    assert state_key_for("premium", "default", 0.85, 0.01) == "tier:premium@0.85"
    assert state_key_for("premium", "default", 0.8, 0.01) != state_key_for("premium", "default", 0.85, 0.01)
    assert state_key_for("premium", "request", 0.8349, 0.01) == "tau:0.83"
    assert state_key_for("premium", "request", 0.83, 0.01) == "tau:0.83"  # a bucket's lower edge is inside it


def test_state_keys_hold_what_a_configuration_routes_on():
    keys = StateKeys(frozenset({"tier:premium@0.9"}), 0.05, (0.62, 0.93))
    # every key a request-sent tau can get: clamped into the range, then bucketed
    routed = {state_key_for("x", "request", min(max(i / 1000, 0.62), 0.93), 0.05) for i in range(1001)}
    assert routed == {"tau:0.6", "tau:0.65", "tau:0.7", "tau:0.75", "tau:0.8", "tau:0.85", "tau:0.9"}
    assert all(key in keys for key in routed) and "tier:premium@0.9" in keys
    # another bucket width's keys, buckets outside the range, other tiers or taus, malformed keys: not routed on
    for key in ("tau:0.86", "tau:0.55", "tau:0.95", "tier:premium@0.85", "tier:standard@0.9", "tau:nan", "tau:x", "0.9"):
        assert key not in keys, key


@pytest.mark.parametrize("bucket", [0.00125, 0.00333, 0.123456, 0.01])
def test_state_keys_hold_buckets_whose_printed_edge_rounds_down(bucket):
    # the key prints the bucket's edge to 4 significant digits (0.10625 -> "tau:0.1062"), below the edge
    keys = StateKeys(frozenset(), bucket, (0.0, 1.0))
    routed = {state_key_for("x", "request", i / 20000, bucket) for i in range(1, 20001)}
    assert [key for key in routed if key not in keys] == []


def test_settings_name_the_bad_field():
    with pytest.raises(ValidationError, match="delta_min"):
        ComplianceSettings(delta_min=0.1)  # delta < 0 is the labels' discount, never a surcharge
    with pytest.raises(ValidationError, match="window"):
        ComplianceSettings(window=1)
    with pytest.raises(ValidationError, match="extra"):
        ComplianceSettings(stepsize=0.1)


# -- Redis-shared state --------------------------------------------------------------------------
SEQUENCE = [0.72, 0.9, 0.65, 0.81, 0.7, 0.77, 0.6, 0.95, 0.74, 0.69, 0.71, 0.8, 0.66, 0.73]


def run_sequence(controller: ComplianceController, key: str) -> list[float]:
    deltas = []
    for i, p in enumerate(SEQUENCE * 3):
        if i % 3 == 0:
            controller.record_feedback(key, TAU, p, float(i % 2))
        controller.record_decision(key, TAU, p, p + 0.05)
        deltas.append(controller.control(key, TAU).delta)
    return deltas


def test_redis_state_matches_the_local_update(redis_server):
    local = run_sequence(ComplianceController(settings()), KEY)
    shared = ComplianceController(settings(), redis_url=redis_server.url)
    remote = run_sequence(shared, KEY)
    assert shared.shared and remote == pytest.approx(local, abs=1e-9)
    assert any(d > 0 for d in remote)
    snap = shared.snapshot(KEY)
    assert snap["n"] == 10 and snap["n_labels"] == 14


@pytest.mark.parametrize("shared", [False, True])
def test_a_settings_change_goes_on_from_the_state_and_a_smaller_window_shrinks_at_once(redis_server, shared):
    from litellm_proteus.compliance import release_unused, shared_controller

    url = redis_server.url if shared else None
    first = shared_controller(settings(window=20, label_window=24, key_prefix="settings-change:"), url, 1.0, 0.0)
    for i in range(30):
        first.record_decision(KEY, TAU, 0.6 + 0.01 * (i % 10), 0.9)
        first.record_feedback(KEY, TAU, 0.7, float(i % 2))
    before = first.snapshot(KEY)
    second = shared_controller(settings(window=10, label_window=12, key_prefix="settings-change:"), url, 1.0, 0.0,
                               replaces=first)
    assert second is not first
    # the state goes on, counted by the new windows at once: their newest 10 decisions and 12 labels
    shrunk = second.snapshot(KEY)
    assert (shrunk["n"], shrunk["n_labels"], shrunk["delta"]) == (10, 12, before["delta"])
    assert shrunk["p_mean"] == pytest.approx(sum(0.6 + 0.01 * (i % 10) for i in range(20, 30)) / 10)
    assert shrunk["realised_mean"] == pytest.approx(sum(float(i % 2) for i in range(18, 30)) / 12)
    assert (before["n"], before["n_labels"]) == (20, 24)
    assert release_unused(_live_shared(but=first)) == [first]  # what no strategy uses any more closes
    assert first.released and not second.released
    second.record_decision(KEY, TAU, 0.65, 0.9)
    second.record_feedback(KEY, TAU, 0.7, 1.0)
    after = second.snapshot(KEY)
    assert (after["n"], after["n_labels"]) == (10, 12)  # the oldest entries left at once, not one per call
    assert after["p_mean"] == pytest.approx((sum(0.6 + 0.01 * (i % 10) for i in range(21, 30)) + 0.65) / 10)
    assert after["realised_mean"] == pytest.approx((sum(float(i % 2) for i in range(19, 30)) + 1.0) / 12)
    release_unused(_live_shared(but=second))


def _live_shared(but):
    """Every shared controller of this process but ``but`` (those other tests' routers may still use)."""
    from litellm_proteus import compliance

    return [c for c in compliance._shared.values() if c is not but]


def test_two_controllers_share_one_delta_through_redis(redis_server):
    a = ComplianceController(settings(), redis_url=redis_server.url)
    b = ComplianceController(settings(), redis_url=redis_server.url)
    for i in range(20):  # the two "workers" take turns
        (a if i % 2 else b).record_decision(KEY, TAU, 0.7, 0.9)
    assert a.control(KEY, TAU).delta == b.control(KEY, TAU).delta > 0
    assert a.snapshot(KEY)["n"] == b.snapshot(KEY)["n"] == 10


def test_redis_killed_falls_back_to_local_state_without_raising(redis_server, caplog):
    controller = ComplianceController(settings(), redis_url=redis_server.url)
    feed(controller, [0.7] * 10)
    assert controller.control(KEY, TAU).delta > 0
    redis_server.stop()
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.compliance"):
        feed(controller, [0.6] * 10)  # local state from here on: no exception
        control = controller.control(KEY, TAU)
        controller.record_feedback(KEY, TAU, 0.6, 1.0)
    assert not controller.shared and control.delta > 0 and not math.isnan(control.delta)
    assert controller.snapshot(KEY)["n"] == 10  # the local window
    assert sum("Redis failed" in r.getMessage() for r in caplog.records) == 1  # said once


def test_a_redis_outage_goes_on_from_the_shared_state_it_last_read(redis_server, caplog):
    """A paused Redis (every call times out): the tier keeps the delta, the infeasible flag and the
    window sums Redis held, instead of restarting at 0 below min_decisions; once Redis answers
    again, its state wins."""
    import redis

    key, tau = "tier:premium", 0.85
    controller = ComplianceController(ComplianceSettings(retry_after_s=0.0), redis_url=redis_server.url)
    for _ in range(400):
        controller.record_decision(key, tau, 0.70, 0.95)
    for _ in range(30):
        controller.record_feedback(key, tau, 0.70, 1.0)
    shared = controller.control(key, tau)
    assert controller.shared and shared.delta == pytest.approx(0.3) and not shared.infeasible

    client = redis.Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=30)
    client.execute_command("CLIENT", "PAUSE", 3000, "ALL")
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.compliance"):
        during = controller.control(key, tau)  # failed: this call on local state
        assert "keeps its own controller state" not in caplog.text and not controller.shared
        controller.record_decision(key, tau, 0.70, 0.95)  # local, one step from the shared state
        after_step = controller.control(key, tau).delta
        assert "keeps its own controller state" in caplog.text  # the read failed twice in a row: an outage
        snap = controller.snapshot(key)
    assert client.ping()  # answered once the pause is over
    assert during.delta == shared.delta and during.infeasible == shared.infeasible
    assert after_step == pytest.approx(shared.delta, abs=0.02 * 0.3)  # the normal step, not a fall to 0
    assert snap["n"] == 200 and snap["p_mean"] == pytest.approx(0.70) and snap["p_best_mean"] == pytest.approx(0.95)
    assert snap["n_labels"] == 30 and snap["residual"] == pytest.approx(0.30)

    client.hset(controller.redis._keys(key)[0], "delta", "0.125")  # Redis is back: its state wins
    assert controller.control(key, tau).delta == 0.125 and controller.shared


def test_one_redis_timeout_serves_one_call_locally_and_the_next_asks_redis_again(redis_server, caplog):
    """A reply that misses timeout_ms on a busy host is not an outage: no retry_after_s on local state."""
    key, tau = "tier:standard", 0.8
    controller = ComplianceController(ComplianceSettings(retry_after_s=3600.0), redis_url=redis_server.url)
    for _ in range(60):
        controller.record_decision(key, tau, 0.70, 0.95)
    shared = controller.control(key, tau)
    real_read, calls = controller.redis.read, []

    def read_once_late(*args):
        calls.append(args)
        if len(calls) == 1:
            raise TimeoutError("Timeout reading from socket")
        return real_read(*args)

    controller.redis.read = read_once_late
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.compliance"):
        late = controller.control(key, tau)  # local, from the state last read
        assert late.delta == shared.delta and not controller.shared
        controller.record_decision(key, tau, 0.70, 0.95)  # Redis again, though retry_after_s is an hour
        assert controller.shared and controller.control(key, tau).delta == pytest.approx(shared.delta, abs=0.02)
    assert len(calls) == 2 and "keeps its own controller state" not in caplog.text
    assert controller.redis.state(key).n == 61  # the decision after the timeout reached Redis


def test_calls_failing_together_in_one_stall_count_once_and_an_answer_ends_an_outage(redis_server, caplog):
    import threading
    import time

    key, tau = "tier:economy", 0.75
    controller = ComplianceController(ComplianceSettings(retry_after_s=3600.0), redis_url=redis_server.url)
    controller.control(key, tau)
    real_read, started, release = controller.redis.read, threading.Barrier(3), threading.Event()

    def stalled_read(*args):  # both in flight when the stall hits, both time out
        started.wait(5)
        release.wait(5)
        raise TimeoutError("Timeout reading from socket")

    controller.redis.read = stalled_read
    callers = [threading.Thread(target=controller.control, args=(key, tau)) for _ in range(2)]
    for caller in callers:
        caller.start()
    started.wait(5)
    release.set()
    for caller in callers:
        caller.join(5)
    assert controller._failures["read"] == 1  # one stall, one failure: no outage
    controller.redis.read = real_read
    controller.control(key, tau)
    assert controller.shared
    # an outage (two failures in a row) ends with the first answer, not after retry_after_s
    controller.redis.read = lambda *args: (_ for _ in ()).throw(TimeoutError("late"))
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.compliance"):
        controller.control(key, tau)
        controller.control(key, tau)
        assert "keeps its own controller state" in caplog.text and not controller.shared

        def answered_meanwhile(*args):  # a call begun before the outage was called answers after it
            return real_read(*args)

        controller._down_until = 0.0
        controller._failures["read"] = 0
        controller.redis.read = lambda *args: (setattr(controller, "_down_until", time.monotonic() + 3600),
                                               answered_meanwhile(*args))[1]
        controller.control(key, tau)
    assert controller.shared and controller._down_until == 0.0


def test_a_state_continued_from_its_sums_lets_its_oldest_entries_leave_at_their_mean():
    from litellm_proteus.compliance import WindowState

    controller = ComplianceController(settings())  # window 10, label_window 20
    shared = WindowState(n=10, sum_p=7.0, sum_p2=4.95, sum_best=9.0, n_labels=20, sum_res=-2.0, sum_y=12.0,
                         delta=0.2, infeasible=True)
    controller.local.continue_from(KEY, shared)
    assert controller.control(KEY, TAU) == controller.control(KEY, TAU) and controller.control(KEY, TAU).delta == 0.2
    feed(controller, [0.9] * 4, p_best=0.95)
    snap = controller.snapshot(KEY)
    assert snap["n"] == 10 and snap["p_mean"] == pytest.approx((0.7 * 6 + 0.9 * 4) / 10)
    assert snap["p_best_mean"] == pytest.approx((0.9 * 6 + 0.95 * 4) / 10)
    assert controller.local.state(KEY).sum_p2 == pytest.approx(4.95 * 0.6 + 0.81 * 4)
    feed(controller, [0.9] * 6, p_best=0.95)  # every entry it was continued from has left
    assert controller.snapshot(KEY)["p_mean"] == pytest.approx(0.9) and not controller.control(KEY, TAU).infeasible
    for _ in range(20):
        controller.record_feedback(KEY, TAU, 0.9, 1.0)
    snap = controller.snapshot(KEY)
    assert snap["n_labels"] == 20 and snap["residual"] == pytest.approx(0.1) and snap["realised_mean"] == pytest.approx(1.0)


def test_proxy_config_key_switches_it_off_and_names_bad_fields():
    from litellm_proteus.config import ProteusConfig, ProteusConfigError

    assert ProteusConfig.parse({}).compliance.enabled  # default on
    assert not ProteusConfig.parse({"compliance": {"enabled": False}}).compliance.enabled
    with pytest.raises(ProteusConfigError, match=r"compliance\.stepp: .*allowed: \[.*'step'"):
        ProteusConfig.parse({"compliance": {"stepp": 0.1}})


def test_few_uncertain_labels_never_raise_the_target_above_the_margin():
    controller = ComplianceController(settings(margin=0.01))
    for outcome in [1.0, 0.0] * 5:  # 10 labels, realised = predicted = 0.5: residual 0, wide interval
        controller.record_feedback(KEY, TAU, 0.5, outcome)
    feed(controller, [0.805] * 5)  # p_hat = 0.805 = tau + margin / 2: one step of 0.1 * 0.005
    assert controller.control(KEY, TAU).delta == pytest.approx(0.1 * 0.005)


def test_predictor_routes_at_tau_plus_delta(make_artifact):
    import numpy as np

    from litellm_proteus.predictor import Candidate, ProteusPredictor

    predictor = ProteusPredictor(make_artifact(["small", "large"]))
    emb = np.random.default_rng(0).normal(size=(2, 384)).astype(np.float32)
    candidates = [[Candidate(0, 0.001), Candidate(1, 0.01)]] * 2
    plain, offset = predictor.decide_embeddings(emb, [0.75, 0.75], candidates, deltas=[0.0, 0.1])
    assert (plain.delta, offset.delta) == (0.0, 0.1)
    assert offset.tau_effective == plain.tau_effective == 0.75  # the promise stays tau; the policy sees more
    assert offset.policy_tau == predictor.taus.policy_tau(0.85) and plain.policy_tau == predictor.taus.policy_tau(0.75)
    with pytest.raises(ValueError, match="deltas must have one entry per request"):
        predictor.decide_embeddings(emb, [0.75, 0.75], candidates, deltas=[0.1])


def test_label_free_target_is_the_validated_reference_p_capped_by_the_margin():
    def delta_after(p_ref, p=0.82, margin=0.05):
        controller = ComplianceController(settings(margin=margin))
        for _ in range(5):
            controller.record_decision(KEY, TAU, p, p, p_ref)
        return controller.control(KEY, TAU).delta

    assert delta_after(0.82) == 0.0  # live p equals what static calibration validated: no move
    assert delta_after(None) == pytest.approx(0.1 * (TAU + 0.05 - 0.82))  # no reference: tau + margin
    assert delta_after(0.95) == pytest.approx(0.1 * (TAU + 0.05 - 0.82))  # the margin caps the reference
    assert delta_after(0.83) == pytest.approx(0.1 * 0.01)  # predicted below the reference: moves
    assert delta_after(0.7, p=0.79) == pytest.approx(0.1 * 0.01)  # a reference below tau: the target is tau


def test_labels_correct_the_reference_target_as_they_do_the_margin():
    controller = ComplianceController(settings(margin=0.05))
    for _ in range(10):  # predicted 0.82, realised 0.6: half-weighted residual -0.11
        controller.record_feedback(KEY, TAU, 0.82, 0.6)
    for _ in range(5):
        controller.record_decision(KEY, TAU, 0.82, 0.82, 0.82)
    ci_half = 0.6 - realised_bounds(10, 6.0, LABEL_Z)[1]
    target = TAU + min(0.05, 0.5 * 0.02 + 0.5 * ci_half)
    assert controller.control(KEY, TAU).delta == pytest.approx(0.1 * (target - (0.82 - 0.11)))


def test_start_z_keeps_delta_at_rest_within_the_windows_noise():
    noisy = [0.75, 0.85] * 5  # mean 0.8, standard error of the mean 0.05 / sqrt(10) = 0.0158

    def run(values, start_z, margin=0.02):
        controller = ComplianceController(settings(margin=margin, start_z=start_z))
        feed(controller, values)
        return controller

    assert run(noisy, 0.0).control(KEY, TAU).delta > 0  # 0.02 short of tau + margin: moves
    assert run(noisy, 2.0).control(KEY, TAU).delta == 0.0  # 0.02 < 2 standard errors: at rest
    assert run([0.65, 0.75] * 5, 2.0).control(KEY, TAU).delta > 0  # 0.1 short: a real shortfall
    moving = run([0.65, 0.75] * 5, 2.0)  # once moving, every shortfall counts (no band)
    before = moving.control(KEY, TAU).delta
    feed(moving, noisy)
    assert moving.control(KEY, TAU).delta > before and moving.snapshot(KEY)["p_mean"] == pytest.approx(0.8)


def test_redis_state_matches_the_local_update_with_reference_and_start_z(redis_server):
    def run(controller: ComplianceController) -> list[float]:
        deltas = []
        for i, p in enumerate(SEQUENCE * 3):
            if i % 3 == 0:
                controller.record_feedback(KEY, TAU, p, float(i % 2))
            controller.record_decision(KEY, TAU, p, p + 0.05, 0.78 + 0.01 * (i % 4))
            deltas.append(controller.control(KEY, TAU).delta)
        return deltas

    shared = dict(margin=0.03, start_z=1.0, decay=0.01)
    local = run(ComplianceController(settings(**shared)))
    remote = run(ComplianceController(settings(**shared), redis_url=redis_server.url))
    assert remote == pytest.approx(local, abs=1e-9) and any(d > 0 for d in remote)



def test_start_z_holds_on_redis_state_an_older_worker_wrote_without_sum_p2(redis_server):
    """A rolling deploy: older workers keep the decision list and sum_p but no sum_p2 (and pop
    entries without subtracting their p^2); the rest band must read the window's real spread."""
    import redis

    noisy = [0.75, 0.85] * 5  # 0.02 short of tau + margin, within 2 standard errors: at rest
    controller = ComplianceController(settings(margin=0.02, start_z=2.0), redis_url=redis_server.url)
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    hash_key = controller.redis._keys(KEY)[0]
    feed(controller, noisy)
    client.hdel(hash_key, "sum_p2")  # the hash as an older worker leaves it
    feed(controller, noisy * 2)
    assert controller.shared and controller.control(KEY, TAU).delta == 0.0
    client.hset(hash_key, "sum_p2", 5.0)  # entries an older worker popped left their p^2 behind
    feed(controller, noisy * 3)
    assert controller.control(KEY, TAU).delta == 0.0
    assert float(client.hget(hash_key, "sum_p2")) == pytest.approx(sum(p * p for p in noisy), abs=0.2)
    assert controller.snapshot(KEY)["n"] == 10


@pytest.mark.parametrize("p_ref", [math.nan, math.inf])
def test_a_reference_p_that_is_not_a_number_falls_back_to_the_margin(redis_server, p_ref):
    """An artifact whose stored reference p is NaN must not turn delta (the routed tau) into NaN,
    nor fail the Lua script (Lua reads 'nan' as nil)."""
    for controller in (ComplianceController(settings(margin=0.05)),
                       ComplianceController(settings(margin=0.05), redis_url=redis_server.url)):
        key = f"{KEY}:{p_ref}:{controller.redis is not None}"
        for _ in range(5):
            controller.record_decision(key, TAU, 0.82, 0.82, p_ref)
        assert controller.shared == (controller.redis is not None)
        assert controller.control(key, TAU).delta == pytest.approx(0.1 * (TAU + 0.05 - 0.82))


def test_start_z_on_a_window_of_constant_p_has_no_spread_and_moves_on_any_shortfall(redis_server):
    """sum_p2 / n - mean^2 rounds below 0 for a constant p: the standard error is 0, never NaN."""
    for controller in (ComplianceController(settings(margin=0.0, start_z=3.0)),
                       ComplianceController(settings(margin=0.0, start_z=3.0), redis_url=redis_server.url)):
        key = f"{KEY}:constant:{controller.redis is not None}"
        for _ in range(40):
            controller.record_decision(key, TAU, 0.7, 0.9)
        delta = controller.control(key, TAU).delta
        assert math.isfinite(delta) and delta > 0 and controller.shared == (controller.redis is not None)


def test_the_sum_p2_re_sum_walks_a_large_window_in_bounded_chunks(redis_server):
    """window 100000: the re-sum that keeps sum_p2 exact (an offset left by older workers, drift)
    is spread over calls, none walking more than RESUM_CHUNK entries of the list."""
    import redis

    from litellm_proteus.compliance import RESUM_CHUNK

    window = 100_000
    controller = ComplianceController(settings(window=window), redis_url=redis_server.url, timeout_s=5.0)
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    hash_key, decisions, _ = controller.redis._keys(KEY)
    ps = [0.5 + (i % 97) / 250 for i in range(window)]
    pipe = client.pipeline(transaction=False)
    for start in range(0, window, 10_000):
        pipe.rpush(decisions, *(f"{p!r} {p + 0.05!r}" for p in ps[start:start + 10_000]))
    # a full window whose sum_p2 is 5 off, one decision short of its re-sum
    pipe.hset(hash_key, mapping={"sum_p": repr(sum(ps)), "sum_best": repr(sum(ps) + 0.05 * window),
                                 "sum_p2": repr(sum(p * p for p in ps) + 5.0), "p2_age": window - 1})
    pipe.execute()

    walks = []
    while not walks or client.hexists(hash_key, "p2_left"):
        walks.append(controller.redis.decision(KEY, TAU, 0.7, 0.75, 0.0))
        assert len(walks) < 2 * window / RESUM_CHUNK
    assert controller.shared
    assert max(walks) == RESUM_CHUNK and len(walks) > window / (RESUM_CHUNK + 1)  # spread over calls
    exact = sum(float(entry.split()[0]) ** 2 for entry in client.lrange(decisions, 0, -1))
    assert float(client.hget(hash_key, "sum_p2")) == pytest.approx(exact, rel=1e-12)  # the offset is gone
    assert client.llen(decisions) == window and int(client.hget(hash_key, "p2_age")) == 0


def test_redis_state_matches_the_local_update_while_sum_p2_is_re_summed_in_chunks(redis_server):
    """A re-sum over several calls (chunk 7, window 60) keeps sum_p2, and the deltas, as the
    local update has them."""
    values = [p + 0.01 * (i % 5) for i, p in enumerate(SEQUENCE * 30)]

    def run(controller: ComplianceController) -> tuple[list[float], list[float]]:
        deltas, sums = [], []
        for i, p in enumerate(values):
            if i % 4 == 0:
                controller.record_feedback(KEY, TAU, p, float(i % 3 == 0))
            controller.record_decision(KEY, TAU, p, p + 0.05, 0.8)
            deltas.append(controller.control(KEY, TAU).delta)
            sums.append(controller._call("state", KEY).sum_p2)
        return deltas, sums

    shared = dict(window=60, label_window=40, margin=0.03, start_z=1.0, decay=0.01)
    local_deltas, local_sums = run(ComplianceController(settings(**shared)))
    remote = ComplianceController(settings(**shared), redis_url=redis_server.url)
    remote.redis.resum_chunk = 7
    walks, decision = [], remote.redis.decision
    remote.redis.decision = lambda *args: walks.append(decision(*args))
    remote_deltas, remote_sums = run(remote)
    assert remote.shared and max(walks) == 7 and sum(walks) > 3 * 60  # several re-sums, each over calls
    assert remote_sums == pytest.approx(local_sums, abs=1e-9)
    assert remote_deltas == pytest.approx(local_deltas, abs=1e-9) and any(d > 0 for d in remote_deltas)


class _SwapBeforeEachLock:
    """The backend's lock, but before each acquisition another thread's ``continue_from`` takes it
    first: the interleaving in which a state is replaced between a thread's fetch and its update."""

    def __init__(self, backend, key: str, shared):
        import threading

        self.backend, self.key, self.shared = backend, key, shared
        self.real = threading.Lock()
        self.swaps = 0
        self._swapping = False

    def __enter__(self):
        if not self._swapping:
            self._swapping = True
            try:
                self.backend.continue_from(self.key, self.shared)  # takes this lock itself
                self.swaps += 1
            finally:
                self._swapping = False
        self.real.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.real.release()


@pytest.mark.parametrize("kind", ["decision", "feedback"])
def test_a_state_replaced_on_another_thread_never_loses_an_update(kind):
    """continue_from (an outage's first local call, any thread) between a decision's or a label's
    fetch of the state and its update: the update lands on the state that is there."""
    from litellm_proteus.compliance import WindowState

    backend = ComplianceController(settings()).local  # window 10, label_window 20
    backend.decision(KEY, TAU, 0.5, 0.5, 0.0)
    shared = WindowState(n=5, sum_p=3.5, sum_p2=2.45, sum_best=4.5, n_labels=5, sum_res=-0.5, sum_y=3.0, delta=0.2)
    lock = _SwapBeforeEachLock(backend, KEY, shared)
    backend._lock = lock
    if kind == "decision":
        backend.decision(KEY, TAU, 0.9, 0.95, 0.0)
    else:
        backend.feedback(KEY, 0.9, 1.0)
    backend._lock = lock.real
    state = backend.state(KEY)
    assert lock.swaps >= 1
    if kind == "decision":
        assert state.n == 6 and state.sum_p == pytest.approx(4.4) and list(state.decisions) == [(0.9, 0.95)]
        assert state.n_labels == 5
    else:
        assert state.n_labels == 6 and state.sum_y == pytest.approx(4.0) and list(state.labels) == [(0.9, 1.0)]
        assert state.n == 5


def test_a_read_only_recovery_between_two_outages_keeps_the_window_sums(tmp_path, caplog):
    """Outage 1 (Redis stopped), then Redis answers reads but not decisions (CLIENT PAUSE WRITE: the
    read before a decision answers, the decision's script times out), three times, a flapping Redis.
    Each fallback goes on from the window Redis holds, never from an empty one."""
    import redis

    from .conftest import start_redis

    key, tau = "tier:premium", 0.85
    server = start_redis(directory=tmp_path)
    restarted = None
    try:
        controller = ComplianceController(ComplianceSettings(retry_after_s=0.0), redis_url=server.url)
        for _ in range(300):
            controller.record_decision(key, tau, 0.70, 0.95)
        shared = controller.control(key, tau)
        assert controller.snapshot(key)["n"] == 200 and shared.delta == pytest.approx(0.3)
        redis.Redis.from_url(server.url).save()
        server.stop()
        with caplog.at_level(logging.WARNING, logger="litellm_proteus.compliance"):
            for _ in range(5):  # outage 1: every call refused, local state from the state last read
                controller.control(key, tau)
                controller.record_decision(key, tau, 0.70, 0.95)
            assert controller.local.state(key).n == 200
            restarted = start_redis(server.port, tmp_path)
            admin = redis.Redis.from_url(restarted.url, decode_responses=True, socket_timeout=30)
            assert admin.llen(controller.redis._keys(key)[1]) == 200  # Redis's state survived the restart
            admin.execute_command("CLIENT", "PAUSE", 600_000, "WRITE")
            try:
                for _ in range(3):
                    read = controller.control(key, tau)  # answered
                    controller.record_decision(key, tau, 0.70, 0.95)  # times out: outage 2, 3, 4
                    local = controller.local.state(key)
                    assert read.delta == shared.delta
                    assert local.n == 200 and local.sum_p / local.n == pytest.approx(0.70)
                    assert local.sum_best / local.n == pytest.approx(0.95)
                    assert local.delta == pytest.approx(shared.delta, abs=0.02 * 0.3)  # one normal step
            finally:
                admin.execute_command("CLIENT", "UNPAUSE")
        messages = [r.getMessage() for r in caplog.records]
        assert sum("Redis failed" in m for m in messages) == 4 and sum("reachable again" in m for m in messages) == 3
        assert controller.control(key, tau).delta == shared.delta and controller.snapshot(key)["n"] == 200
    finally:
        server.stop()
        if restarted is not None:
            restarted.stop()


# The decision-list part of the Lua script of workers from before the chunked re-sum (commit 564563e),
# verbatim: its decisions push and pop without p2_left / p2_scan and re-sum the whole list at once.
OLDER_WORKER_DECISION_LUA = """
local h, dl, ll = KEYS[1], KEYS[2], KEYS[3]
local kind, tau, p, x = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local function split(s) local i = string.find(s, ' '); return tonumber(string.sub(s, 1, i - 1)), tonumber(string.sub(s, i + 1)) end
  local resum = redis.call('HEXISTS', h, 'sum_p2') == 0 or redis.call('HINCRBY', h, 'p2_age', 1) >= window
  redis.call('RPUSH', dl, ARGV[3] .. ' ' .. ARGV[4])
  redis.call('HINCRBYFLOAT', h, 'sum_p', p)
  redis.call('HINCRBYFLOAT', h, 'sum_p2', p * p)
  redis.call('HINCRBYFLOAT', h, 'sum_best', x)
  if redis.call('LLEN', dl) > window then
    local op, ob = split(redis.call('LPOP', dl))
    redis.call('HINCRBYFLOAT', h, 'sum_p', -op)
    redis.call('HINCRBYFLOAT', h, 'sum_p2', -op * op)
    redis.call('HINCRBYFLOAT', h, 'sum_best', -ob)
  end
  if resum then
    local s2 = 0
    for _, entry in ipairs(redis.call('LRANGE', dl, 0, -1)) do local q = split(entry); s2 = s2 + q * q end
    redis.call('HSET', h, 'sum_p2', string.format('%.17g', s2), 'p2_age', 0)
  end
return 1
"""


def _list_sum_p2(client, decisions: str) -> float:
    return sum(float(entry.split()[0]) ** 2 for entry in client.lrange(decisions, 0, -1))


def test_a_chunked_re_sum_beside_an_older_workers_script_ends_exact(redis_server):
    """A rolling deploy: an older worker's decisions push and pop between a chunked walk's calls
    (window 50, chunk 3).  A walk goes on only over the list as it left it; every re-sum that
    completes, the walk's or the older script's own, leaves sum_p2 the list's sum of p^2."""
    import random

    import redis

    window = 50
    controller = ComplianceController(settings(window=window), redis_url=redis_server.url, timeout_s=5.0)
    backend = controller.redis
    backend.resum_chunk = 3
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    older = client.register_script(OLDER_WORKER_DECISION_LUA)
    hash_key, decisions, _ = backend._keys(KEY)
    rng = random.Random(1)
    completed = {"walk": 0, "older": 0}
    interrupted = 0
    for i in range(4000):
        if i % 250 == 0:  # an offset (drift, a worker without sum_p2) that only a re-sum removes
            client.hincrbyfloat(hash_key, "sum_p2", 5.0)
        p = rng.random()
        older_share = (0.5, 0.1, 0.02)[i // 250 % 3]
        walking = client.hexists(hash_key, "p2_left")
        if rng.random() < older_share:
            older(keys=backend._keys(KEY), args=backend._args("d", TAU, p, p, 0.0))
            interrupted += walking
            by = "older"
        else:
            assert backend.decision(KEY, TAU, p, p, 0.0) <= 3
            by = "walk"
        if client.hget(hash_key, "p2_age") == "0":  # a re-sum completed in this call
            completed[by] += 1
            assert float(client.hget(hash_key, "sum_p2")) == pytest.approx(_list_sum_p2(client, decisions), rel=1e-9)
    assert completed["walk"] > 10 and completed["older"] > 10 and interrupted > 10
    assert client.llen(decisions) == window


@pytest.mark.parametrize("cut", ["deleted", "trimmed"])
def test_a_walk_over_a_list_deleted_or_trimmed_mid_walk_ends_exact(redis_server, cut):
    """The decision list is deleted (evicted) or trimmed while the hash and its walk are kept: the
    window starts afresh, the walk with it, and sum_p2 is the new list's exact sum of p^2."""
    import redis

    window = 50
    controller = ComplianceController(settings(window=window), redis_url=redis_server.url, timeout_s=5.0)
    backend = controller.redis
    backend.resum_chunk = 3
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    hash_key, decisions, _ = backend._keys(KEY)
    values = [0.5 + (i % 13) / 40 for i in range(300)]
    for i, p in enumerate(values[:100]):  # a full window, then no walk in progress
        backend.decision(KEY, TAU, p, p, 0.0)
        if i >= 60 and not client.hexists(hash_key, "p2_left"):
            break
    assert client.llen(decisions) == window and not client.hexists(hash_key, "p2_left")
    client.hincrbyfloat(hash_key, "sum_p2", 5.0)
    client.hset(hash_key, "p2_age", window)  # the next decision starts a walk
    for p in values[100:103]:
        backend.decision(KEY, TAU, p, p, 0.0)
    assert int(client.hget(hash_key, "p2_left")) > 3  # mid-walk
    if cut == "deleted":
        client.delete(decisions)
    else:
        client.ltrim(decisions, -10, -1)
    walks = []
    for p in values[103:]:
        walks.append(backend.decision(KEY, TAU, p, p, 0.0))
        if not client.hexists(hash_key, "p2_left"):
            break
    assert not client.hexists(hash_key, "p2_left") and max(walks) <= 3 and client.llen(decisions) == len(walks)
    assert float(client.hget(hash_key, "sum_p2")) == pytest.approx(_list_sum_p2(client, decisions), rel=1e-9)


# -- a list or hash lost under the other (eviction, DEL, expiry of one key) -----------------------
def test_a_deleted_decision_list_restarts_the_window_its_hash_still_summed(redis_server):
    """The decision list is deleted while its hash survives: the window starts afresh -- n, mean p,
    mean best p and sum_p2 those of a fresh state fed only the later decisions -- and delta goes on
    from the value the hash kept (as the local state goes on from Redis's after an outage)."""
    import redis

    from litellm_proteus.compliance import WindowState

    controller = ComplianceController(settings(window=50), redis_url=redis_server.url)
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    feed(controller, [0.7] * 40, p_best=0.75)
    kept = controller.control(KEY, TAU)
    assert kept.delta > 0
    client.delete(controller.redis._keys(KEY)[1])
    assert controller.snapshot(KEY)["n"] == 0 and controller.redis.seen[KEY].sum_p == 0.0  # read as the script leaves it
    later = [0.9, 0.85, 0.95, 0.88, 0.92, 0.9, 0.87]
    feed(controller, later, p_best=0.97)
    fresh = ComplianceController(settings(window=50))
    fresh.local.continue_from(KEY, WindowState(delta=kept.delta, infeasible=kept.infeasible))
    feed(fresh, later, p_best=0.97)
    got, want = controller.snapshot(KEY), fresh.snapshot(KEY)
    assert controller.shared and got["n"] == want["n"] == len(later)
    assert got["p_mean"] == pytest.approx(sum(later) / len(later)) and got["p_mean"] == pytest.approx(want["p_mean"])
    assert got["p_best_mean"] == pytest.approx(0.97) and got["delta"] == pytest.approx(want["delta"], abs=1e-12)
    assert want["delta"] != kept.delta  # the later decisions moved it (n >= min_decisions)
    assert controller._call("state", KEY).sum_p2 == pytest.approx(sum(p * p for p in later))


def test_a_fallback_after_reading_a_deleted_list_goes_on_from_an_empty_window(redis_server):
    """Redis fails right after a read that found the decision list gone: the local state goes on
    from an empty window, not from sums of entries that are gone."""
    import redis

    controller = ComplianceController(settings(window=50), redis_url=redis_server.url)
    feed(controller, [0.7] * 40)
    redis.Redis.from_url(redis_server.url).delete(controller.redis._keys(KEY)[1])
    controller.control(KEY, TAU)  # the last read from Redis
    redis_server.stop()
    feed(controller, [0.9] * 5)
    snap = controller.snapshot(KEY)
    assert not controller.shared and snap["n"] == 5 and snap["p_mean"] == pytest.approx(0.9)


def _lose_locally(controller: ComplianceController, key: str, lost: str) -> None:
    """The local mirror of what the script does with a lost list or hash."""
    from litellm_proteus.compliance import WindowState

    state = controller.local._states[key]
    if lost in ("decisions", "trimmed"):
        state.decisions.clear()
        state.n, state.sum_p, state.sum_p2, state.sum_best = 0, 0.0, 0.0, 0.0
    elif lost == "labels":
        state.labels.clear()
        state.n_labels, state.sum_res, state.sum_y = 0, 0.0, 0.0
    else:  # the hash: delta and both windows
        controller.local._states[key] = WindowState()


@pytest.mark.parametrize("lost", ["decisions", "trimmed", "labels", "hash"])
def test_redis_state_matches_the_local_update_across_a_lost_list_or_hash(redis_server, lost):
    """A list deleted or trimmed under its hash, or the hash deleted under its lists: the script
    starts that window afresh, delta by delta as the local update does after the same loss."""
    import redis

    local = ComplianceController(settings())
    remote = ComplianceController(settings(), redis_url=redis_server.url)
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    h, dl, ll = remote.redis._keys(KEY)
    assert run_sequence(remote, KEY) == pytest.approx(run_sequence(local, KEY), abs=1e-9)
    if lost == "trimmed":
        client.ltrim(dl, -4, -1)
    else:
        client.delete({"decisions": dl, "labels": ll, "hash": h}[lost])
    _lose_locally(local, KEY, lost)
    assert remote.snapshot(KEY)["n"] == local.snapshot(KEY)["n"]
    assert remote.snapshot(KEY)["n_labels"] == local.snapshot(KEY)["n_labels"]
    remote_deltas, local_deltas = run_sequence(remote, KEY), run_sequence(local, KEY)
    assert remote.shared and remote_deltas == pytest.approx(local_deltas, abs=1e-9) and any(d > 0 for d in remote_deltas)
    got, want = remote.snapshot(KEY), local.snapshot(KEY)
    for field in ("n", "p_mean", "p_best_mean", "n_labels", "residual", "delta"):
        assert got[field] == pytest.approx(want[field], abs=1e-9), field
    assert remote._call("state", KEY).sum_p2 == pytest.approx(local._call("state", KEY).sum_p2, abs=1e-9)


def test_a_window_made_smaller_counts_entries_known_only_by_their_sums_at_their_mean():
    """A local state continued from Redis knows its oldest entries by their sums alone: where the
    newest entries of a smaller window reach into them, they count at their mean."""
    from litellm_proteus.compliance import WindowState, newest

    from_redis = WindowState(n=6, sum_p=3.0, sum_p2=1.8, sum_best=5.4, n_labels=4, sum_res=0.4, sum_y=2.0).continued()
    from_redis.decisions.extend([(0.9, 1.0), (0.7, 0.8)])  # two decisions since: 8 in the window
    from_redis.n, from_redis.sum_p, from_redis.sum_p2, from_redis.sum_best = 8, 4.6, 3.1, 7.2
    view = newest(from_redis, 5, 3, list(from_redis.decisions), [])
    assert (view.n, view.n_labels) == (5, 3)
    assert view.sum_p == pytest.approx(0.9 + 0.7 + 3 * 0.5)
    assert view.sum_p2 == pytest.approx(0.81 + 0.49 + 3 * 0.3)
    assert view.sum_best == pytest.approx(1.0 + 0.8 + 3 * 0.9)
    assert (view.sum_res, view.sum_y) == pytest.approx((3 * 0.1, 3 * 0.5))
    assert (from_redis.n, from_redis.n_labels) == (8, 4)  # a view: the state itself is unchanged


def test_a_window_that_cannot_hold_min_decisions_is_refused_naming_both():
    """delta and the infeasible flag move only from min_decisions decisions on: a smaller window
    would freeze them for good."""
    with pytest.raises(ValidationError, match=r"min_decisions \(50\) must be at most window \(30\)"):
        ComplianceSettings(window=30)
    with pytest.raises(ValidationError, match=r"min_labels \(20\) must be at most label_window \(10\)"):
        ComplianceSettings(label_window=10)
    assert ComplianceSettings(window=30, min_decisions=30).window == 30


@pytest.mark.parametrize("shared", [False, True])
def test_a_p_that_is_not_a_finite_number_is_left_out_of_the_window(redis_server, shared, caplog):
    """One NaN p would make delta NaN for good (local) or poison the Redis sums (the script fails after
    pushing it): it is left out, with a warning, and the window goes on."""
    controller = ComplianceController(settings(), redis_url=redis_server.url if shared else None)
    key = f"{KEY}:not-finite:{shared}"
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.compliance"):
        for p in [0.7] * 5 + [math.nan, math.inf] + [0.7] * 5:
            controller.record_decision(key, TAU, p, 0.9)
        controller.record_feedback(key, TAU, math.nan, 1.0)
    control, snap = controller.control(key, TAU), controller.snapshot(key)
    assert math.isfinite(control.delta) and control.delta > 0 and controller.shared == shared
    assert (snap["n"], snap["n_labels"], snap["p_mean"]) == (10, 0, pytest.approx(0.7))
    assert caplog.text.count("not a finite number") == 1


def test_residual_windows_kept_through_an_outage_are_dropped_once_redis_answers(redis_server):
    """Labels recorded locally while Redis was down must not judge deployments in a later outage."""
    controller = ComplianceController(settings(retry_after_s=0.0), redis_url=redis_server.url)
    controller.local.record_residual("d", -0.5, 100)  # what an outage left in this process
    assert controller.local.residual_stats(["d"])["d"][0] == 1
    controller.record_residual("d", 0.1, 100)  # Redis answers
    assert controller.shared and controller.local.residual_stats(["d"])["d"][0] == 0
    assert controller.residual_stats(["d"])["d"][0] == 1  # Redis's window: the one label it was sent
