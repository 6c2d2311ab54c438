"""Writers for routing-log fixtures in the exact on-disk schemas (small, built per test)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

RB_MODELS = ["model-b", "org/model-a", "model-c"]  # file order on purpose not sorted


def routerbench_frame(rows: list[dict]) -> pd.DataFrame:
    """RouterBench wide schema, as in the hub pickle + RouterDC CSVs: leading index, sample_id, prompt
    (list string), eval_name, score columns, |model_response, |total_cost, oracle column.

    Each row: {"id", "prompt", "task", "scores": [..K], "costs": [..K], "responses": [..K]}."""
    records = []
    for i, row in enumerate(rows):
        rec = {"Unnamed: 0": 100 + i, "sample_id": row["id"], "prompt": row["prompt"], "eval_name": row.get("task", "t")}
        rec.update(dict(zip(RB_MODELS, row["scores"])))
        rec.update({f"{m}|model_response": r for m, r in zip(RB_MODELS, row.get("responses", ["['A']"] * 3))})
        rec.update({f"{m}|total_cost": c for m, c in zip(RB_MODELS, row.get("costs", [1e-4, 2e-4, 3e-3]))})
        rec["oracle_model_to_route_to"] = RB_MODELS[0]
        records.append(rec)
    return pd.DataFrame.from_records(records)


SPROUT_MODELS = ["openai-gpt-4o-mini", "wxai-llama-3-2-1b-instruct"]


def sprout_cell(score, n_in, n_out):
    return {"num_input_tokens": n_in, "num_output_tokens": n_out, "response": "text", "score": score}


def sprout_frame(split: str, n: int = 3) -> pd.DataFrame:
    """The hub schema: prompt as chat messages, id, dataset, one struct column per model."""
    rows = []
    for i in range(n):
        rows.append({
            "prompt": [{"role": "user", "content": f"{split} question {i}"}],
            "id": f"{split}-{i}",
            "dataset": "mmlu" if i % 2 else "gsm8k",
            SPROUT_MODELS[0]: sprout_cell(0.9, 100 + i, 50),
            SPROUT_MODELS[1]: None if i == 1 else sprout_cell(0.25, 110 + i, 20),  # model not run on this query
        })
    return pd.DataFrame.from_records(rows)


def write_frame(frame: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".pkl":
        frame.to_pickle(path)
    elif suffix == ".parquet":
        frame.to_parquet(path, index=False)
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        raise AssertionError(suffix)
    return path


@pytest.fixture
def routerbench_dir(tmp_path: Path) -> Path:
    """Train/test CSVs with the defects of the real partial data: NaN cells, an all-NaN row, duplicate
    ids within train and across train/test (where the test copy is the sparser one)."""
    nan = np.nan
    train = [
        {"id": "q1", "prompt": "['Question one?']", "scores": [1.0, 0.0, 1.0], "responses": ["['A']", "['Bbbbbbbb']", None]},
        {"id": "q2", "prompt": "['Turn one', 'Turn two']", "scores": [0.0, nan, 1.0]},  # partial NaN: kept
        {"id": "q3", "prompt": "['All NaN']", "scores": [nan, nan, nan]},  # dropped
        {"id": "q4", "prompt": "plain text prompt", "scores": [1.0, 1.0, 1.0], "task": "u"},
        {"id": "q4", "prompt": "plain text prompt", "scores": [1.0, nan, nan], "task": "u"},  # dup in train: sparser copy dropped
        {"id": "q5", "prompt": "['Leaky', 'Leaky']", "scores": [1.0, 1.0, 0.0]},  # also in test: this (more complete) copy is kept, in test
        {"id": "q6", "prompt": "['broken list", "scores": [0.0, 0.0, 0.0]},  # malformed list string: kept raw
    ]
    test = [
        {"id": "q5", "prompt": "['Leaky']", "scores": [nan, 1.0, nan]},
        {"id": "q7", "prompt": "['Test two']", "scores": [0.0, 1.0, 1.0], "task": "u"},
    ]
    write_frame(routerbench_frame(train), tmp_path / "rb" / "tasks_train.csv")
    write_frame(routerbench_frame(test), tmp_path / "rb" / "tasks_test.csv")
    (tmp_path / "rb" / "PROVENANCE.md").write_text("not a table\n")
    return tmp_path / "rb"
