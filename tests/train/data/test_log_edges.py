"""Inputs at the edges of what a log may hold: each loads as the proxy would read it, or ends in an
error naming the file and field, never in a traceback or a silently shortened log."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from litellm_proteus.decision_log import LoggedCandidate, decision_record, feedback_record
from proteus_train.data import RoutingLogWarning, load_logs

from .conftest import routerbench_frame, write_frame


def decisions(n: int = 30) -> list[dict]:
    records = []
    for i in range(n):
        candidates = [LoggedCandidate("d-a", 0, "a", 0.01, 0.7), LoggedCandidate("d-b", 1, "b", 0.001, 0.5)]
        record = decision_record(call_id=f"c{i}", key_hash="k", tier="std", tau_source="key_metadata", state_key="tier:std@0.7",
                                 tau=0.7, tau_requested=None, tau_effective=0.7, delta=0.0, mu=0.5, model_group="g",
                                 candidates=candidates, chosen=i % 2, propensity=1.0, prompt=f"prompt {i}", artifact="x",
                                 log_prompt=True, ts=1_790_000_000.0 + i)
        records += [record, feedback_record(f"c{i}", float(i % 3 == 0), "t", ts=record["ts"] + 1)]
    return records


def write_log(folder, records) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "decisions-20260921T000000Z-1-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_prompt_with_a_lone_surrogate_loads_as_the_proxy_embeds_it(tmp_path):
    records = decisions()
    records[0]["prompt"] = "\ud800 what is 2+2?"  # valid JSON (an escape), not UTF-8: as a client may send it
    write_log(tmp_path / "log", records)
    log = load_logs([tmp_path / "log"])
    assert len(log) == 30 and "\ufffd what is 2+2?" in log.prompts


@pytest.mark.parametrize("field, value, message", [
    ("tau_effective", "high", "field 'tau_effective' must be a finite number or null; got 'high'"),
    ("tau_effective", [0.7], "field 'tau_effective' must be a finite number or null; got '[0.7]'"),
    ("ts", 1.79e18, "field 'ts' must be Unix seconds in [0, 253402300799] (up to 9999-12-31); got 1.79e+18"),
    ("propensity", 10 ** 400, "field 'propensity' must be a number; got '1000000000000000000000000000000000000000'"),
])
def test_a_decision_field_out_of_its_range_is_an_error_naming_line_and_field(tmp_path, field, value, message):
    records = decisions()
    records[0][field] = value
    write_log(tmp_path / "log", records)
    with pytest.raises(ValueError, match="decisions-20260921T000000Z-1-0.jsonl:1: call_id 'c0': " + _escaped(message)):
        load_logs([tmp_path / "log"])


def test_a_feedback_score_past_a_floats_range_is_an_error_naming_the_field(tmp_path):
    records = decisions()
    records[1]["score"] = 10 ** 400
    write_log(tmp_path / "log", records)
    with pytest.raises(ValueError, match=r":2: call_id 'c0': field 'score' must be a number"):
        load_logs([tmp_path / "log"])


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_unreadable_files_are_errors_naming_the_file(tmp_path):
    (tmp_path / "empty.pkl").write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.pkl: not a readable pickle"):
        load_logs([tmp_path / "empty.pkl"])
    (tmp_path / "ragged.csv").write_text("prompt,a,a|total_cost\nq1,1,0.1\nq2,1,0.1,7,8\n")
    with pytest.raises(ValueError, match=r"ragged\.csv: not a well-formed CSV file"):
        load_logs([tmp_path / "ragged.csv"])


def test_a_prompt_nested_past_the_parsers_depth_is_kept_as_written(tmp_path):
    frame = routerbench_frame([{"id": f"q{i}", "prompt": f"question {i}", "scores": [1.0, 0.0, 1.0],
                                "costs": [1e-4, 2e-4, 3e-3]} for i in range(4)])
    deep = "[" * 3000 + "]" * 3000
    frame.loc[0, "prompt"] = deep
    log = load_logs([write_frame(frame, tmp_path / "deep.csv")])
    assert deep in log.prompts


def test_a_cost_column_of_booleans_is_refused_by_name(tmp_path):
    frame = routerbench_frame([{"id": f"q{i}", "prompt": f"question {i}", "scores": [1.0, 0.0, 1.0],
                                "costs": [1e-4, 2e-4, 3e-3]} for i in range(4)])
    column = next(c for c in frame.columns if c.endswith("|total_cost"))
    frame[column] = [True, False, True, True]
    with pytest.raises(ValueError, match=rf"cost column '{_escaped(column)}' holds true/false"):
        load_logs([write_frame(frame, tmp_path / "bools.csv")])


def test_ids_that_restart_in_each_file_are_named_in_the_warning(tmp_path):
    for name in ("a_train.csv", "b_train.csv"):
        frame = routerbench_frame([{"id": str(i), "prompt": f"{name} question {i}", "scores": [1.0, 0.0, 1.0],
                                    "costs": [1e-4, 2e-4, 3e-3]} for i in range(5)])
        write_frame(frame, tmp_path / name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = load_logs([tmp_path])
    said = " ".join(str(w.message) for w in caught if issubclass(w.category, RoutingLogWarning))
    assert len(log) == 5 and "5 of these ids name different prompts in their copies" in said


def test_a_random_split_that_puts_copies_of_a_prompt_on_both_sides_says_so():
    """The val/test rows are carved row by row: a prompt asked more than once may land in train and
    in test, and its test rows then measure a prompt the heads trained on."""
    from proteus_train.data import assign_splits

    rows = [{"id": f"q{i}", "prompt": f"question {i % 20}", "scores": [1.0, 0.0, 1.0], "costs": [1e-4, 2e-4, 3e-3]}
            for i in range(200)]  # 20 prompts, 10 copies each
    log = load_logs_from_frame(routerbench_frame(rows))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assign_splits(log, seed=0)
    said = " ".join(str(w.message) for w in caught if issubclass(w.category, RoutingLogWarning))
    assert "prompt(s) appear in more than one split" in said and "carved by row" in said


def load_logs_from_frame(frame):
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    return load_logs([write_frame(frame, folder / "logs.csv")])
