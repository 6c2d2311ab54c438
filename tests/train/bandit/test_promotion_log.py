"""``proteus eval --log``'s promotion report on small decision logs written here: every compliance state
of the log is reported (one without labels as cannot be estimated), the floor is the tau the state
promises, costs are over all its requests, shadow rows are counted once, and ``--log`` must be a folder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR, read_manifest
from litellm_proteus.shadow_rows import shadow_row
from proteus_train.data import load_logs
from proteus_train.evaluation.promotion import EXIT_DO_NOT_PROMOTE, exit_code, promotion_report, render

SLOTS = read_manifest(DEFAULT_ARTIFACT_DIR).models
ART = str(DEFAULT_ARTIFACT_DIR)


def decision(call_id, ts, tier, tau, cost, *, delta=0.0, tau_source="tier", state_key=None, chosen=0):
    record = {"schema": 2, "type": "decision", "call_id": call_id, "ts": ts, "key_hash": None, "tier": tier,
              "tau_source": tau_source, "tau": tau, "tau_requested": tau if tau_source == "request" else None,
              "tau_effective": round(tau + delta, 4), "delta": delta, "mu": 0.5, "model_group": "auto",
              # every candidate costs the same for one request: the cost of any routing of it is `cost`
              "candidates": [{"deployment_id": f"d{j}", "slot": j, "model": m, "cost_usd": cost, "p": 0.8}
                             for j, m in enumerate(SLOTS)],
              "chosen": chosen, "propensity": 1.0, "prompt_sha256": "x", "prompt": f"question {call_id}: what is {ts}?",
              "artifact": "abc"}
    if state_key is not False:
        record["state_key"] = state_key or f"tier:{tier}@{tau:.4g}"
    return record


def feedback(call_id, ts, score):
    return {"schema": 2, "type": "feedback", "call_id": call_id, "ts": ts, "score": score, "source": "api"}


def write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def report_of(tmp_path, records):
    write(tmp_path / "log" / "decisions-20260101T000000-1-0.jsonl", records)
    return promotion_report(ART, ART, str(tmp_path / "log"), None, "cpu")


def test_a_state_without_labels_is_reported_as_cannot_be_estimated_and_blocks_promotion(tmp_path):
    records, shadows = [], []
    for i in range(90):
        tier, tau = [("premium", 0.85), ("standard", 0.82), ("economy", 0.79)][i % 3]
        records.append(decision(f"c{i}", 1000.0 + i, tier, tau, 0.001))
        if tier != "premium":  # every economy and standard call shadowed (so supported), no premium call
            shadows.append(_shadow(f"c{i}", 1000.0 + i, tier, tau))
    write(tmp_path / "log" / "shadow-20260101T000000-1-0.jsonl", shadows)
    report = report_of(tmp_path, records)
    premium = report["states"]["tier:premium@0.85"]["new"]
    assert set(report["states"]) == {"tier:premium@0.85", "tier:standard@0.82", "tier:economy@0.79"}
    assert premium["n_rows"] == 0 and premium["dr"] is None and premium["n_requests"] == 30
    assert not report["promote"] and exit_code(report) == EXIT_DO_NOT_PROMOTE
    assert report["reasons"] == ["state 'tier:premium@0.85': cannot be estimated: none of its 30 requests has feedback "
                                 "or a shadow row: collect feedback or turn on shadow evaluation"]
    assert "| tier:premium@0.85 | 0.85 | 30 | cannot be estimated |  | cannot be estimated |" in render(report)


def test_the_floor_is_the_tau_each_state_promises_not_the_routed_tau(tmp_path):
    records, n = [], 0
    for tau in (0.79, 0.82, 0.85):  # one premium key's requests sending their own tau: one state per tau bucket
        for _ in range(25):
            records += [decision(f"c{n}", 1000.0 + n, "premium", tau, 0.001, tau_source="request", state_key=f"tau:{tau}"),
                        feedback(f"c{n}", 2000.0 + n, 1.0)]
            n += 1
    for _ in range(25):  # the controller routes the tier 4 pp below its tau: the floor stays the tier's
        records += [decision(f"c{n}", 1000.0 + n, "standard", 0.82, 0.001, delta=-0.04), feedback(f"c{n}", 2000.0 + n, 1.0)]
        n += 1
    states = report_of(tmp_path, records)["states"]
    assert {s: pair["new"]["tau"] for s, pair in states.items()} == {
        "tau:0.79": 0.79, "tau:0.82": 0.82, "tau:0.85": 0.85, "tier:standard@0.82": 0.82}


def test_a_log_without_state_keys_groups_by_tier_at_the_promised_tau(tmp_path):
    records = []
    for i in range(30):
        records += [decision(f"c{i}", 1000.0 + i, "premium", 0.85, 0.001, delta=-0.04, state_key=False),
                    feedback(f"c{i}", 2000.0 + i, 1.0)]
    for record in records:  # schema 1 records without tau: the promise is tau_effective - delta
        record.pop("tau", None)
    states = report_of(tmp_path, records)["states"]
    assert list(states) == ["tier:premium"] and states["tier:premium"]["new"]["tau"] == 0.85


def test_cost_is_the_mean_over_all_the_states_requests_not_only_the_labelled_ones(tmp_path):
    records = []
    for i in range(40):  # labelled calls cost 0.001 whatever the choice, unlabelled ones 0.003
        labelled = i % 4 == 0
        records.append(decision(f"c{i}", 1000.0 + i, "standard", 0.82, 0.001 if labelled else 0.003))
        if labelled:
            records.append(feedback(f"c{i}", 2000.0 + i, 1.0))
    state = report_of(tmp_path, records)["states"]["tier:standard@0.82"]
    assert state["new"]["n_requests"] == 40 and state["new"]["n_rows"] == 10
    assert state["new"]["cost_usd"] == pytest.approx(0.0025) and state["baseline"]["cost_usd"] == pytest.approx(0.0025)


def _shadow(call_id, ts, tier, tau):
    return shadow_row(call_id=call_id, prompt=f"question {call_id}: what is {ts}?", tier=tier, tau=tau, models=SLOTS,
                      scores={m: 1.0 for m in SLOTS}, costs={m: 0.001 for m in SLOTS}, served=SLOTS[0], call_share=1.0, ts=ts + 1)


def test_a_shadow_row_is_in_its_decisions_state(tmp_path):
    records = [decision(f"c{i}", 1000.0 + i, "premium", 0.85, 0.001, delta=-0.04) for i in range(30)]
    write(tmp_path / "log" / "shadow-20260101T000000-1-0.jsonl", [_shadow(f"c{i}", 1000.0 + i, "premium", 0.81) for i in range(30)])
    states = report_of(tmp_path, records)["states"]
    assert list(states) == ["tier:premium@0.85"] and states["tier:premium@0.85"]["new"]["n_rows"] == 30


def test_a_copied_shadow_file_counts_its_rows_once(tmp_path):
    records = [decision(f"c{i}", 1000.0 + i, "standard", 0.82, 0.001) for i in range(30)]
    shadows = [_shadow(f"c{i}", 1000.0 + i, "standard", 0.82) for i in range(0, 30, 3)]
    write(tmp_path / "log" / "shadow-20260101T000000-1-0.jsonl", shadows)
    write(tmp_path / "log" / "shadow-20260101T000000-1-1.jsonl", shadows)  # the same rows again
    report = report_of(tmp_path, records)
    assert report["log_provenance"]["n_shadow_rows"] == 10 == report["states"]["tier:standard@0.82"]["new"]["n_rows"]
    with pytest.warns(UserWarning):
        assert load_logs(tmp_path / "log").provenance["n_shadow_rows"] == 10  # what the trained manifest records


def test_eval_log_must_be_a_folder_and_the_error_names_the_flag(tmp_path, capsys):
    from litellm_proteus.cli import main

    write(tmp_path / "log" / "decisions-20260101T000000-1-0.jsonl", [decision("c0", 1000.0, "standard", 0.82, 0.001)])
    common = ["eval", "--artifact", ART, "--out", str(tmp_path / "out"), "--log"]
    assert main([*common, str(tmp_path / "log" / "decisions-20260101T000000-1-0.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "--log " in err and "is a file; pass the decision log folder that holds it" in err and str(tmp_path / "log") in err
    assert main([*common, str(tmp_path / "nodir")]) == 2
    assert f"error: --log {tmp_path / 'nodir'}: decision log folder not found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_call_id_two_requests_reused_is_two_requests_each_in_its_own_state(tmp_path):
    records = []
    for i in range(30):
        records += [decision(f"c{i}", 1000.0 + i, "standard", 0.82, 0.001), feedback(f"c{i}", 2000.0 + i, 1.0)]
    first = decision("reused", 3000.0, "standard", 0.82, 0.001)
    again = {**decision("reused", 3100.0, "premium", 0.85, 0.001), "prompt_sha256": "y", "prompt": "another question"}
    records += [first, feedback("reused", 3050.0, 1.0), again, feedback("reused", 3150.0, 0.0)]
    states = report_of(tmp_path, records)["states"]
    assert states["tier:premium@0.85"]["new"]["n_requests"] == 1  # the second request, in its own state
    assert states["tier:standard@0.82"]["new"]["n_requests"] == 31
