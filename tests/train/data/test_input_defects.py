"""Defects in an operator's wide-format logs end in an error naming the file / column (or a warning
naming the columns), never in a silently wrong log."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from litellm_proteus.cli import main
from proteus_train.data import RoutingLogWarning, load_logs
from proteus_train.data.logs import RoutingLog
from proteus_train.routing import fill_missing_costs

from .conftest import RB_MODELS, routerbench_frame, write_frame

nan = np.nan


def frame(n: int = 6, scores=None, costs=None, **columns) -> pd.DataFrame:
    rows = [{"id": f"q{i}", "prompt": f"question {i}", "scores": (scores or [[1.0, 0.0, 1.0]] * n)[i],
             "costs": (costs or [[1e-4, 2e-4, 3e-3]] * n)[i]} for i in range(n)]
    out = routerbench_frame(rows)
    for name, values in columns.items():
        out[name] = values
    return out


def load_quietly(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RoutingLogWarning)
        return load_logs([path])


# --- 2: a model whose cost cells are all empty ----------------------------------------------------
def test_model_with_no_cost_in_any_row_is_an_error_naming_its_cost_column(tmp_path):
    path = write_frame(frame(costs=[[1e-4, nan, 3e-3]] * 6), tmp_path / "logs.csv")
    with pytest.raises(ValueError, match=r"logs\.csv: column 'org/model-a\|total_cost' is empty in every row"):
        load_logs([path])


def test_cli_ends_with_error_and_status_2_without_an_artifact(tmp_path, capsys):
    path = write_frame(frame(costs=[[1e-4, nan, 3e-3]] * 6), tmp_path / "logs.csv")
    out = tmp_path / "run"
    assert main(["train", "--data", str(path), "--out", str(out), "--steps", "100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'org/model-a|total_cost'" in err
    assert not out.exists()


def test_partially_missing_costs_take_the_models_own_mean(tmp_path):
    costs = [[1e-4, 2e-4, 3e-3], [1e-4, nan, 3e-3], [1e-4, 4e-4, 3e-3], [1e-4, nan, 3e-3]]
    log = load_quietly(write_frame(frame(4, costs=costs), tmp_path / "logs.csv"))
    filled = fill_missing_costs(log.costs)
    assert filled[:, 1].tolist() == pytest.approx([2e-4, 3e-4, 4e-4, 3e-4])


def test_a_model_with_no_logged_cost_takes_the_other_models_mean_without_a_warning():
    costs = np.array([[1e-4, nan, 3e-3], [3e-4, nan, 5e-3]])  # the middle model never served
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" would be an error here
        filled = fill_missing_costs(costs)
    assert filled[:, 1].tolist() == pytest.approx([(2e-4 + 4e-3) / 2] * 2)

def test_cost_present_in_another_file_is_enough(tmp_path):
    write_frame(frame(3, costs=[[1e-4, nan, 3e-3]] * 3), tmp_path / "logs_train.csv")
    write_frame(frame(3, costs=[[1e-4, 5e-4, 3e-3]] * 3).assign(sample_id=["t0", "t1", "t2"]),
                tmp_path / "logs_test.csv")
    log = load_quietly(tmp_path)
    assert fill_missing_costs(log.costs)[:, 1].tolist() == pytest.approx([5e-4] * 6)


# --- 3: a model with no observed score --------------------------------------------------------------
def test_model_with_no_score_in_any_row_is_an_error_naming_it(tmp_path):
    path = write_frame(frame(scores=[[1.0, nan, 0.0]] * 6), tmp_path / "logs.csv")
    with pytest.raises(ValueError, match=r"logs\.csv: model 'org/model-a' has no observed score \(column 'org/model-a'"):
        load_logs([path])


def test_bandit_log_may_have_a_slot_that_was_never_chosen():
    from proteus_train.data.common import check_models

    log = RoutingLog(prompts=["a", "b"], scores=np.array([[1.0, nan], [0.0, nan]]),
                     costs=np.array([[1e-4, 2e-4], [1e-4, 2e-4]]), models=["m1", "m2"],
                     logged_choice=np.array([0, 0]), propensity=np.array([1.0, 1.0]),
                     logged_tau=np.array([0.8, 0.8]), source="decision-log")
    check_models(log)  # no error
    with pytest.raises(ValueError, match="model 'm2' has no observed score"):
        check_models(RoutingLog(prompts=log.prompts, scores=log.scores, costs=log.costs, models=log.models))


# --- 4: inf scores --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("suffix", "value", "shown"), [(".csv", "inf", "inf"), (".csv", "-inf", "-inf"),
                                                        (".jsonl", 1e999, "inf")])
def test_infinite_score_is_outside_the_unit_interval(tmp_path, suffix, value, shown):
    data = frame()
    data["org/model-a"] = data["org/model-a"].astype(object)
    data.loc[3, "org/model-a"] = value
    path = tmp_path / f"logs{suffix}"
    if suffix == ".csv":
        write_frame(data, path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in data.to_dict("records")))  # json writes Infinity
    with pytest.raises(ValueError, match=rf"logs{suffix}: score column 'org/model-a', row 3: {shown} is outside \[0, 1\]"):
        load_logs([path])


# --- 8: score columns without cost columns, duplicate column names -------------------------------------
def test_score_column_without_cost_column_warns_naming_it(tmp_path):
    data = frame().drop(columns=["model-c|total_cost"])
    data["latency"] = 3.5  # numbers outside [0, 1]: not scores, no warning for it
    with pytest.warns(RoutingLogWarning, match=r"column\(s\) \['model-c'\] hold scores .* no cost column "
                                               r"\['model-c\|total_cost'\]") as record:
        log = load_logs([write_frame(data, tmp_path / "logs.csv")])
    assert log.models == ["model-b", "org/model-a"]
    assert not any("latency" in str(w.message) for w in record)


def test_no_warning_when_every_score_column_has_its_cost(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RoutingLogWarning)
        assert load_logs([write_frame(frame(), tmp_path / "logs.csv")]).models == RB_MODELS


@pytest.mark.parametrize("name, text, match", [
    ("logs.csv", "prompt,a,a,b,a|total_cost,a|total_cost,b|total_cost\nq1,1,0,1,0.1,0.2,0.3\nq2,0,0,1,0.1,0.2,0.3\n",
     r"logs\.csv: duplicate column name\(s\) \['a', 'a\|total_cost'\]"),
    ("logs.jsonl", '{"prompt": "q", "a": 1, "b": 1, "a|total_cost": 0.1, "b|total_cost": 0.2}\n'
                   '{"prompt": "r", "a": 1, "a": 0, "b": 1, "a|total_cost": 0.1, "b|total_cost": 0.2}\n',
     r"logs\.jsonl:2: duplicate key\(s\) \['a'\]"),
])
def test_duplicate_columns_or_keys_are_an_error_naming_them(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_logs([path])


def test_duplicate_columns_in_a_pickle_are_an_error(tmp_path):
    data = frame()
    data = pd.concat([data, data[["model-c"]]], axis=1)
    with pytest.raises(ValueError, match=r"logs\.pkl: duplicate column name\(s\) \['model-c'\]"):
        load_logs([write_frame(data, tmp_path / "logs.pkl")])


# --- 9: one prompt in several declared splits --------------------------------------------------------
def test_prompt_copied_from_train_into_test_warns_with_the_count(tmp_path):
    data = frame(6, split=["train", "train", "train", "test", "test", "test"])
    data.loc[3, "prompt"] = data.loc[0, "prompt"]  # different ids, same prompt
    data.loc[4, "prompt"] = data.loc[1, "prompt"]
    with pytest.warns(RoutingLogWarning, match=r"2 prompt\(s\) appear in more than one split \(4 rows; .*Keep one row "
                                               r"per prompt, or give every copy of a prompt the same split"):
        log = load_logs([write_frame(data, tmp_path / "logs.csv")])
    assert len(log) == 6  # splits are honoured as declared


def test_distinct_prompts_across_splits_do_not_warn(tmp_path):
    data = frame(6, split=["train", "train", "train", "test", "test", "val"])
    data.loc[1, "prompt"] = data.loc[0, "prompt"]  # a repeat inside train only
    with warnings.catch_warnings():
        warnings.simplefilter("error", RoutingLogWarning)
        load_logs([write_frame(data, tmp_path / "logs.csv")])


# --- 11: a torn last JSONL line -----------------------------------------------------------------------------
def jsonl_lines(n: int = 4) -> list[str]:
    return [json.dumps(r) for r in frame(n).to_dict("records")]


def test_torn_last_jsonl_line_is_skipped_with_a_warning(tmp_path):
    lines = jsonl_lines()
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])
    with pytest.warns(RoutingLogWarning, match=r"logs\.jsonl:4: skipped the last line: it has no newline"):
        log = load_logs([path])
    assert log.sample_ids == ["q0", "q1", "q2"]


def test_torn_last_line_inside_a_utf8_character_is_skipped(tmp_path):
    lines = jsonl_lines()
    path = tmp_path / "logs.jsonl"
    path.write_bytes(("\n".join(lines[:3]) + "\n").encode() + lines[3][:40].encode() + "é".encode()[:1])
    with pytest.warns(RoutingLogWarning, match=r"logs\.jsonl:4: skipped the last line"):
        assert len(load_logs([path])) == 3


def test_complete_last_line_without_newline_loads(tmp_path):
    path = tmp_path / "logs.jsonl"
    path.write_text("\n".join(jsonl_lines()))
    assert len(load_quietly(path)) == 4


@pytest.mark.parametrize(("text", "line"), [
    ("{0}\n{1}\n{{broken\n{2}\n", 3),  # a bad line in the middle
    ("{0}\n{1}\n{{broken\n", 3),  # a bad last line that ends with its newline: not torn
])
def test_other_invalid_jsonl_lines_are_errors_naming_file_and_line(tmp_path, text, line):
    path = tmp_path / "logs.jsonl"
    path.write_text(text.format(*jsonl_lines(3)))
    with pytest.raises(ValueError, match=rf"logs\.jsonl:{line}: invalid JSON"):
        load_logs([path])


# --- 12: non-UTF-8 text ------------------------------------------------------------------------------------
def test_latin1_csv_names_file_line_and_utf8(tmp_path):
    path = tmp_path / "logs.csv"
    text = "prompt,a,b,a|total_cost,b|total_cost\nq1,1,0,0.1,0.2\ncaf\u00e9?,1,1,0.1,0.2\n"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=rf"{path}:3: the file is not UTF-8 text: byte 0xe9 .*save it as UTF-8"):
        load_logs([path])


def test_utf16_csv_is_named_as_such(tmp_path):
    path = tmp_path / "logs.csv"
    path.write_bytes("prompt,a,b,a|total_cost,b|total_cost\nq1,1,0,0.1,0.2\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"logs\.csv:1: the file is not UTF-8 text \(it starts with a UTF-16 byte-order mark\)"):
        load_logs([path])


def test_latin1_jsonl_names_file_and_line(tmp_path):
    lines = jsonl_lines(3)
    path = tmp_path / "logs.jsonl"
    path.write_bytes((lines[0] + "\n").encode() + (lines[1].replace("question 1", "caf\u00e9") + "\n").encode("latin-1")
                     + (lines[2] + "\n").encode())
    with pytest.raises(ValueError, match=rf"{path}:2: the file is not UTF-8 text: byte 0xe9 .*save it as UTF-8"):
        load_logs([path])


def test_utf8_with_byte_order_mark_loads(tmp_path):
    path = tmp_path / "logs.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + ("\n".join(jsonl_lines()) + "\n").encode())
    assert load_quietly(path).sample_ids == ["q0", "q1", "q2", "q3"]
