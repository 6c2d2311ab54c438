from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from proteus_train.data import load_logs
from proteus_train.data.prices import SPROUT_PRICES

from .conftest import SPROUT_MODELS as MODELS
from .conftest import sprout_frame as nested_frame
from .conftest import write_frame

def flat_frame(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame[["id", "dataset"]].copy()
    out["prompt"] = [p[0]["content"] for p in frame["prompt"]]
    for m in MODELS:
        for field in ("score", "num_input_tokens", "num_output_tokens"):
            out[f"{m}|{field}"] = [np.nan if c is None else c[field] for c in frame[m]]
    return out


@pytest.fixture
def hub_dir(tmp_path):
    for split in ("train", "validation", "test"):
        write_frame(nested_frame(split), tmp_path / "sprout" / "data" / f"{split}-00000-of-00001.parquet")
    return tmp_path / "sprout"


def expected_cost(model, n_in, n_out):
    pin, pout = SPROUT_PRICES[model]
    return (n_in * pin + n_out * pout) / 1e6


def test_hub_parquet_shards(hub_dir):
    log = load_logs([hub_dir])
    assert log.source == "sprout" and log.models == MODELS and len(log) == 9
    assert sorted(set(log.split)) == ["test", "train", "val"] and log.split_method == "files"
    i = log.sample_ids.index("validation-0")
    assert log.split[i] == "val" and log.prompts[i] == "validation question 0" and log.task[i] == "gsm8k"
    assert log.scores[i].tolist() == [0.9, 0.25]
    assert log.costs[i, 0] == pytest.approx(expected_cost(MODELS[0], 100, 50))
    assert log.costs[i, 1] == pytest.approx(expected_cost(MODELS[1], 110, 20))
    assert log.output_tokens[i].tolist() == [50, 20] and log.input_tokens[i] == 105  # mean over models
    j = log.sample_ids.index("test-1")  # model 2 not run: NaN score and cost, row kept
    assert np.isnan(log.scores[j, 1]) and np.isnan(log.costs[j, 1]) and log.input_tokens[j] == 101


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_flattened_matches_nested(tmp_path, suffix):
    nested = load_logs([write_frame(nested_frame("train"), tmp_path / "n" / "sprout_train.parquet")])
    flat = load_logs([write_frame(flat_frame(nested_frame("train")), tmp_path / "f" / f"sprout_train{suffix}")])
    assert flat.content_hash() == nested.content_hash() and flat.task == nested.task
    np.testing.assert_array_equal(flat.output_tokens, nested.output_tokens)


def test_nested_jsonl_and_split_column(tmp_path):
    frame = nested_frame("x")
    frame["split"] = ["train", "validation", "test"]
    log = load_logs([write_frame(frame, tmp_path / "sprout.jsonl")])
    assert list(log.split) == ["train", "val", "test"] and log.split_method == "column"
    assert log.scores[0].tolist() == [0.9, 0.25]


def test_missing_price_names_the_model(tmp_path):
    frame = nested_frame("train").rename(columns={MODELS[1]: "acme-new-model"})
    path = write_frame(frame, tmp_path / "s_train.parquet")
    with pytest.raises(ValueError, match=r"no price for model\(s\) \['acme-new-model'\].*prices="):
        load_logs([path])
    log = load_logs([path], prices={"acme-new-model": {"input": 1.0, "output": 2.0}, MODELS[0]: (0.0, 0.0)})
    assert log.costs[0, 1] == pytest.approx((110 * 1.0 + 20 * 2.0) / 1e6)
    assert log.costs[0, 0] == 0.0  # user table overrides the default


def test_bad_price_entry(tmp_path):
    path = write_frame(nested_frame("train"), tmp_path / "s_train.parquet")
    with pytest.raises(ValueError, match=r"prices\['x'\]"):
        load_logs([path], prices={"x": "cheap"})


def test_flattened_missing_token_column(tmp_path):
    frame = flat_frame(nested_frame("train")).drop(columns=[f"{MODELS[1]}|num_output_tokens"])
    with pytest.raises(ValueError, match=r"missing column 'wxai-llama-3-2-1b-instruct\|num_output_tokens'"):
        load_logs([write_frame(frame, tmp_path / "s.csv")])


def test_struct_without_token_field(tmp_path):
    frame = nested_frame("train")
    frame[MODELS[0]] = [{"score": 1.0} for _ in range(len(frame))]
    with pytest.raises(ValueError, match=r"column 'openai-gpt-4o-mini' has no 'num_input_tokens' field"):
        load_logs([write_frame(frame, tmp_path / "s.jsonl")])


def test_a_negative_token_count_is_refused_naming_the_file_row_and_column(tmp_path):
    nested = nested_frame("train")
    nested.at[2, MODELS[0]] = {**nested.at[2, MODELS[0]], "num_input_tokens": -30}
    path = write_frame(nested, tmp_path / "n" / "s_train.jsonl")
    with pytest.raises(ValueError) as refused:
        load_logs([path])
    assert str(refused.value) == (f"{path}: column {MODELS[0]!r} field 'num_input_tokens', row 2: -30 is not a token count "
                                  "(1 such row(s)); allowed: a number >= 0, or empty where the model was not run")
    flat = flat_frame(nested_frame("train"))
    flat.loc[0, f"{MODELS[1]}|num_output_tokens"] = -1
    path = write_frame(flat, tmp_path / "f" / "s_train.csv")
    with pytest.raises(ValueError, match=rf"s_train.csv: column '{MODELS[1]}\|num_output_tokens', row 0: -1 is not a token count"):
        load_logs([path])
