"""The quality breaker (``litellm_proteus/quality_breaker.py``): the bound, the per-deployment
windows in this process and in Redis, the refresh, a Redis outage."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from litellm_proteus.compliance import ComplianceController, ComplianceSettings
from litellm_proteus.quality_breaker import BreakerSettings, QualityBreaker, breaker_open

ON = BreakerSettings(enabled=True, min_labels=20, refresh_s=0.0, label_window=50)


def feed(breaker: QualityBreaker, deployment: str, residuals: list[float]) -> None:
    for r in residuals:
        breaker.record(deployment, r)


def test_open_only_when_the_upper_bound_is_below_minus_threshold():
    assert not breaker_open(19, -19 * 0.5, 19 * 0.25, ON)  # too few labels
    assert breaker_open(20, -20 * 0.5, 20 * 0.25, ON)  # constant -0.5: proven
    # mean -0.1 with sd 0.5 over 20 labels: upper bound -0.1 + 1.96 * 0.5 / sqrt(20) > -0.05
    n, mean, sd = 20, -0.1, 0.5
    assert not breaker_open(n, n * mean, n * (sd * sd + mean * mean), ON)
    n = 2000  # the same residuals, many more of them: proven
    assert breaker_open(n, n * mean, n * (sd * sd + mean * mean), ON)


def test_a_worse_deployment_is_left_out_and_comes_back_as_better_labels_refill_its_window(caplog):
    breaker = QualityBreaker(ON, ComplianceController(ComplianceSettings(breaker=ON)))
    feed(breaker, "d1", [-0.6] * 20)
    feed(breaker, "d2", [0.05, -0.05] * 10)
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.quality_breaker"):
        assert breaker.open_ids(["d1", "d2", "d3"]) == {"d1"}
        assert "deployment d1 is left out: its last 20 feedback labels are 60.0 pp below its predictions" in caplog.text
        feed(breaker, "d1", [0.0] * 50)  # labels of earlier decisions: the window (50) holds only good ones
        assert breaker.open_ids(["d1"]) == set()
        assert "deployment d1 is a candidate again" in caplog.text


def test_after_the_cooldown_a_left_out_deployment_is_a_candidate_again_with_a_fresh_window(caplog):
    """Left out, a deployment gets no labels to prove itself fixed: the cooldown re-admits it (half-open)."""
    now = [0.0]
    controller = ComplianceController(ComplianceSettings())
    breaker = QualityBreaker(ON.model_copy(update={"cooldown_s": 600.0}), controller, clock=lambda: now[0])
    feed(breaker, "d1", [-0.6] * 20)
    assert breaker.open_ids(["d1"]) == {"d1"}
    now[0] = 599.0
    assert breaker.open_ids(["d1"]) == {"d1"}
    now[0] = 600.0
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.quality_breaker"):
        assert breaker.open_ids(["d1"]) == set()
    assert "d1 is a candidate again (cooldown over: its window starts afresh)" in caplog.text
    assert controller.residual_stats(["breaker:d1"]) == {"breaker:d1": (0, 0, 0)}
    feed(breaker, "d1", [-0.6] * 19)  # still bad: out again once min_labels fresh labels prove it
    assert breaker.open_ids(["d1"]) == set()
    feed(breaker, "d1", [-0.6])
    assert breaker.open_ids(["d1"]) == {"d1"}


def test_disabled_records_nothing_and_leaves_nothing_out():
    controller = ComplianceController()
    breaker = QualityBreaker(BreakerSettings(), controller)
    feed(breaker, "d1", [-0.9] * 100)
    assert breaker.open_ids(["d1"]) == set() and controller.residual_stats(["breaker:d1"]) == {"breaker:d1": (0, 0, 0)}


def test_a_process_rereads_after_refresh_s_and_at_once_after_its_own_label():
    controller = ComplianceController(ComplianceSettings())
    breaker = QualityBreaker(BreakerSettings(enabled=True, min_labels=2, refresh_s=3600), controller)
    assert breaker.open_ids(["d1"]) == set()
    controller.record_residual("breaker:d1", -0.9, 500)  # another worker's labels: unseen until the refresh
    controller.record_residual("breaker:d1", -0.9, 500)
    assert breaker.open_ids(["d1"]) == set()
    breaker.record("d1", -0.9)  # this process's own label: read at once
    assert breaker.open_ids(["d1"]) == {"d1"}


@pytest.mark.parametrize("lost", ["list", "hash"])
def test_a_residual_window_whose_list_or_hash_was_lost_starts_afresh(redis_server, lost):
    """A deployment's residual list deleted under its hash (eviction, DEL), or the hash under its
    list: the window reads empty and goes on as a fresh one fed only the later labels."""
    import redis

    controller = ComplianceController(ComplianceSettings(), redis_url=redis_server.url)
    fresh = ComplianceController(ComplianceSettings())
    for _ in range(30):
        controller.record_residual("breaker:d1", -0.5, 50)
    h, lst = controller.redis._residual_keys("breaker:d1")
    redis.Redis.from_url(redis_server.url).delete(lst if lost == "list" else h)
    assert controller.residual_stats(["breaker:d1"]) == {"breaker:d1": (0, 0.0, 0.0)}
    for r in [0.25, -0.125, 0.5]:
        controller.record_residual("breaker:d1", r, 50)
        fresh.record_residual("breaker:d1", r, 50)
    n, total, total_sq = controller.residual_stats(["breaker:d1"])["breaker:d1"]
    n_fresh, total_fresh, sq_fresh = fresh.residual_stats(["breaker:d1"])["breaker:d1"]
    assert controller.shared and n == n_fresh == 3
    assert total == pytest.approx(total_fresh) and total_sq == pytest.approx(sq_fresh)


def test_redis_windows_match_the_local_ones_and_every_worker_sees_them(redis_server):
    local = ComplianceController(ComplianceSettings())
    a = ComplianceController(ComplianceSettings(), redis_url=redis_server.url)
    b = ComplianceController(ComplianceSettings(), redis_url=redis_server.url)
    residuals = [-0.5, 0.5, -0.25, 0.25, -0.125] * 16  # 80 labels into a window of 50, mean about 0
    for r in residuals:
        local.record_residual("breaker:d1", r, 50)
        a.record_residual("breaker:d1", r, 50)
    n, total, total_sq = b.residual_stats(["breaker:d1", "d2"])["breaker:d1"]
    n_local, total_local, sq_local = local.residual_stats(["breaker:d1"])["breaker:d1"]
    assert n == n_local == 50 and total == pytest.approx(total_local) and total_sq == pytest.approx(sq_local)
    assert b.residual_stats(["d2"]) == {"d2": (0, 0.0, 0.0)}
    assert QualityBreaker(ON, b).open_ids(["d1"]) == set()
    for _ in range(50):
        a.record_residual("breaker:d1", -0.4, 50)
    assert QualityBreaker(ON, b).open_ids(["d1"]) == {"d1"}  # b never recorded a label itself


def test_redis_down_keeps_the_breaker_on_local_windows(redis_server, caplog):
    controller = ComplianceController(ComplianceSettings(), redis_url=redis_server.url)
    breaker = QualityBreaker(ON, controller)
    redis_server.stop()
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.compliance"):
        feed(breaker, "d1", [-0.6] * 20)  # no raise: local state
        assert breaker.open_ids(["d1"]) == {"d1"}
    assert "Redis failed" in caplog.text


def test_settings_name_the_bad_field():
    with pytest.raises(ValidationError, match="threshold"):
        ComplianceSettings(breaker={"enabled": True, "threshold": 0})
    with pytest.raises(ValidationError, match="extra"):
        ComplianceSettings(breaker={"enabld": True})
    with pytest.raises(ValidationError, match=r"min_labels \(600\) must be at most label_window \(500\)"):
        ComplianceSettings(breaker={"enabled": True, "min_labels": 600})
