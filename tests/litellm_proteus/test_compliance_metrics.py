"""Compliance gauges: this process's windows, or the compliance controller's snapshot when present."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from litellm_proteus import compliance_metrics as cm
from litellm_proteus.compliance import ComplianceSettings


def sample(name: str, state_key: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"state_key": state_key})


def test_local_windows_feed_the_gauges():
    key = "tier:test-local"
    for p in (0.8, 0.9):
        cm.record_decision(key, p)
    cm.record_feedback(key, 1.0)
    cm.record_feedback(key, 0.0)
    cm.record_feedback(key, 1.0)
    snapshot = cm.export(key)
    assert snapshot["n"] == 2 and snapshot["n_labels"] == 3
    assert abs(sample("proteus_predicted_accuracy", key) - 0.85) < 1e-12
    assert abs(sample("proteus_realised_accuracy", key) - 2 / 3) < 1e-12
    assert sample("proteus_realised_labels", key) == 3
    assert (sample("proteus_delta", key), sample("proteus_infeasible", key)) == (0.0, 0.0)
    for _ in range(cm.WINDOW + 5):  # the window keeps the last WINDOW decisions
        cm.record_decision(key, 0.5)
    assert cm.local_snapshot(key)["n"] == cm.WINDOW and cm.local_snapshot(key)["p_mean"] == 0.5


class SnapshotOnly:
    """The compliance controller's read side (``ComplianceController.snapshot``)."""

    def __init__(self, snapshot: dict, enabled: bool = True):
        self._snapshot = snapshot
        self.settings = ComplianceSettings(enabled=enabled)

    def snapshot(self, state_key: str) -> dict:
        return dict(self._snapshot)


def test_the_controllers_snapshot_wins_and_decisions_refresh_at_most_every_interval():
    key = "tier:test-controller"
    controller = SnapshotOnly({"n": 10, "p_mean": 0.91, "n_labels": 4, "realised_mean": 0.75, "delta": 0.03, "infeasible": True})
    assert cm.export(key, controller, every_s=60.0)["delta"] == 0.03
    assert (sample("proteus_predicted_accuracy", key), sample("proteus_realised_accuracy", key)) == (0.91, 0.75)
    assert (sample("proteus_delta", key), sample("proteus_infeasible", key), sample("proteus_realised_labels", key)) == (0.03, 1.0, 4.0)
    controller._snapshot["delta"] = 0.05
    assert cm.export(key, controller, every_s=60.0) is None  # within the interval: skipped
    assert sample("proteus_delta", key) == 0.03
    assert cm.export(key, controller)["delta"] == 0.05  # feedback refreshes at once
    assert sample("proteus_delta", key) == 0.05


def test_a_skipped_refresh_is_made_once_the_interval_is_over_without_another_decision():
    import threading

    key = "tier:test-trailing"
    controller = SnapshotOnly({"n": 10, "p_mean": 0.9, "n_labels": 0, "delta": 0.01, "infeasible": False})
    cm.export(key, controller, every_s=0.2)
    controller._snapshot.update(delta=0.06, infeasible=True)  # the burst's last decision moved the state
    assert cm.export(key, controller, every_s=0.2) is None and sample("proteus_delta", key) == 0.01
    done = threading.Event()
    for _ in range(100):  # the trailing refresh is due 0.2 s after the first export; wait up to 10 s
        if sample("proteus_delta", key) == 0.06:
            break
        done.wait(0.1)
    assert (sample("proteus_delta", key), sample("proteus_infeasible", key)) == (0.06, 1.0)
    assert key not in cm._trailing  # one timer per interval, gone once it ran


def test_a_disabled_controller_leaves_the_gauges_to_this_process_window():
    key = "tier:test-disabled"
    cm.record_decision(key, 0.8)
    disabled = SnapshotOnly({"n": 99, "p_mean": 0.1, "delta": 0.3}, enabled=False)
    snapshot = cm.export(key, disabled)
    assert snapshot["p_mean"] == pytest.approx(0.8) and snapshot.get("delta", 0.0) == 0.0
