"""``proteus judge`` against a mock judge model answering through respx (the rubric and its parse: tests/litellm_proteus/test_judge_rubric.py)."""

from __future__ import annotations

import argparse
import json

import httpx
import litellm
import pytest
import respx

from proteus_train.data import load_logs
from litellm_proteus.judge_rubric import RUBRIC
from proteus_train.judge import judge

BASE = "http://127.0.0.1:9/v1"


def body(text: str) -> dict:
    return {"id": "j", "object": "chat.completion", "created": 1, "model": "judge",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}


def write_log(directory, n=6):
    records = []
    for i in range(n):
        records.append({"schema": 1, "type": "decision", "call_id": f"c{i}", "ts": float(i), "tier": "standard",
                        "candidates": [{"deployment_id": "a", "slot": 0, "model": "big", "cost_usd": 0.01, "p": 0.9},
                                       {"deployment_id": "b", "slot": 1, "model": "small", "cost_usd": 0.001, "p": 0.6}],
                        "chosen": i % 2, "propensity": 1.0, "prompt": f"question {i}", "tau_effective": 0.8})
        records.append({"schema": 1, "type": "outcome", "call_id": f"c{i}", "ts": i + 0.5, "success": True,
                        "response": f"answer {i}"})
    records.append({"schema": 1, "type": "feedback", "call_id": "c5", "ts": 9.0, "score": 1.0, "source": "api"})
    (directory / "decisions-20260101T000000-1-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(autouse=True)
def judge_models_unpriced(monkeypatch):
    """LiteLLM keeps the prices a Router registered in earlier tests (a judge group of the shadow
    tests is ``openai/judge``): these tests price the judge models themselves."""
    monkeypatch.setattr(litellm, "model_cost", {k: v for k, v in litellm.model_cost.items() if "judge" not in k})


def args_for(log, **overrides):
    values = dict(log=str(log), judge_model="openai/judge", api_base=BASE, api_key_env="PROTEUS_TEST_JUDGE_KEY",
                  sample=1.0, budget_usd=None, seed=0, max_tokens=50)
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.fixture
def judge_upstream(monkeypatch):
    monkeypatch.setenv("PROTEUS_TEST_JUDGE_KEY", "sk-test")
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    replies = iter(["Correct.\nSCORE: 1", "Wrong.\nSCORE: 0", "no idea", "Half.\nSCORE: 0.5", "SCORE: 3"])
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(f"{BASE}/chat/completions").mock(side_effect=lambda request: httpx.Response(200, json=body(next(replies))))
        yield route


def test_judge_writes_feedback_for_parsed_scores_and_counts_the_rest(tmp_path, judge_upstream):
    write_log(tmp_path)
    summary = judge(args_for(tmp_path))
    assert summary["eligible"] == 5 and summary["sampled"] == 5  # c5 already has feedback
    assert (summary["scored"], summary["unscored"], summary["failed"]) == (3, 2, 0)
    assert judge_upstream.call_count == 5
    sent = json.loads(judge_upstream.calls[0].request.content)
    assert sent["model"] == "judge" and sent["messages"][0]["content"] == RUBRIC and "question 0" in sent["messages"][1]["content"]
    written = [json.loads(line) for line in open(summary["written"])]
    assert [(r["call_id"], r["score"], r["source"]) for r in written] == [("c0", 1.0, "judge"), ("c1", 0.0, "judge"), ("c3", 0.5, "judge")]
    log = load_logs(tmp_path)  # the trainer reads the judge's labels
    assert log.provenance["feedback_sources"] == {"api": 1, "judge": 3} and log.provenance["n_labelled"] == 4


def test_judge_labels_are_written_as_privately_as_the_log(tmp_path, judge_upstream, monkeypatch):
    import os
    import stat

    write_log(tmp_path)
    old = os.umask(0o022)
    try:
        summary = judge(args_for(tmp_path))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(summary["written"]).st_mode) == 0o600  # the proxy's own files' mode, not the umask's


def test_a_bare_proxy_group_name_is_sent_to_the_api_base(tmp_path, judge_upstream):
    write_log(tmp_path, n=1)
    summary = judge(args_for(tmp_path, judge_model="proteus-judge"))  # docs/learn-from-traffic.md's proxy form
    assert (summary["scored"], summary["failed"]) == (1, 0)
    assert json.loads(judge_upstream.calls[0].request.content)["model"] == "proteus-judge"


def test_sampling_is_by_call_id_and_budget_stops_the_run(tmp_path, monkeypatch):
    write_log(tmp_path, n=40)
    monkeypatch.setenv("PROTEUS_TEST_JUDGE_KEY", "sk-test")
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    monkeypatch.setattr(litellm, "completion_cost", lambda **kwargs: 0.01)
    with respx.mock() as mock:
        route = mock.post(f"{BASE}/chat/completions").mock(return_value=httpx.Response(200, json=body("ok\nSCORE: 1")))
        first = judge(args_for(tmp_path, sample=0.3, budget_usd=0.025))
    assert 3 <= first["sampled"] <= 25 and route.call_count == 3 and first["stopped_by_budget"]
    assert first["spent_usd"] == pytest.approx(0.03)


def test_bad_flags_are_named(tmp_path):
    from litellm_proteus.cli import main

    assert main(["judge", "--log", str(tmp_path), "--judge-model", "x", "--sample", "0"]) == 2
    assert main(["judge", "--log", str(tmp_path / "missing"), "--judge-model", "x"]) == 2


def write_shadow_row(directory, call_id="c0"):
    from litellm_proteus.shadow_rows import shadow_row

    row = shadow_row(call_id=call_id, prompt="question 0", tier="standard", tau=0.8, models=["big", "small"],
                     scores={"big": 1.0, "small": 0.0}, costs={"big": 0.01, "small": 0.001}, served="big", call_share=1.0, ts=1.0)
    (directory / "shadow-20260101T000000-1-0.jsonl").write_text(json.dumps(row) + "\n")


def test_shadow_rows_beside_the_decisions_are_left_alone(tmp_path, judge_upstream):
    write_log(tmp_path)
    write_shadow_row(tmp_path)
    summary = judge(args_for(tmp_path))
    assert summary["eligible"] == 5 and (summary["scored"], summary["unscored"]) == (3, 2)
    log = load_logs(tmp_path)  # the trainer still reads the shadow row, as a full-information row
    assert log.provenance["n_shadow_rows"] == 1 and log.provenance["feedback_sources"] == {"api": 1, "judge": 3}


def test_the_command_judges_a_log_with_shadow_rows(tmp_path, judge_upstream, capsys):
    from litellm_proteus.cli import main

    write_log(tmp_path)
    write_shadow_row(tmp_path)
    assert main(["judge", "--log", str(tmp_path), "--judge-model", "openai/judge", "--api-base", BASE,
                 "--api-key-env", "PROTEUS_TEST_JUDGE_KEY", "--sample", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["scored"] == 3


def test_a_log_without_responses_names_the_setting_and_exits_2(tmp_path, capsys):
    from litellm_proteus.cli import main

    write_log(tmp_path)
    path = tmp_path / "decisions-20260101T000000-1-0.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        r.pop("response", None)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match="decision_log.log_responses: true") as raised:
        judge(args_for(tmp_path))
    assert "log_prompts" not in str(raised.value)  # the prompts are there
    assert main(["judge", "--log", str(tmp_path), "--judge-model", "x"]) == 2
    assert "decision_log.log_responses: true" in capsys.readouterr().err


def test_a_log_without_prompts_or_responses_names_both_settings(tmp_path):
    write_log(tmp_path)
    path = tmp_path / "decisions-20260101T000000-1-0.jsonl"
    records = [{k: v for k, v in json.loads(line).items() if k not in ("prompt", "response")}
               for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match="log_responses: true and decision_log.log_prompts: true"):
        judge(args_for(tmp_path))


def test_a_fully_judged_log_is_not_an_error(tmp_path):
    write_log(tmp_path, n=1)
    (tmp_path / "decisions-20260101T000001-1-judge.jsonl").write_text(
        json.dumps({"schema": 1, "type": "feedback", "call_id": "c0", "ts": 5.0, "score": 1.0, "source": "judge"}) + "\n")
    summary = judge(args_for(tmp_path))
    assert (summary["eligible"], summary["scored"]) == (0, 0)


def test_the_budget_counts_the_cost_a_litellm_proxy_reports(tmp_path, monkeypatch):
    write_log(tmp_path, n=40)
    monkeypatch.setenv("PROTEUS_TEST_JUDGE_KEY", "sk-test")
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    with respx.mock() as mock:  # a proxy group: not in LiteLLM's cost map; the proxy reports each call's cost
        route = mock.post(f"{BASE}/chat/completions").mock(return_value=httpx.Response(
            200, json={**body("ok\nSCORE: 1"), "model": "proteus-judge"}, headers={"x-litellm-response-cost": "0.01"}))
        summary = judge(args_for(tmp_path, judge_model="proteus-judge", budget_usd=0.025))
    assert route.call_count == 3 and summary["stopped_by_budget"] and summary["spent_usd"] == pytest.approx(0.03)
    assert summary["unpriced_calls"] == 0 and not summary["stopped_unpriced"]


def test_a_budget_that_cannot_be_measured_stops_after_the_first_call(tmp_path, monkeypatch, capsys):
    from litellm_proteus.cli import main

    write_log(tmp_path, n=40)
    monkeypatch.setenv("PROTEUS_TEST_JUDGE_KEY", "sk-test")
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    with respx.mock() as mock:  # no cost header, and the group name is not in LiteLLM's cost map
        route = mock.post(f"{BASE}/chat/completions").mock(return_value=httpx.Response(
            200, json={**body("ok\nSCORE: 1"), "model": "proteus-judge"}))
        code = main(["judge", "--log", str(tmp_path), "--judge-model", "proteus-judge", "--api-base", BASE,
                     "--api-key-env", "PROTEUS_TEST_JUDGE_KEY", "--sample", "1", "--budget-usd", "2"])
    out = capsys.readouterr()
    summary = json.loads(out.out)
    assert code == 2 and route.call_count == 1
    assert summary["stopped_unpriced"] and summary["unpriced_calls"] == 1 and summary["scored"] == 1  # its label is kept
    assert "--budget-usd 2 cannot be enforced" in out.err


def test_without_a_budget_unpriced_calls_are_counted_and_the_run_goes_on(tmp_path, judge_upstream, capsys):
    write_log(tmp_path)
    summary = judge(args_for(tmp_path, judge_model="proteus-judge"))
    assert summary["unpriced_calls"] == 5 and summary["spent_usd"] == 0.0 and not summary["stopped_unpriced"]
    assert capsys.readouterr().err.count("is unknown") == 1  # warned once


def test_a_stream_its_client_left_mid_way_is_not_judged(tmp_path, judge_upstream):
    """Its logged response is the part sent before the client hung up: no answer to score."""
    write_log(tmp_path)
    path = tmp_path / "decisions-20260101T000000-1-0.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        if record["type"] == "outcome" and record["call_id"] == "c0":
            record.update(schema=2, deployment_id="a", client_disconnected=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = judge(args_for(tmp_path))
    assert summary["eligible"] == 4  # c5 already has feedback, c0 is a part
    judged = [json.loads(line)["call_id"] for f in tmp_path.glob("*-judge.jsonl") for line in f.read_text().splitlines()]
    assert "c0" not in judged and judged


def test_a_reused_call_id_is_judged_once_for_its_latest_request(tmp_path):
    """A score sent now labels the call's latest request: only that request's prompt and answer are judged."""
    from proteus_train.judge import eligible_calls

    write_log(tmp_path, n=2)
    path = tmp_path / "decisions-20260101T000000-1-0.jsonl"
    again = [{"schema": 1, "type": "decision", "call_id": "c0", "ts": 7.0, "tier": "standard",
              "candidates": [{"deployment_id": "a", "slot": 0, "model": "big", "cost_usd": 0.01, "p": 0.9}],
              "chosen": 0, "propensity": 1.0, "prompt": "another question", "tau_effective": 0.8},
             {"schema": 1, "type": "outcome", "call_id": "c0", "ts": 7.5, "success": True, "response": "another answer"}]
    path.write_text(path.read_text() + "".join(json.dumps(r) + "\n" for r in again))
    with pytest.warns(UserWarning, match="reused"):
        calls = eligible_calls(tmp_path)
    assert sorted(calls) == [("c0", "another question", "another answer"), ("c1", "question 1", "answer 1")]


def test_an_unscored_call_is_judged_again_on_a_later_run_and_the_run_says_so(tmp_path, monkeypatch, capsys):
    """The log has no record for an unscored answer (a feedback record holds a score): a rerun asks
    the judge again for that call only, and each run warns that unscored calls will be re-bought."""
    from litellm_proteus.cli import main

    monkeypatch.setenv("PROTEUS_TEST_JUDGE_KEY", "sk-test")
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    write_log(tmp_path)
    judged: list[str] = []

    def answer(request):
        question = json.loads(request.content)["messages"][1]["content"]
        judged.append(next(f"c{i}" for i in range(6) if f"question {i}" in question))
        return httpx.Response(200, json=body("cut off before the verdict" if judged[-1] == "c2" else "SCORE: 1"))

    command = ["judge", "--log", str(tmp_path), "--judge-model", "openai/judge", "--api-base", BASE,
               "--api-key-env", "PROTEUS_TEST_JUDGE_KEY", "--sample", "1", "--max-tokens", "50"]
    with respx.mock() as mock:
        mock.post(f"{BASE}/chat/completions").mock(side_effect=answer)
        assert main(command) == 0
        first = capsys.readouterr()
        assert sorted(judged) == ["c0", "c1", "c2", "c3", "c4"]
        assert (json.loads(first.out)["scored"], json.loads(first.out)["unscored"]) == (4, 1)
        assert "warning: 1 judge answer(s) had no parsable SCORE line" in first.err and "--max-tokens 50" in first.err
        assert "judges them again and pays for them again" in first.err
        judged.clear()
        assert main(command) == 0
        second = capsys.readouterr()
    assert judged == ["c2"] and json.loads(second.out)["eligible"] == 1  # only the unscored call is bought again
    assert "warning: 1 judge answer(s) had no parsable SCORE line" in second.err


def test_a_reply_without_choices_is_unscored_and_the_paid_labels_are_kept(tmp_path, monkeypatch):
    """HTTP 200 with no choice (e.g. a content filter): counted as unscored, the run goes on and the
    labels already paid for are written."""
    monkeypatch.setenv("PROTEUS_TEST_JUDGE_KEY", "sk-test")
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    write_log(tmp_path)
    filtered = {**body("x"), "choices": []}
    replies = iter([body("Correct.\nSCORE: 1"), body("Wrong.\nSCORE: 0"), filtered, body("SCORE: 0.5"), body("SCORE: 1")])
    with respx.mock() as mock:
        route = mock.post(f"{BASE}/chat/completions").mock(side_effect=lambda request: httpx.Response(200, json=next(replies)))
        summary = judge(args_for(tmp_path))
    assert route.call_count == 5 and (summary["scored"], summary["unscored"], summary["failed"]) == (4, 1, 0)
    written = [json.loads(line) for line in open(summary["written"])]
    assert [(r["call_id"], r["score"]) for r in written] == [("c0", 1.0), ("c1", 0.0), ("c3", 0.5), ("c4", 1.0)]


@pytest.mark.parametrize("flag, value", [("budget_usd", float("nan")), ("budget_usd", float("inf")), ("budget_usd", 0.0),
                                         ("max_tokens", 0)])
def test_a_budget_or_max_tokens_that_bounds_nothing_is_refused(tmp_path, flag, value):
    """--budget-usd nan (or inf) compares False with every spend: the run would never stop paying."""
    from proteus_train.judge import run

    write_log(tmp_path)
    with pytest.raises(ValueError, match=f"--{flag.replace('_', '-')} must be"):
        run(args_for(tmp_path, **{flag: value}))


def test_a_run_whose_every_call_failed_ends_with_an_error(tmp_path, monkeypatch, capsys):
    """No label was written and nothing was learnt: exit 2 naming what to check, not a quiet 0."""
    from proteus_train.judge import run

    monkeypatch.setenv("PROTEUS_TEST_JUDGE_KEY", "sk-test")
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    write_log(tmp_path)
    with respx.mock() as mock:
        mock.post(f"{BASE}/chat/completions").mock(return_value=httpx.Response(401, json={"error": {"message": "bad key"}}))
        assert run(args_for(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "error: every judge call failed (5 of 5" in err and "--api-base" in err
