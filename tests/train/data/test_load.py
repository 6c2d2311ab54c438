from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pandas as pd
import pytest

from proteus_train.data import RoutingLogWarning, detect_format, load_logs

from .conftest import RB_MODELS, routerbench_frame, sprout_frame, write_frame


def quiet_load(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RoutingLogWarning)
        return load_logs(*args, **kwargs)


def rb(ids, scores=(1.0, 0.0, 1.0)):
    return routerbench_frame([{"id": i, "prompt": f"['{i}']", "scores": list(scores)} for i in ids])


def test_detection():
    assert detect_format(rb(["a"])) == "routerbench"
    assert detect_format(sprout_frame("train")) == "sprout"
    assert detect_format(pd.DataFrame({"prompt": ["q"], "m": [True]})) == "routellm"
    assert detect_format(pd.DataFrame({"prompt": ["q"], "m": [1.0]})) is None


def test_unknown_format_value(tmp_path):
    path = write_frame(rb(["a"]), tmp_path / "a.csv")
    with pytest.raises(ValueError, match=r"format='csv' is not supported; accepted: auto, routerbench, sprout, routellm"):
        load_logs([path], format="csv")


def test_explicit_format_mismatch_names_file_and_column(tmp_path):
    path = write_frame(rb(["a"]), tmp_path / "a.csv")
    with pytest.raises(ValueError, match=r"a.csv: no model columns for format 'sprout'.*'<model>\|score'"):
        load_logs([path], format="sprout")
    assert load_logs([path], format="routerbench").models == RB_MODELS


def test_a_folder_with_no_file_of_the_asked_format_names_what_it_holds(tmp_path):
    write_frame(rb(["a"]), tmp_path / "a.csv")
    write_frame(rb(["b"]), tmp_path / "b.csv")
    with pytest.raises(ValueError, match=r"no decision-log files in .*: its 2 file\(s\) are routerbench logs; "
                                         r"pass --format auto"):
        quiet_load([tmp_path], format="decision-log")

def test_several_paths_concatenate_and_dedupe_across_them(tmp_path):
    train = write_frame(rb(["a", "b"]), tmp_path / "x" / "set_train.csv")
    frame = rb(["b", "c"], scores=(0.0, 0.0, 0.0))
    test = write_frame(frame[frame.columns[::-1]], tmp_path / "y" / "set_test.parquet")  # other column order
    with pytest.warns(RoutingLogWarning, match=r"1 ids appear in more than one split"):
        log = load_logs([str(train), test.parent])
    assert log.models == RB_MODELS and sorted(log.sample_ids) == ["a", "b", "c"]
    i = log.sample_ids.index("b")
    # equally complete copies: content from the first in path order, placed in the held-out split
    assert log.split[i] == "test" and log.scores[i].tolist() != [0.0, 0.0, 0.0]
    assert log.sample_ids.count("b") == 1
    assert log.paths == sorted([train.resolve().as_posix(), test.resolve().as_posix()])
    assert log.sha256 == hashlib.sha256(b"".join(open(p, "rb").read() for p in log.paths)).hexdigest()


def test_models_must_agree(tmp_path):
    a = write_frame(rb(["a"]), tmp_path / "a.csv")
    b = write_frame(rb(["b"]).drop(columns=["model-c", "model-c|total_cost"]), tmp_path / "b.csv")
    with pytest.raises(ValueError, match=r"models differ between inputs.*only in the first: \['model-c'\]"):
        load_logs([a, b])


def test_partial_split_labelling_is_an_error(tmp_path):
    a = write_frame(rb(["a"]), tmp_path / "a_train.csv")
    b = write_frame(rb(["b"]), tmp_path / "extra.csv")
    with pytest.raises(ValueError, match=r"split is known for some inputs but not for .*extra.csv"):
        load_logs([a, b])


def test_directory_skips_foreign_files_but_named_file_must_load(tmp_path):
    write_frame(rb(["a"]), tmp_path / "d" / "a.csv")
    other = tmp_path / "d" / "notes.jsonl"
    other.write_text('{"question": "q"}\n')
    with pytest.warns(RoutingLogWarning, match=r"skipped 1 file\(s\).*notes.jsonl"):
        assert len(load_logs([tmp_path / "d"])) == 1
    with pytest.raises(ValueError, match=r"notes.jsonl: cannot tell the routing-log format"):
        load_logs([other])


def test_path_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        load_logs([tmp_path / "nope"])
    bad = tmp_path / "x.txt"
    bad.write_text("x")
    with pytest.raises(ValueError, match=r"unsupported file type '.txt'"):
        load_logs([bad])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no routing logs found"):
        load_logs([tmp_path / "empty"])


def test_hash_tracks_file_bytes(tmp_path):
    path = write_frame(rb(["a"]), tmp_path / "a.csv")
    first = quiet_load([path]).sha256
    write_frame(rb(["a"], scores=(0.0, 0.0, 1.0)), path)
    assert quiet_load([path]).sha256 != first
    assert quiet_load([path]).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert isinstance(quiet_load(path).scores, np.ndarray)  # a single path is accepted too
