"""``proteus compliance --log DIR``: per-tier figures from a decision log, and the figure file."""

from __future__ import annotations

import json

import pytest

from litellm_proteus.cli import main as proteus_cli
from litellm_proteus.config import DecisionLogSettings
from litellm_proteus.decision_log import (DecisionLogWriter, LoggedCandidate, decision_record, feedback_record, iter_records,
                                          outcome_record)
from proteus_train.compliance_report import wilson_interval


def test_wilson_interval_matches_the_textbook_values():
    assert wilson_interval(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert wilson_interval(0, 5) == pytest.approx((0.0, 0.4345), abs=1e-4)


def write_log(directory) -> None:
    writer = DecisionLogWriter(DecisionLogSettings(dir=str(directory)))
    for i in range(8):
        tier, delta = ("premium", 0.01 * i) if i % 2 == 0 else ("economy", 0.0)
        call_id = f"c{i}"
        writer.submit(decision_record(
            call_id=call_id, key_hash=None, tier=tier, tau_source="key_metadata", state_key=f"tier:{tier}",
            tau=0.85, tau_requested=None, tau_effective=0.85 + delta, delta=delta, mu=0.5, model_group="g",
            candidates=[LoggedCandidate("a", 0, "cheap", 0.001, 0.7),
                        LoggedCandidate("b", 1, "strong", 0.01, 0.9 - 0.01 * i, -0.01 * i)],  # corrected down over time
            chosen=1 if tier == "premium" else 0, propensity=1.0, prompt=f"q{i}", artifact="", log_prompt=False,
            ts=100.0 + i,
        ))
        # premium: LiteLLM's response_cost 0.02; economy: no outcome, so the routing estimate 0.001
        if tier == "premium":
            writer.submit(outcome_record(call_id=call_id, deployment_id="b", success=True, response_cost=0.02, latency_ms=5.0, error=None, ts=101.0 + i))
    for call_id, score in (("c0", 1.0), ("c2", 0.0), ("c4", 1.0)):
        writer.submit(feedback_record(call_id, score, "api", ts=200.0))
    assert writer.flush()
    writer.close()


def test_the_report_per_tier_with_the_figure_and_json(tmp_path, capsys):
    write_log(tmp_path / "log")
    argv = ["compliance", "--log", str(tmp_path / "log"), "--png", str(tmp_path / "c.png"), "--json", str(tmp_path / "c.json"), "--window", "2"]
    assert proteus_cli(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["state", "requests", "failed", "tau"]
    written = json.loads((tmp_path / "c.json").read_text())
    report = {t["tier"]: t for t in written["states"]}
    premium, economy = report["premium"], report["economy"]
    assert premium["requests"] == 4 and premium["tau"] == pytest.approx(0.85)
    assert premium["predicted_accuracy"] == pytest.approx(0.9 - 0.03) and economy["predicted_accuracy"] == pytest.approx(0.7)
    assert premium["labels"] == 3 and premium["realised_accuracy"] == pytest.approx(2 / 3)
    assert premium["realised_ci95"] == pytest.approx(list(wilson_interval(2, 3)))
    assert economy["labels"] == 0 and economy["realised_accuracy"] is None
    assert premium["cost_per_1k_usd"] == pytest.approx(20.0) and economy["cost_per_1k_usd"] == pytest.approx(1.0)
    assert premium["delta_over_time"] == pytest.approx([0.0, 0.02, 0.04, 0.06])
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # per deployment: b served premium (c0, c2, c4, c6; labels 1, 0, 1), judged against its p before correction
    deployments = {d["deployment_id"]: d for d in written["deployments"]}
    strong, cheap = deployments["b"], deployments["a"]
    assert strong["model"] == "strong" and strong["picks"] == 4 and strong["failed"] == 0 and strong["labels"] == 3
    assert strong["predicted_accuracy"] == pytest.approx(0.9) and strong["realised_accuracy"] == pytest.approx(2 / 3)
    assert strong["residual"] == pytest.approx(2 / 3 - 0.9) and strong["p_correction"] == pytest.approx(-0.06)
    assert cheap["picks"] == 4 and cheap["labels"] == 0 and cheap["residual"] is None
    assert premium["failed"] == economy["failed"] == 0
    assert "deployment" in out and "-0.233" in out and "-0.060" in out


def test_a_score_for_a_call_whose_pick_failed_is_no_label_of_the_pick(tmp_path, capsys):
    """Its answer came from a fallback group: neither the tier nor the deployment is judged by it."""
    writer = DecisionLogWriter(DecisionLogSettings(dir=str(tmp_path / "log")))
    for i, success in enumerate((True, False)):
        writer.submit(decision_record(
            call_id=f"c{i}", key_hash=None, tier="premium", tau_source="default", state_key="tier:premium", tau=0.85,
            tau_requested=None, tau_effective=0.85, delta=0.0, mu=0.5, model_group="g",
            candidates=[LoggedCandidate("b", 1, "strong", 0.01, 0.9)], chosen=0, propensity=1.0, prompt=f"q{i}",
            artifact="", log_prompt=False, ts=100.0 + i))
        writer.submit(outcome_record(call_id=f"c{i}", deployment_id="b", success=success, response_cost=None,
                                     latency_ms=None, error=None if success else "boom", ts=100.5 + i))
        writer.submit(feedback_record(f"c{i}", 1.0 if success else 0.0, "api", ts=200.0))
    assert writer.flush()
    writer.close()
    argv = ["compliance", "--log", str(tmp_path / "log"), "--json", str(tmp_path / "c.json"), "--png", str(tmp_path / "c.png")]
    assert proteus_cli(argv) == 0
    written = json.loads((tmp_path / "c.json").read_text())
    [premium], [strong] = written["states"], written["deployments"]
    assert (premium["requests"], premium["labels"], premium["realised_accuracy"]) == (2, 1, 1.0)
    assert (strong["labels"], strong["residual"]) == (1, pytest.approx(0.1))


def test_every_attempt_of_a_retried_call_counts_for_its_deployment_and_a_failed_call_costs_what_it_was_billed(tmp_path):
    """c0: gpt-4 failed, then mixtral answered; c1: mixtral failed twice (a group of one retried it),
    then a fallback group answered; c2: gpt-4 answered.  Failed picks carry no response cost."""
    writer = DecisionLogWriter(DecisionLogSettings(dir=str(tmp_path / "log")))
    candidates = [LoggedCandidate("gpt4", 0, "gpt-4", 0.03, 0.9), LoggedCandidate("mixtral", 1, "mixtral", 0.002, 0.8)]
    attempts = [("c0", 0, False, None), ("c0", 1, True, 0.0025), ("c1", 1, False, None), ("c1", 1, False, None),
                ("c2", 0, True, 0.031)]
    for i, (call_id, chosen, success, cost) in enumerate(attempts):
        writer.submit(decision_record(
            call_id=call_id, key_hash=None, tier="premium", tau_source="default", state_key="tier:premium@0.85", tau=0.85,
            tau_requested=None, tau_effective=0.85, delta=0.0, mu=0.5, model_group="g", candidates=candidates,
            chosen=chosen, propensity=1.0, prompt=call_id, artifact="", log_prompt=False, ts=100.0 + i))
        writer.submit(outcome_record(call_id=call_id, deployment_id=candidates[chosen].deployment_id, success=success,
                                     response_cost=cost, latency_ms=None, error=None if success else "boom", ts=100.5 + i))
    assert writer.flush()
    writer.close()
    argv = ["compliance", "--log", str(tmp_path / "log"), "--json", str(tmp_path / "c.json"), "--png", str(tmp_path / "c.png")]
    assert proteus_cli(argv) == 0
    written = json.loads((tmp_path / "c.json").read_text())
    [premium] = written["states"]
    assert (premium["requests"], premium["failed"]) == (3, 1)
    assert premium["cost_per_1k_usd"] == pytest.approx(1000 * (0.0025 + 0.0 + 0.031) / 3)  # not c1's estimate 0.002
    deployments = {d["deployment_id"]: (d["picks"], d["failed"]) for d in written["deployments"]}
    assert deployments == {"mixtral": (3, 2), "gpt4": (2, 1)}


def test_deployment_ids_and_models_are_printed_whole():
    from proteus_train.compliance_report import DeploymentFeedback, format_deployments

    long_id, long_model = "sim-zero-one-ai/Yi-34B-Chat-eu-west-1", "zero-one-ai/Yi-34B-Chat-with-a-long-name"
    fields = {f: 0 for f in DeploymentFeedback.__dataclass_fields__}
    row = DeploymentFeedback(**{**fields, "deployment_id": long_id, "model": long_model, "realised_ci95": (0.0, 0.0)})
    table = format_deployments([row])
    assert long_id in table and long_model in table


def test_the_figure_named_without_a_suffix_is_reported_as_the_file_written(tmp_path, capsys):
    write_log(tmp_path / "log")
    assert proteus_cli(["compliance", "--log", str(tmp_path / "log"), "--png", str(tmp_path / "report")]) == 0
    assert f"figure: {tmp_path / 'report.png'}" in capsys.readouterr().out
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

def test_an_empty_or_missing_log_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert proteus_cli(["compliance", "--log", str(tmp_path / "empty")]) == 2
    assert "no decision records" in capsys.readouterr().err
    assert proteus_cli(["compliance", "--log", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    write_log(tmp_path / "log")
    [file] = (tmp_path / "log").glob("decisions-*.jsonl")
    assert proteus_cli(["compliance", "--log", str(file)]) == 2
    assert f"is a file; pass the decision log directory that holds it ({tmp_path / 'log'})" in capsys.readouterr().err


def test_shadow_rows_and_judge_feedback_beside_the_decisions(tmp_path, capsys):
    from litellm_proteus.shadow_rows import shadow_row

    write_log(tmp_path / "log")
    row = shadow_row(call_id="c6", prompt="q6", tier="premium", tau=0.85, models=["cheap", "strong"],
                     scores={"cheap": 0.0, "strong": 1.0}, costs={"cheap": 0.001, "strong": 0.01}, served="strong", call_share=1.0, ts=300.0)
    (tmp_path / "log" / "shadow-20260101T000000-1-0.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "log" / "decisions-20260101T000001-1-judge.jsonl").write_text(
        json.dumps(feedback_record("c6", 1.0, "judge", ts=300.0)) + "\n")
    assert proteus_cli(["compliance", "--log", str(tmp_path / "log"), "--json", str(tmp_path / "c.json"),
                        "--png", str(tmp_path / "c.png")]) == 0
    report = {t["tier"]: t for t in json.loads((tmp_path / "c.json").read_text())["states"]}
    assert report["premium"]["requests"] == 4 and report["premium"]["labels"] == 4  # the judge's label counts, the shadow row is not a request


def test_requests_that_sent_their_own_tau_are_a_row_of_their_own_beside_their_tier(tmp_path):
    """Three requests of a standard key (tier tau 0.82), three that asked for 0.1 and three for 0.95
    or 1.0 (each served in the state of its tau clamped into the artifact's range, 0.7821-0.8521):
    three rows, each at the one tau its state answers for, as the controller and the gauges keep them."""
    writer = DecisionLogWriter(DecisionLogSettings(dir=str(tmp_path / "log")))
    own = {1: (0.1, 0.7821, "tau:0.7825"), 4: (0.1, 0.7821, "tau:0.7825"), 7: (0.1, 0.7821, "tau:0.7825"),
           2: (0.95, 0.8521, "tau:0.85"), 5: (1.0, 0.8521, "tau:0.85"), 8: (0.95, 0.8521, "tau:0.85")}
    for i in range(9):
        asked, served, state = own.get(i, (None, 0.82, "tier:standard@0.82"))
        writer.submit(decision_record(
            call_id=f"c{i}", key_hash=None, tier="standard", tau_source="request" if asked else "redis",
            state_key=state, tau=asked or 0.82, tau_requested=asked, tau_served=served, tau_effective=served,
            delta=0.0, mu=0.5, model_group="g", candidates=[LoggedCandidate("b", 0, "strong", 0.01, 0.9)], chosen=0,
            propensity=1.0, prompt=f"q{i}", artifact="", log_prompt=False, ts=100.0 + i))
    assert writer.flush()
    writer.close()
    assert [("tau_served" in r) for r in iter_records(tmp_path / "log")] == [False, True, True] * 3  # where clamping moved it
    argv = ["compliance", "--log", str(tmp_path / "log"), "--json", str(tmp_path / "c.json"), "--png", str(tmp_path / "c.png")]
    assert proteus_cli(argv) == 0
    states = {t["state_key"]: (t["tier"], t["requests"], t["tau"]) for t in json.loads((tmp_path / "c.json").read_text())["states"]}
    assert states == {"tier:standard@0.82": ("standard", 3, pytest.approx(0.82)),
                      "tau:0.7825": ("standard", 3, pytest.approx(0.7821)), "tau:0.85": ("standard", 3, pytest.approx(0.8521))}


def test_an_output_path_that_cannot_be_written_is_refused_before_any_output(tmp_path, capsys):
    write_log(tmp_path / "log")
    png = tmp_path / "c.png"
    for flag, path, why in (("--json", tmp_path, "is a folder"), ("--json", tmp_path / "no" / "c.json", "does not exist"),
                            ("--png", tmp_path, "is a folder")):
        other = ["--png", str(png)] if flag == "--json" else []
        assert proteus_cli(["compliance", "--log", str(tmp_path / "log"), *other, flag, str(path)]) == 2
        err = capsys.readouterr().err
        assert f"error: {flag} {path}: " in err and why in err
        assert not png.exists()  # nothing written before the refusal


def write_records(directory, records) -> None:
    directory.mkdir()
    (directory / "decisions-20260101T000000-1-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def decision(call_id, cost=0.01, **fields):
    record = decision_record(
        call_id=call_id, key_hash=None, tier="premium", tau_source="default", state_key="tier:premium", tau=0.85,
        tau_requested=None, tau_effective=0.85, delta=0.0, mu=0.5, model_group="g",
        candidates=[LoggedCandidate("b", 0, "strong", cost, 0.9)], chosen=0, propensity=1.0, prompt=call_id,
        artifact="", log_prompt=False, ts=100.0)
    return {**record, **fields}


def test_an_unknown_cost_is_left_out_of_the_cost_and_a_numeric_text_score_counts_as_the_trainer_reads_it(tmp_path):
    write_records(tmp_path / "log", [decision("c0", cost=None), decision("c1", cost=0.01),
                                     {**feedback_record("c0", 1.0, "api", ts=200.0), "score": "0.5"}])
    argv = ["compliance", "--log", str(tmp_path / "log"), "--json", str(tmp_path / "c.json"), "--png", str(tmp_path / "c.png")]
    assert proteus_cli(argv) == 0
    [premium] = json.loads((tmp_path / "c.json").read_text())["states"]
    assert premium["cost_per_1k_usd"] == pytest.approx(10.0)  # c1's alone: c0's cost is unknown, not 0
    assert (premium["labels"], premium["realised_accuracy"]) == (1, pytest.approx(0.5))


def test_a_state_whose_costs_are_all_unknown_shows_no_cost(tmp_path, capsys):
    write_records(tmp_path / "log", [decision("c0", cost=None)])
    argv = ["compliance", "--log", str(tmp_path / "log"), "--json", str(tmp_path / "c.json"), "--png", str(tmp_path / "c.png")]
    assert proteus_cli(argv) == 0
    assert json.loads((tmp_path / "c.json").read_text())["states"][0]["cost_per_1k_usd"] is None
    assert capsys.readouterr().out.splitlines()[1].split()[7] == "-"


def _without(record, *fields):
    return {k: v for k, v in record.items() if k not in fields}


@pytest.mark.parametrize("bad, line, message", [
    (_without(decision("c1"), "tier", "state_key"), 2,
     "call_id 'c1': fields 'state_key' and 'tier' are both missing or empty; a decision needs one of them"),
    (_without(decision("c1"), "candidates"), 2,
     "call_id 'c1': field 'candidates' must be a non-empty list of {deployment_id, model, cost_usd, p}; got nothing"),
    (decision("c1", chosen=5), 2, "call_id 'c1': field 'chosen' must be an index into candidates (0..0); got 5"),
    (decision("c1", cost=10**400), 2,
     "call_id 'c1': field 'candidates[0].cost_usd' must be a number >= 0 (USD per call) or null for unknown; got 1000"),
    (decision("c1", delta="x"), 2, "call_id 'c1': field 'delta' must be a finite number (the controller's offset) or null; got 'x'"),
    ({**feedback_record("c0", 1.0, "api", ts=200.0), "score": 10**400}, 2,
     "call_id 'c0': field 'score' must be a number in [0, 1]; got 1000"),
    ({**feedback_record("c0", 1.0, "api", ts=200.0), "score": True}, 2, "call_id 'c0': field 'score' must be a number in [0, 1]; got True"),
])
def test_a_record_the_report_cannot_read_is_an_error_naming_its_line_and_field(tmp_path, capsys, bad, line, message):
    write_records(tmp_path / "log", [decision("c0"), bad])
    argv = ["compliance", "--log", str(tmp_path / "log"), "--json", str(tmp_path / "c.json"), "--png", str(tmp_path / "c.png")]
    assert proteus_cli(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {tmp_path / 'log' / 'decisions-20260101T000000-1-0.jsonl'}:{line}: {message}" in err
    assert "Traceback" not in err and not (tmp_path / "c.png").exists() and not (tmp_path / "c.json").exists()


def test_the_line_named_skips_blank_lines_as_the_reader_does(tmp_path, capsys):
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "decisions-20260101T000000-1-0.jsonl").write_text(
        json.dumps(decision("c0")) + "\n\n" + json.dumps(decision("c1", chosen=-1)) + "\n")
    assert proteus_cli(["compliance", "--log", str(tmp_path / "log"), "--png", str(tmp_path / "c.png")]) == 2
    assert "decisions-20260101T000000-1-0.jsonl:3: call_id 'c1': field 'chosen'" in capsys.readouterr().err


def test_a_figure_format_matplotlib_cannot_write_is_refused_before_any_work(tmp_path, capsys):
    write_log(tmp_path / "log")
    argv = ["compliance", "--log", str(tmp_path / "log"), "--png", str(tmp_path / "c.txt"), "--json", str(tmp_path / "c.json")]
    assert proteus_cli(argv) == 2
    captured = capsys.readouterr()
    assert f"error: --png {tmp_path / 'c.txt'}: matplotlib writes no 'txt' figures; end the name in one of " in captured.err
    assert "png" in captured.err.split("one of")[1] and captured.out == "" and not (tmp_path / "c.json").exists()
