"""The acceptance comparison at equal measured accuracy (pure functions; the routing is route_log's)."""

from __future__ import annotations

import numpy as np
import pytest

from proteus_train.acceptance import cheapest_reaching, equal_accuracy


def test_each_target_takes_the_cheapest_point_that_reaches_it_whatever_tau_asked_for_it():
    new = [{"accuracy": 0.80, "cost_usd": 2.0}, {"accuracy": 0.82, "cost_usd": 1.5}, {"accuracy": 0.85, "cost_usd": 4.0}]
    ref = [{"accuracy": 0.79, "cost_usd": 0.5}, {"accuracy": 0.81, "cost_usd": 1.0}, {"accuracy": 0.84, "cost_usd": 2.0}]
    assert cheapest_reaching(new, 0.80) == 1.5  # a more accurate point that costs less wins
    assert cheapest_reaching(ref, 0.90) is None
    rows = equal_accuracy(new, ref, np.array([0.80, 0.85, 0.86]))
    assert [r["cost_ratio"] for r in rows] == [1.5, None, None]
    assert rows[1] == {"accuracy": 0.85, "new_cost_usd": 4.0, "reference_cost_usd": None, "cost_ratio": None}


def test_a_tau_step_that_leaves_no_grid_is_an_error_naming_the_flag_before_any_work(capsys, monkeypatch):
    import proteus_train.acceptance as acceptance

    monkeypatch.setattr(acceptance, "load_artifact", lambda *_: pytest.fail("loaded an artifact before checking --tau-step"))
    for step in ("0", "-0.01", "1e-9", "nan"):
        with pytest.raises(SystemExit) as exit_:
            acceptance.main(["--data", "d.csv", "--artifact", "a", "--reference", "r", "--tau-step", step])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"error: --tau-step must be a number in [0.0001, 1] (the spacing of the tau grid); got {float(step)}" in err
