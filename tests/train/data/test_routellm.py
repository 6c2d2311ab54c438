from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from proteus_train.data import RoutingLogWarning, load_logs
from proteus_train.data.routellm import ANSWER_ONLY_OUTPUT_TOKENS

MIX, GPT4 = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"


@pytest.fixture
def evals_dir(tmp_path):
    root = tmp_path / "routellm-evals"
    (root / "mmlu" / "responses").mkdir(parents=True)
    (root / "gsm8k").mkdir()
    pd.DataFrame({"prompt": ["Q1\nA. x\nAnswer:", "Q2 (contaminated)\nAnswer:"], MIX: [True, False], GPT4: [True, True]}) \
        .to_csv(root / "mmlu" / "responses" / "mmlu_anatomy.csv", index=False)
    pd.DataFrame({"prompt": ["Q3\nAnswer:"], MIX: [False], GPT4: [True]}) \
        .to_csv(root / "mmlu" / "responses" / "mmlu_virology.csv", index=False)
    pd.DataFrame({
        "prompt": ["How many eggs?", "Sum 2+2"], MIX: [True, False], GPT4: [True, True],
        f"{MIX}_response": ["x" * 40, "y" * 9], f"{GPT4}_response": ["z" * 8, "w"],
    }).to_csv(root / "gsm8k" / "gsm8k_responses.csv", index=False)
    with (root / "mmlu" / "contaminated_prompts.jsonl").open("w") as f:
        f.write(json.dumps({"train_prompt": "t", "eval_prompt": "Q2 (contaminated)\nAnswer:", "train_idx": "1", "eval_idx": "1"}) + "\n")
    (root / "gsm8k" / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")  # no labels
    return root


def test_loads_mmlu_and_gsm8k(evals_dir):
    with pytest.warns(RoutingLogWarning, match=r"skipped 1 file\(s\).*gsm8k/train.jsonl"):
        log = load_logs([evals_dir])
    assert log.source == "routellm" and log.models == [MIX, GPT4] and len(log) == 5  # contaminated kept by default
    assert log.split is None
    by_prompt = dict(zip(log.prompts, range(len(log))))
    i = by_prompt["Q3\nAnswer:"]
    assert log.task[i] == "mmlu_virology" and log.scores[i].tolist() == [0.0, 1.0]
    n_in = np.ceil(len("Q3\nAnswer:") / 4)
    assert log.input_tokens[i] == n_in and log.output_tokens[i].tolist() == [ANSWER_ONLY_OUTPUT_TOKENS] * 2
    assert log.costs[i, 1] == pytest.approx((n_in * 10 + ANSWER_ONLY_OUTPUT_TOKENS * 30) / 1e6)
    g = by_prompt["How many eggs?"]
    assert log.task[g] == "gsm8k" and log.output_tokens[g].tolist() == [10, 2]
    assert log.costs[g, 0] == pytest.approx((np.ceil(14 / 4) * 0.6 + 10 * 0.6) / 1e6)
    assert log.sample_ids[g] == "gsm8k_responses.csv:0"


def test_skip_contaminated(evals_dir):
    with pytest.warns(RoutingLogWarning) as record:
        log = load_logs([evals_dir / "mmlu" / "responses"], skip_contaminated=True)
    assert "Q2 (contaminated)\nAnswer:" not in log.prompts and len(log) == 2
    assert any("skipped 1 contaminated prompts" in str(w.message) for w in record)
    assert any(p.endswith("mmlu/contaminated_prompts.jsonl") for p in log.paths)  # part of the content hash


def test_zero_one_numbers_are_not_routellm_labels(tmp_path):
    path = tmp_path / "x.csv"
    pd.DataFrame({"prompt": ["q"], "a": [1.0], "b": [0.0]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"x.csv: cannot tell the routing-log format.*pass format= one of auto, routerbench, sprout, routellm"):
        load_logs([path])
    with pytest.raises(ValueError, match=r"no model columns for format 'routellm'"):
        load_logs([path], format="routellm")


def test_missing_price(tmp_path):
    path = tmp_path / "mmlu_x.csv"
    pd.DataFrame({"prompt": ["q"], "my-model": [True], GPT4: [False]}).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"no price for model\(s\) \['my-model'\]"):
        load_logs([path])
    assert load_logs([path], prices={"my-model": (1, 1)}).models == ["my-model", GPT4]


def test_recorded_paths_reproduce_the_log(evals_dir):
    with pytest.warns(RoutingLogWarning):
        log = load_logs([evals_dir / "mmlu"], skip_contaminated=True)
    with pytest.warns(RoutingLogWarning, match="skipped 1 contaminated prompts"):
        again = load_logs(log.paths)  # as the evaluator does with manifest.data.paths
    assert again.content_hash() == log.content_hash() and again.sha256 == log.sha256


@pytest.mark.parametrize("line, message", [
    ('{"train_prompt": "t"}', "field 'eval_prompt' must be the prompt text; got nothing"),
    ('{"eval_prompt": 3}', "field 'eval_prompt' must be the prompt text; got 3"),
    ('["Q2"]', "expected a JSON object with field 'eval_prompt'; got a JSON list"),
    ('{"eval_prompt": "Q2"', "not a JSON record ("),
])
def test_a_bad_contaminated_prompts_line_is_an_error_naming_its_file_line_and_field(evals_dir, line, message):
    listed = evals_dir / "mmlu" / "contaminated_prompts.jsonl"
    listed.write_text(listed.read_text() + "\n" + line + "\n")  # line 3, after a blank one
    with pytest.raises(ValueError) as refused:
        load_logs([evals_dir / "mmlu" / "responses"], skip_contaminated=True)
    assert str(refused.value).startswith(f"{listed}:3: {message}")
