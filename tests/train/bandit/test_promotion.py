"""The promote / don't-promote rule and the overlap warning (pure functions; the command runs in
test_train_from_log)."""

from __future__ import annotations

import pytest

from proteus_train.evaluation.promotion import EXIT_DO_NOT_PROMOTE, EXIT_PROMOTE, exit_code, overlap_warning, render, verdict


def tier(dr, cost, tau=0.8, matched=50, unsupported=0.0, n=100):
    return {"dr": dr, "ci95": [dr - 0.05, dr + 0.05], "tau": tau, "cost_usd": cost, "n_matched": matched,
            "unsupported_share": unsupported, "n_rows": n, "n_requests": 10 * n}


def test_cheaper_and_above_the_floor_is_promoted():
    promote, reasons = verdict({"a": tier(0.82, 1.0)}, {"a": tier(0.85, 2.0)})
    assert promote and "cost -50.0%" in reasons[0]


def test_below_the_floor_is_not_promoted_and_names_the_tier():
    promote, reasons = verdict({"a": tier(0.82, 1.0), "b": tier(0.75, 1.0)}, {"a": tier(0.85, 2.0), "b": tier(0.9, 2.0)})
    assert not promote and reasons == ["state 'b': estimated accuracy 0.7500 (95% CI 0.7000-0.8000) < 0.8000 (tau 0.8, old 0.9000)"]


def test_below_the_floor_where_the_baseline_also_misses_it_only_needs_the_baselines_accuracy():
    assert verdict({"a": tier(0.76, 1.0)}, {"a": tier(0.75, 1.0)})[0]


def test_unsupported_estimates_are_never_promoted():
    promote, reasons = verdict({"a": tier(0.95, 0.1, matched=3)}, {"a": tier(0.85, 2.0)})
    assert not promote and "cannot estimate" in reasons[0] and "3 of 100 labelled rows" in reasons[0]
    assert not verdict({"a": tier(0.95, 0.1, matched=40)}, {"a": tier(0.85, 2.0)})[0]  # 40 rows, but < half
    assert not verdict({"a": tier(0.95, 0.1, unsupported=0.2)}, {"a": tier(0.85, 2.0)})[0]


def test_dearer_is_promoted_only_when_it_keeps_a_floor_the_baseline_misses():
    promote, reasons = verdict({"a": tier(0.9, 3.0)}, {"a": tier(0.85, 2.0)})  # more accurate, but above a kept floor
    assert not promote and reasons == ["costs +50.0% more than the baseline and keeps no floor the baseline misses"]
    assert verdict({"a": tier(0.82, 3.0)}, {"a": tier(0.78, 2.0)})[0]


def test_overlap_warning_when_the_periods_intersect():
    trained = {"provenance": {"first_decision_utc": "2026-01-01T00:00:00Z", "last_decision_utc": "2026-01-10T00:00:00Z"}}
    later = {"first_decision_utc": "2026-01-11T00:00:00Z", "last_decision_utc": "2026-01-12T00:00:00Z"}
    inside = {"first_decision_utc": "2026-01-05T00:00:00Z", "last_decision_utc": "2026-01-12T00:00:00Z"}
    assert overlap_warning(trained, later) is None and overlap_warning({}, later) is None
    assert "overlaps" in overlap_warning(trained, inside)


def test_the_report_says_which_rows_the_estimates_use():
    report = {"artifact": "new", "baseline_artifact": "old", "log": "LOG", "promote": True, "reasons": ["ok"],
              "log_provenance": {"n_decisions": 300, "n_labelled": 20, "n_shadow_rows": 35},
              "states": {"tier:economy@0.79": {"new": tier(0.8, 1.0, n=25), "baseline": tier(0.8, 1.0, n=25)},
                         "tier:premium@0.85": {"new": tier(0.9, 1.0, n=30), "baseline": tier(0.9, 1.0, n=30)}}}
    text = render(report)
    assert ("Decision log LOG: 300 decisions, 20 of them with feedback, and 35 shadow rows. The accuracy estimates use "
            "the 20 decisions with feedback and the 35 shadow rows (55 rows), each in the compliance state it was served "
            "in; the 280 decisions without feedback are not used there. Observed: ") in text
    assert "| tier:premium@0.85 | 0.8 | 300 | 0.9000 (0.8500-0.9500) |  | 0.9000 (0.8500-0.9500) | 1.000000 | 1.000000 | 30 | 50 |" in text
    assert "the tiers' rows are both" not in text
    report["log_provenance"] = {"n_decisions": 300, "n_labelled": 55}
    assert "55 of them with feedback, no shadow rows. The accuracy estimates use the 55 decisions with feedback (55 rows)" in render(report)


def test_the_exit_code_is_the_verdict():
    assert exit_code({"promote": True}) == EXIT_PROMOTE == 0
    assert exit_code({"promote": False}) == EXIT_DO_NOT_PROMOTE == 3


def test_the_command_exits_3_when_it_does_not_promote(monkeypatch, tmp_path, capsys):
    from litellm_proteus.cli import main
    from proteus_train.evaluation import promotion

    report = {"artifact": "new", "baseline_artifact": "old", "log": "LOG", "promote": False,
              "reasons": ["tier 'a': below the floor"], "log_provenance": {"n_decisions": 10, "n_labelled": 5},
              "states": {"a": {"new": tier(0.7, 1.0, n=5), "baseline": tier(0.9, 1.0, n=5)}}}
    monkeypatch.setattr(promotion, "promotion_report", lambda *args: report)
    argv = ["eval", "--artifact", "new", "--log", str(tmp_path), "--out", str(tmp_path / "promo")]
    assert main(argv) == 3 and "**Verdict: do not promote**" in capsys.readouterr().out
    report["promote"] = True
    assert main(argv) == 0


def test_total_cost_weighs_each_state_by_its_requests_not_its_labelled_rows():
    # a saves $1 on each of 1,000 requests (20 labelled); b costs $1 more on each of its 100 (all labelled)
    new = {"a": {**tier(0.82, 1.0, n=20, matched=20), "n_requests": 1000}, "b": {**tier(0.82, 3.0), "n_requests": 100}}
    old = {"a": {**tier(0.85, 2.0, n=20, matched=20), "n_requests": 1000}, "b": {**tier(0.85, 2.0), "n_requests": 100}}
    promote, reasons = verdict(new, old)
    assert promote and reasons == ["every state keeps its floor (or the baseline's accuracy); cost -40.9% vs the baseline"]


def test_a_new_head_that_flatters_choices_the_log_never_observed_is_not_promoted():
    """DR rests on the new artifact's own head wherever it leaves the logged choice: a head that rates
    a cheap model 0.95 (its real accuracy 0.5) must not carry the verdict.  The judged accuracy is
    capped by what the log observed of the new choices."""
    import numpy as np

    from proteus_train.evaluation.promotion import judged_accuracy, observed_accuracy
    from proteus_train.off_policy import BanditRows

    rng = np.random.default_rng(1)
    n = 400  # slot 0: the dear logged choice (accuracy 0.9); slot 1: cheap, explored on 2 % (accuracy 0.5)
    y0, y1 = (rng.random(n) < 0.9).astype(float), (rng.random(n) < 0.5).astype(float)
    explored = rng.random(n) < 0.02
    logged = np.where(explored, 1, 0)
    scores = np.full((n, 2), np.nan)
    scores[np.arange(n), logged] = np.where(logged == 0, y0, y1)
    rows = BanditRows(scores, logged, np.where(explored, 0.01, 0.99), groups=np.arange(n))
    moved = np.where(np.arange(n) < int(n * 0.56), 0, 1)  # 44 % of the traffic to the cheap model
    flattering = np.column_stack([np.full(n, 0.9), np.full(n, 0.95)])

    def side(choice, q, cost):
        return {**rows.estimate(choice, q).to_dict(), "observed": observed_accuracy(rows, choice), "tau": 0.85,
                "n_requests": n, "cost_usd": cost}

    new, old = side(moved, flattering, 0.5), side(np.zeros(n, dtype=int), flattering, 1.0)
    assert new["dr"] > 0.9 and new["n_matched"] >= n / 2  # supported, and DR alone would promote it
    assert judged_accuracy(new) < 0.6 and judged_accuracy(old) == pytest.approx(old["dr"], abs=0.02)
    promote, reasons = verdict({"tier:x@0.85": new}, {"tier:x@0.85": old})
    assert not promote and "on what the log observed of its choices" in reasons[0]


def test_each_request_promises_its_tau_once_even_when_its_call_id_was_reused():
    """A reused call id: its latest request is also keyed for its shadow rows; the state's promised
    tau is the mean over requests, the latest not counted twice."""
    from proteus_train.evaluation.promotion import promised_taus

    calls = {"c1": ("tau:0.8", 0.80), "c1#2": ("tau:0.8", 0.89), "shadow:c1": ("tau:0.8", 0.89), "c2": ("tau:0.8", 0.83)}
    assert sorted(promised_taus(calls)["tau:0.8"]) == [0.80, 0.83, 0.89]
