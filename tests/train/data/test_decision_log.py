"""The decision-log loader: bandit rows (one labelled slot), propensities, latest feedback, time split."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from proteus_train.data import load_logs
from proteus_train.data.common import RoutingLogWarning

SLOTS = ["big", "mid", "small"]


def decision(call_id, ts, chosen, propensity=1.0, prompt="What is 2 + 2?", tier="standard"):
    return {"schema": 1, "type": "decision", "call_id": call_id, "ts": ts, "key_hash": None, "tier": tier,
            "tau_source": "tier", "state_key": f"tier:{tier}", "tau_requested": None, "tau_effective": 0.8,
            "delta": 0.0, "mu": 0.5, "model_group": "auto",
            "candidates": [{"deployment_id": f"d{j}", "slot": j, "model": m, "cost_usd": 0.01 / (j + 1), "p": 0.9 - 0.1 * j}
                           for j, m in enumerate(SLOTS)],
            "chosen": chosen, "propensity": propensity, "prompt_sha256": "x", "prompt": prompt, "artifact": "abc"}


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def feedback(call_id, ts, score, source="api"):
    return {"schema": 1, "type": "feedback", "call_id": call_id, "ts": ts, "score": score, "source": source}


def test_bandit_rows_hold_only_the_chosen_slots_latest_feedback(tmp_path):
    records = [decision(f"c{i}", 100.0 + i, i % 3, propensity=1.0 if i % 4 else 0.25, prompt=f"prompt {i}") for i in range(20)]
    records += [{"schema": 1, "type": "outcome", "call_id": "c1", "ts": 101.5, "success": True, "response_cost": 0.5,
                 "latency_ms": 10.0, "error": None}]
    records += [feedback(f"c{i}", 200.0 + i, 1.0) for i in range(0, 20, 2)]
    records += [feedback("c0", 300.0, 0.0, source="judge"), feedback("c0", 250.0, 1.0)]  # the latest (ts 300) wins
    write(tmp_path / "decisions-20260101T000000-1-0.jsonl", records[:15])
    write(tmp_path / "decisions-20260101T000100-1-1.jsonl", records[15:])
    with pytest.warns(RoutingLogWarning, match="dropped 10 rows with no observed score"):
        log = load_logs(tmp_path)
    assert log.models == SLOTS and log.source == "decision-log" and log.bandit
    assert len(log) == 10 and log.sample_ids[0] == "c0"
    assert np.isfinite(log.scores).sum(axis=1).tolist() == [1] * 10
    assert log.scores[0].tolist()[0] == 0.0  # c0 chose slot 0; latest feedback 0.0
    assert log.logged_choice.tolist() == [i % 3 for i in range(0, 20, 2)]
    assert log.propensity.tolist() == [0.25 if i % 4 == 0 else 1.0 for i in range(0, 20, 2)]
    assert log.costs[0].tolist() == pytest.approx([0.01, 0.005, 0.01 / 3])
    assert set(log.split.tolist()) == {"train", "val"}
    prov = log.provenance
    assert prov["n_decisions"] == 20 and prov["n_labelled"] == 10 and prov["label_share"] == 0.5
    assert prov["first_decision_utc"] == "1970-01-01T00:01:40Z" and prov["feedback_sources"] == {"api": 9, "judge": 1}
    assert prov["labels_per_model"] == {"big": 4, "mid": 3, "small": 3}


def test_response_cost_replaces_the_chosen_slots_estimate(tmp_path):
    records = [decision("a", 1.0, 1), feedback("a", 2.0, 1.0),
               {"schema": 1, "type": "outcome", "call_id": "a", "ts": 1.5, "success": True, "response_cost": 0.7}]
    records += [decision(f"b{i}", 3.0 + i, 0, prompt=f"p{i}") for i in range(3)] + [feedback(f"b{i}", 9.0, 0.0) for i in range(3)]
    log = load_logs(write(tmp_path / "decisions-x.jsonl", records))
    assert log.costs[0, 1] == 0.7 and log.costs[0, 0] == 0.01


@pytest.mark.parametrize("change, message", [
    ({"prompt": None}, "log_prompts: true"),
    ({"chosen": 3}, "field 'chosen' must be an index"),
    ({"propensity": 0.0}, "field 'propensity' must lie in"),
    ({"schema": 3}, "field 'schema' is 3; supported: 1, 2"),
    ({"type": "vote"}, "field 'type' is 'vote'; allowed"),
])
def test_malformed_records_are_named(tmp_path, change, message):
    bad = {**decision("a", 1.0, 0), **change}
    write(tmp_path / "decisions-x.jsonl", [decision("b", 0.5, 1), bad, feedback("a", 2.0, 1.0), feedback("b", 2.0, 1.0)])
    with pytest.raises(ValueError, match=message):
        load_logs(tmp_path / "decisions-x.jsonl")


def test_feedback_score_outside_unit_interval_is_refused(tmp_path):
    write(tmp_path / "decisions-x.jsonl", [decision("a", 1.0, 0), feedback("a", 2.0, 1.5)])
    with pytest.raises(ValueError, match=r"field 'score' must be a number in \[0, 1\]"):
        load_logs(tmp_path / "decisions-x.jsonl")


def test_with_models_reorders_to_an_artifacts_slots(tmp_path):
    records = [decision(f"c{i}", float(i), i % 3, prompt=f"p{i}") for i in range(6)] + [feedback(f"c{i}", 9.0, 1.0) for i in range(6)]
    log = load_logs(write(tmp_path / "decisions-x.jsonl", records)).with_models(["small", "extra", "big", "mid"])
    assert log.models == ["small", "extra", "big", "mid"]
    assert log.logged_choice.tolist() == [2, 3, 0, 2, 3, 0]
    assert np.isnan(log.scores[:, 1]).all() and log.scores[0, 2] == 1.0
    with pytest.raises(ValueError, match="not among"):
        log.with_models(["big", "mid"])


def _without(record, *path):
    """A copy of ``record`` without the field at ``path`` (e.g. "candidates", 1, "slot")."""
    record = json.loads(json.dumps(record))
    holder = record
    for key in path[:-1]:
        holder = holder[key]
    del holder[path[-1]]
    return record


def test_a_negative_candidate_cost_is_refused_naming_the_file_call_and_field(tmp_path):
    bad = decision("neg", 1.0, 0)
    bad["candidates"][1]["cost_usd"] = -0.5
    path = write(tmp_path / "decisions-x.jsonl", [decision("ok", 0.5, 1), bad, feedback("neg", 2.0, 1.0)])
    with pytest.raises(ValueError, match=r"decisions-x\.jsonl:2: call_id 'neg': field 'candidates\[1\]\.cost_usd' "
                                         r"must be a number >= 0"):
        load_logs(path)


def test_a_negative_response_cost_is_refused(tmp_path):
    outcome = {"schema": 1, "type": "outcome", "call_id": "a", "ts": 1.5, "success": True, "response_cost": -1.0}
    path = write(tmp_path / "decisions-x.jsonl", [decision("a", 1.0, 0), outcome, feedback("a", 2.0, 1.0)])
    with pytest.raises(ValueError, match=r"call_id 'a': field 'response_cost' must be a number >= 0"):
        load_logs(path)


def test_a_candidate_without_slot_or_model_is_named(tmp_path):
    for field, line in (("slot", 2), ("model", 2)):
        bad = _without(decision("noslot", 1.0, 0), "candidates", 2, field)
        path = write(tmp_path / "decisions-x.jsonl", [decision("ok", 0.5, 1), bad, feedback("noslot", 2.0, 1.0)])
        with pytest.raises(ValueError, match=rf"decisions-x\.jsonl:{line}: call_id 'noslot': field 'candidates\[2\]\.{field}' "
                                             "is missing"):
            load_logs(path)


def test_a_candidate_without_slot_ends_proteus_train_with_exit_2(tmp_path, capsys):
    from litellm_proteus.cli import main

    bad = _without(decision("noslot", 1.0, 0), "candidates", 0, "slot")
    path = write(tmp_path / "decisions-x.jsonl", [bad, feedback("noslot", 2.0, 1.0)])
    assert main(["train", "--data", str(path), "--out", str(tmp_path / "art"), "--steps", "100", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "call_id 'noslot'" in err and "candidates[0].slot" in err and "Traceback" not in err
    assert not (tmp_path / "art").exists()


@pytest.mark.parametrize("record, field, value", [
    (feedback("a", 2.0, "yes"), "score", "yes"),
    (feedback("a", "yesterday", 1.0), "ts", "yesterday"),
    ({**decision("a", 1.0, 0), "ts": "yesterday"}, "ts", "yesterday"),
    ({**decision("a", 1.0, 0), "ts": "1.5"}, "ts", "1.5"),  # a numeric string too, as the runtime's readers refuse it
])
def test_a_field_that_is_not_a_number_is_named_with_its_line(tmp_path, record, field, value):
    records = [decision("a", 1.0, 0), feedback("a", 2.0, 1.0)]
    records[0 if record["type"] == "decision" else 1] = record
    path = write(tmp_path / "decisions-x.jsonl", [decision("b", 0.5, 1), *records])
    line = 2 if record["type"] == "decision" else 3
    with pytest.raises(ValueError, match=rf"decisions-x\.jsonl:{line}: call_id 'a': field '{field}' must be a number; "
                                         rf"got '{value}'"):
        load_logs(path)


def test_a_record_without_ts_is_named_with_its_line_as_the_runtime_readers_name_it(tmp_path):
    undated = {k: v for k, v in feedback("a", 2.0, 1.0).items() if k != "ts"}
    path = write(tmp_path / "decisions-x.jsonl", [decision("a", 1.0, 0), undated])
    with pytest.raises(ValueError, match=r"decisions-x\.jsonl:2: call_id 'a': field 'ts' is missing"):
        load_logs(path)


def test_a_repeated_call_id_keeps_its_latest_records_by_ts_like_join_log(tmp_path):
    from litellm_proteus.decision_log import join_log

    # the retried decision (chosen 2, ts 5) sits *before* the first attempt (chosen 0, ts 1) in the file
    retry = decision("r", 5.0, 2, propensity=0.5)
    first = decision("r", 1.0, 0)
    outcome = lambda ts, cost: {"schema": 1, "type": "outcome", "call_id": "r", "ts": ts, "success": True,  # noqa: E731
                                "response_cost": cost, "latency_ms": 1.0, "error": None}
    records = [retry, outcome(5.5, 0.9), first, outcome(1.5, 0.1), feedback("r", 9.0, 1.0), feedback("r", 6.0, 0.0)]
    records += [decision(f"o{i}", 2.0 + i, 1, prompt=f"p{i}") for i in range(3)] + [feedback(f"o{i}", 9.0, 0.0) for i in range(3)]
    write(tmp_path / "decisions-20260101T000000-1-0.jsonl", records)
    log = load_logs(tmp_path)
    row = log.sample_ids.index("r")
    assert log.logged_choice[row] == 2 and log.propensity[row] == 0.5  # the decision with the later ts
    assert log.costs[row, 2] == pytest.approx(0.9)  # its outcome: the one with the later ts
    assert log.scores[row, 2] == 1.0  # the feedback with the later ts
    assert log.provenance["n_decisions"] == 4
    served = {d.call_id: d for d in join_log(tmp_path)}
    assert served["r"].decision["chosen"] == log.logged_choice[row]
    assert served["r"].outcome["response_cost"] == log.costs[row, 2] and served["r"].feedback == log.scores[row, 2]


def test_a_call_id_two_keys_used_trains_on_the_first_keys_decision(tmp_path):
    # the feedback index takes labels only from the first key: the label is of that key's decision
    records = [{**decision("order-1", 1.0, 0), "key_hash": "alice"}, {**decision("order-1", 2.0, 2), "key_hash": "bob"},
               feedback("order-1", 3.0, 1.0)]
    log = load_logs(write(tmp_path / "decisions-20260101T000000-1-0.jsonl", records))
    assert log.logged_choice[log.sample_ids.index("order-1")] == 0


def test_an_outcome_pairs_with_the_decision_whose_pick_it_names(tmp_path):
    """Schema 2 outcomes name their deployment: a retried call's earlier failure is not its answer's
    cost, and a fallback group's answer (no outcome of any pick) leaves the pick's failure as its
    outcome; a schema 1 outcome (no deployment) is the call's latest decision's."""
    from litellm_proteus.decision_log import join_log

    def outcome(call_id, ts, deployment, success, cost):
        return {"schema": 2, "type": "outcome", "call_id": call_id, "ts": ts, "deployment_id": deployment,
                "success": success, "response_cost": cost, "latency_ms": None, "error": None if success else "boom"}

    old = {"schema": 1, "type": "outcome", "call_id": "old", "ts": 6.5, "success": True, "response_cost": 0.3}
    records = [{**decision("retried", 1.0, 0), "schema": 2}, outcome("retried", 1.5, "d0", False, 0.0),
               {**decision("retried", 2.0, 1), "schema": 2}, outcome("retried", 2.5, "d1", True, 0.4),
               outcome("retried", 3.0, "d0", False, 0.0),  # an attempt on d0, which the kept decision did not pick
               {**decision("fell-back", 4.0, 2), "schema": 2}, outcome("fell-back", 4.5, "d2", False, 0.0),
               decision("old", 6.0, 1), old]
    records += [feedback(c, 9.0, 1.0) for c in ("retried", "fell-back", "old")]
    with pytest.warns(RoutingLogWarning, match="dropped 1 rows with no observed score"):
        log = load_logs(write(tmp_path / "decisions-20260101T000000-1-0.jsonl", records))
    rows = {call_id: i for i, call_id in enumerate(log.sample_ids)}
    assert log.costs[rows["retried"], 1] == pytest.approx(0.4)  # d1's answer, not d0's later failure
    assert log.costs[rows["old"], 1] == pytest.approx(0.3)
    assert "fell-back" not in rows  # its score is the fallback's answer's, not a label of the pick
    assert log.provenance["n_outcomes"] == 3 and log.provenance["n_labelled"] == 2
    joined = {row.call_id: row.outcome for row in join_log(tmp_path)}
    assert joined["retried"]["deployment_id"] == "d1" and joined["fell-back"]["success"] is False
    assert joined["old"]["response_cost"] == 0.3


def test_a_repeated_call_id_with_equal_ts_keeps_the_record_read_last(tmp_path):
    records = [decision("r", 1.0, 0), decision("r", 1.0, 1), feedback("r", 2.0, 1.0)]
    log = load_logs(write(tmp_path / "decisions-x.jsonl", records))
    assert len(log) == 1 and log.logged_choice.tolist() == [1]


def test_decisions_with_a_cut_prompt_are_dropped_with_a_warning_that_counts_them(tmp_path):
    records = [decision(f"c{i}", float(i), i % 3, prompt=f"prompt {i}") for i in range(8)]
    for i in (1, 4, 6):
        records[i] = {**records[i], "prompt": "prom", "prompt_truncated": True}
    records += [feedback(f"c{i}", 20.0, 1.0) for i in range(8)]
    with pytest.warns(RoutingLogWarning, match="dropped 3 of 8 decisions marked prompt_truncated"):
        log = load_logs(write(tmp_path / "decisions-x.jsonl", records))
    assert log.sample_ids == [f"c{i}" for i in (0, 2, 3, 5, 7)]
    assert "prom" not in log.prompts and log.provenance["n_prompt_truncated_dropped"] == 3
    every = [{**r, "prompt_truncated": True} if r["type"] == "decision" else r for r in records]
    with pytest.raises(ValueError, match="every decision is marked prompt_truncated"), pytest.warns(RoutingLogWarning):
        load_logs(write(tmp_path / "decisions-x.jsonl", every))


def test_a_log_without_any_label_says_so_and_proteus_train_ends_with_exit_2(tmp_path, capsys):
    """Decisions and outcomes but no feedback: the error names what is missing (not a model's cost)."""
    from litellm_proteus.cli import main

    records = [decision(f"c{i}", 100.0 + i, i % 3, prompt=f"prompt {i}") for i in range(6)]
    records += [{"schema": 1, "type": "outcome", "call_id": f"c{i}", "ts": 100.5 + i, "success": True,
                 "response_cost": 0.01, "latency_ms": 5.0, "error": None} for i in range(6)]
    path = write(tmp_path / "decisions-x.jsonl", records)
    with pytest.raises(ValueError, match="none of its 6 decisions has a feedback label and no shadow row has a score"):
        load_logs(path)
    assert main(["train", "--data", str(path), "--out", str(tmp_path / "art"), "--steps", "100", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Send feedback" in err and "has no cost" not in err and not (tmp_path / "art").exists()


def test_a_log_whose_labels_leave_too_few_validation_rows_is_refused_before_ppo(tmp_path, capsys):
    """100 labelled decisions, 15 % of prompts held out: the prompt-hash split leaves 16 validation
    rows, so no operating point could have a bound; training stops before the policy is trained."""
    from litellm_proteus.cli import main

    records = [decision(f"c{i}", 100.0 + i, i % 3, propensity=0.9, prompt=f"prompt number {i}") for i in range(100)]
    records += [feedback(f"c{i}", 200.0 + i, float(i % 2)) for i in range(100)]
    path = write(tmp_path / "decisions-x.jsonl", records)
    assert main(["train", "--data", str(path), "--out", str(tmp_path / "art"), "--steps", "100", "--quiet",
                 "--validation-share", "0.15"]) == 2
    err = capsys.readouterr().err
    assert "its calibration rows hold 16 validation rows, fewer than the 20 a lower bound on accuracy needs, from 100 labelled decisions" in err
    assert not (tmp_path / "art").exists()


def test_a_line_that_is_json_but_not_an_object_is_an_error_naming_its_line(tmp_path):
    path = tmp_path / "decisions-20260101T000000-1-0.jsonl"
    path.write_text(json.dumps(decision("a", 1.0, 0)) + "\n42\n" + json.dumps(feedback("a", 2.0, 1.0)) + "\n")
    with pytest.raises(ValueError, match=r"decisions-20260101T000000-1-0\.jsonl:2: each line must be a JSON object"):
        load_logs(path)


def test_errors_name_the_files_line_after_blank_lines(tmp_path):
    bad = decision("b", 2.0, 0)
    del bad["candidates"][1]["slot"]
    path = tmp_path / "decisions-20260101T000000-1-0.jsonl"
    path.write_text("\n".join([json.dumps(decision("a", 1.0, 0)), "", "  ", json.dumps(bad)]) + "\n")
    with pytest.raises(ValueError, match=r"decisions-20260101T000000-1-0\.jsonl:4: call_id 'b': field 'candidates\[1\]\.slot' is missing"):
        load_logs(path)


def test_a_log_spanning_a_promotion_that_reordered_the_slots_joins_candidates_by_model_name(tmp_path):
    before = [decision(f"a{i}", 1.0 + i, i % 3, prompt=f"p{i}") for i in range(3)]
    after = [decision(f"b{i}", 10.0 + i, i % 3, prompt=f"q{i}") for i in range(3)]
    for record in after:  # the promoted artifact holds the models in the opposite slot order
        record["candidates"] = [{**c, "slot": 2 - c["slot"]} for c in record["candidates"]]
    labels = [feedback(r["call_id"], 20.0, 1.0 if r["call_id"].startswith("a") else 0.5) for r in before + after]
    write(tmp_path / "decisions-20260101T000000-1-0.jsonl", before)
    write(tmp_path / "decisions-20260101T010000-2-0.jsonl", after + labels)
    log = load_logs(tmp_path)
    assert log.models == SLOTS
    for call_id, record in ((r["call_id"], r) for r in before + after):
        row = log.sample_ids.index(call_id)
        model = record["candidates"][record["chosen"]]["model"]
        assert log.models[log.logged_choice[row]] == model
        assert log.scores[row, SLOTS.index(model)] == (1.0 if call_id.startswith("a") else 0.5)
        assert log.costs[row].tolist() == pytest.approx([c["cost_usd"] for c in sorted(record["candidates"], key=lambda c: SLOTS.index(c["model"]))])


def test_one_decision_naming_one_slot_for_two_models_is_refused(tmp_path):
    bad = decision("x", 2.0, 0)
    bad["candidates"][1]["slot"] = 0
    write(tmp_path / "decisions-20260101T000000-1-0.jsonl", [decision("a", 1.0, 0), bad, feedback("a", 3.0, 1.0)])
    with pytest.raises(ValueError, match=r"decisions-20260101T000000-1-0\.jsonl:2: call_id 'x': slot 0 is named both "
                                         r"'big' and 'mid' in one decision"):
        load_logs(tmp_path)


def test_a_call_id_reused_for_another_prompt_labels_each_request_with_its_own_feedback(tmp_path):
    """`x-litellm-call-id: fixed-id-1` sent with two prompts: the feedback sent for the first labels
    the first (not the decision logged after it), each request is a row, and the proxy's reader agrees."""
    from litellm_proteus.decision_log import join_log

    haiku = {**decision("fixed-id-1", 1.0, 0, prompt="Write a haiku"), "prompt_sha256": "haiku"}
    france = {**decision("fixed-id-1", 3.0, 1, prompt="What is the capital of France?"), "prompt_sha256": "france"}
    records = [haiku, feedback("fixed-id-1", 2.0, 0.0), france]
    path = write(tmp_path / "decisions-20260101T000000-1-0.jsonl", records)
    with pytest.warns(RoutingLogWarning, match=r"1 call id\(s\) were reused by distinct requests"):
        log = load_logs(path)
    assert log.sample_ids == ["fixed-id-1"] and log.prompts == ["Write a haiku"]
    assert log.logged_choice.tolist() == [0] and log.scores[0, 0] == 0.0
    write(path, records + [feedback("fixed-id-1", 4.0, 1.0)])
    with pytest.warns(RoutingLogWarning, match="reused"):
        log = load_logs(path)
    assert log.sample_ids == ["fixed-id-1", "fixed-id-1#2"] and log.prompts == ["Write a haiku", "What is the capital of France?"]
    assert [log.scores[i, log.logged_choice[i]] for i in range(2)] == [0.0, 1.0]
    assert [(r.decision["prompt"], r.feedback) for r in join_log(tmp_path)] == [
        ("Write a haiku", 0.0), ("What is the capital of France?", 1.0)]


def test_the_validation_share_holds_out_prompts_by_hash_with_their_repeats(tmp_path):
    from proteus_train.data.decision_log import VALIDATION_SHARE

    records = [decision(f"c{i}", 100.0 + i, i % 3, prompt=f"prompt number {i % 500}") for i in range(1000)]
    records += [feedback(f"c{i}", 2000.0 + i, 1.0) for i in range(1000)]
    path = write(tmp_path / "decisions-x.jsonl", records)
    splits = {}
    for share in (0.15, VALIDATION_SHARE, 0.7):
        log = load_logs(path, validation_share=share)
        val = {p for p, part in zip(log.prompts, log.split) if part == "val"}
        train = {p for p, part in zip(log.prompts, log.split) if part == "train"}
        assert not val & train  # a prompt asked twice sits on one side
        assert abs(len(val) / 500 - share) < 0.07  # 500 prompts: within 3.5 binomial SE
        assert log.provenance["split_method"] == log.split_method == f"prompt-hash:val share {share:g}"
        splits[share] = log.split == "val"
    # a larger share holds out a superset: the prompts of a smaller share stay validation prompts
    assert (splits[0.4] | ~splits[0.15]).all() and (load_logs(path).split == "val").tolist() == splits[0.4].tolist()


def test_the_validation_share_splits_the_decision_log_only(tmp_path):
    """A full-information log read beside a decision log keeps the split its files declare."""
    records = [decision(f"c{i}", 100.0 + i, i % 3, prompt=f"prompt number {i}") for i in range(60)]
    records += [feedback(f"c{i}", 2000.0 + i, 1.0) for i in range(60)]
    write(tmp_path / "decisions-x.jsonl", records)
    wide = pd.DataFrame([{"sample_id": f"w{i}", "prompt": f"wide prompt {i}", **{m: 1.0 for m in SLOTS},
                          **{f"{m}|total_cost": 0.001 for m in SLOTS}} for i in range(30)])
    wide.to_csv(tmp_path / "bench_test.csv", index=False)
    log = load_logs(tmp_path, validation_share=0.7)
    wide_rows = np.array([s.startswith("w") for s in log.sample_ids])
    assert set(log.split[wide_rows]) == {"test"} and set(log.split[~wide_rows]) == {"train", "val"}


def test_a_log_whose_prompts_all_hash_into_training_is_refused_not_split_by_row(tmp_path, capsys):
    """Four prompts asked 50 times each, none in the validation share: a validation part carved by
    row would hold every prompt on both sides, so training refuses, naming the flag."""
    from litellm_proteus.cli import main
    from proteus_train.data.decision_log import prompt_fraction

    prompts = [p for p in (f"health check {i}" for i in range(100)) if prompt_fraction(p) < 0.6][:4]
    records = [decision(f"c{i}", 100.0 + i, i % 3, prompt=prompts[i % 4]) for i in range(200)]
    records += [feedback(f"c{i}", 1000.0 + i, float(i % 2)) for i in range(200)]
    path = write(tmp_path / "decisions-x.jsonl", records)
    assert set(load_logs(path).split) == {"train"}
    assert main(["train", "--data", str(path), "--out", str(tmp_path / "art"), "--steps", "100", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no prompt of the decision log falls into the validation share (0.4 of prompts" in err
    assert "4 distinct prompts" in err and "--validation-share" in err and not (tmp_path / "art").exists()
