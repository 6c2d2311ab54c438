from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pandas as pd
import pytest

from proteus_train.data import RoutingLogWarning, load_logs
from proteus_train.data.common import prompt_text

from .conftest import RB_MODELS, routerbench_frame, write_frame


def _rows(log, sample_id):
    return [i for i, s in enumerate(log.sample_ids) if s == sample_id]


def test_directory_train_test_with_defects(routerbench_dir):
    with pytest.warns(RoutingLogWarning) as record:
        log = load_logs([routerbench_dir])
    message = str(record[0].message)
    assert "9 rows -> 6" in message
    assert "dropped 1 rows with no observed score" in message
    assert "4 rows share 2 duplicated sample_ids" in message and "1 ids appear in more than one split" in message
    # model set = columns X with X|total_cost, in score-column order; other columns ignored
    assert log.models == RB_MODELS
    assert sorted(log.sample_ids) == ["q1", "q2", "q4", "q5", "q6", "q7"]
    # id in train and test: one row, in test (no leakage), with the most complete copy's content
    (i5,) = _rows(log, "q5")
    assert log.split[i5] == "test" and log.prompts[i5] == "Leaky\n\nLeaky"
    assert log.scores[i5].tolist() == [1.0, 1.0, 0.0]
    # duplicate inside one split: the copy with more observed scores survives
    (i4,) = _rows(log, "q4")
    assert np.isfinite(log.scores[i4]).all() and log.task[i4] == "u"
    # partial NaN kept
    (i2,) = _rows(log, "q2")
    assert np.isnan(log.scores[i2, 1]) and log.prompts[i2] == "Turn one\n\nTurn two"
    # list strings -> text; malformed kept raw
    (i6,) = _rows(log, "q6")
    assert log.prompts[i6] == "['broken list"
    assert log.split_method == "files" and sorted(set(log.split)) == ["test", "train"]
    assert log.source == "routerbench"


def test_token_estimates(routerbench_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RoutingLogWarning)
        log = load_logs([routerbench_dir])
    (i1,) = _rows(log, "q1")
    # "['A']" -> "A" -> 1 token; "['Bbbbbbbb']" -> 8 chars -> 2 tokens; missing response -> NaN
    assert log.output_tokens[i1, 0] == 1 and log.output_tokens[i1, 1] == 2 and np.isnan(log.output_tokens[i1, 2])
    assert log.input_tokens[i1] == np.ceil(len("Question one?") / 4)


@pytest.mark.parametrize("suffix", [".csv", ".pkl", ".parquet", ".jsonl"])
def test_file_formats_agree(tmp_path, suffix):
    frame = routerbench_frame([
        {"id": "a", "prompt": "['Hi', 'there']", "scores": [1.0, np.nan, 0.0], "costs": [1e-5, 2e-5, 3e-5]},
        {"id": "b", "prompt": "plain", "scores": [0.5, 1.0, 0.0]},
    ])
    reference = load_logs([write_frame(frame, tmp_path / "ref.csv")])
    path = write_frame(frame, tmp_path / f"one{suffix}")
    log = load_logs([path])
    assert log.content_hash() == reference.content_hash()
    assert log.sample_ids == ["a", "b"] and log.prompts[0] == "Hi\n\nthere"
    assert log.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert log.split is None and log.task == ["t", "t"]


def test_split_column_and_id_types(tmp_path):
    frame = routerbench_frame([{"id": "007", "prompt": "x", "scores": [1, 0, 1]}, {"id": "8", "prompt": "y", "scores": [0, 0, 1]}])
    frame["split"] = ["validation", "TEST"]
    log = load_logs([write_frame(frame, tmp_path / "logs.csv")])
    assert list(log.split) == ["val", "test"] and log.split_method == "column"
    assert log.sample_ids == ["007", "8"]  # ids stay text


def test_bad_split_value_names_column(tmp_path):
    frame = routerbench_frame([{"id": "a", "prompt": "x", "scores": [1, 0, 1]}])
    frame["split"] = ["holdout"]
    with pytest.raises(ValueError, match=r"column 'split'.*holdout.*allowed"):
        load_logs([write_frame(frame, tmp_path / "logs.csv")])


def test_missing_score_column_is_named(tmp_path):
    frame = routerbench_frame([{"id": "a", "prompt": "x", "scores": [1, 0, 1]}]).drop(columns=["model-c"])
    with pytest.raises(ValueError, match=r"column 'model-c'.*'model-c\|total_cost' exists"):
        load_logs([write_frame(frame, tmp_path / "logs.csv")])


def test_missing_prompt_column_is_named(tmp_path):
    frame = routerbench_frame([{"id": "a", "prompt": "x", "scores": [1, 0, 1]}]).drop(columns=["prompt"])
    with pytest.raises(ValueError, match=r"logs.csv: missing column 'prompt' for format 'routerbench'.*accepted formats"):
        load_logs([write_frame(frame, tmp_path / "logs.csv")])


def test_scores_outside_unit_interval(tmp_path):
    frame = routerbench_frame([{"id": "a", "prompt": "x", "scores": [1, 7, 1]}])
    with pytest.raises(ValueError, match=r"score column 'org/model-a', row 0: 7 is outside \[0, 1\]"):
        load_logs([write_frame(frame, tmp_path / "logs.csv")])


def test_extra_numeric_column_is_not_a_model(tmp_path):
    frame = routerbench_frame([{"id": "a", "prompt": "x", "scores": [1, 0, 1]}])
    frame["latency"] = [3.5]
    assert load_logs([write_frame(frame, tmp_path / "logs.csv")]).models == RB_MODELS


@pytest.mark.parametrize(("cell", "text"), [
    ("['a', 'b']", "a\n\nb"),
    ('["json", "list"]', "json\n\nlist"),
    ("[not python]", "[not python]"),
    ("no list", "no list"),
    (["x", "y"], "x\n\ny"),
    ([{"role": "user", "content": "hello"}], "hello"),
    (np.nan, ""),
])
def test_prompt_text(cell, text):
    assert prompt_text(cell) == text


def test_a_logged_conversation_gives_the_text_the_proxy_routes_on():
    """Same text -> same embedding and same mixing draw offline (proteus eval) and in the proxy."""
    from litellm_proteus.prompts import request_text

    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is"}, {"type": "image_url", "image_url": {}}]},
        {"role": "assistant", "content": "4"},
    ]
    assert prompt_text(messages) == prompt_text(repr(messages)) == request_text(messages) == "be brief\n\nwhat is\n\n4"


def test_jsonl_frame_roundtrip_keeps_text_ids(tmp_path):
    frame = pd.DataFrame({"sample_id": ["001"], "prompt": ["p"], "m": [1.0], "m|total_cost": [0.1], "n": [0.0], "n|total_cost": [0.2]})
    log = load_logs([write_frame(frame, tmp_path / "x.jsonl")])
    assert log.sample_ids == ["001"] and log.models == ["m", "n"]
    np.testing.assert_allclose(log.costs, [[0.1, 0.2]])
