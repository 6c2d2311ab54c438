"""Synthetic routing data for the evaluation tests: K models whose accuracy and price rise together
and whose outcomes depend on a query difficulty readable from the embedding (so predictors can learn)."""

from __future__ import annotations

import numpy as np
import pytest

from proteus_train.evaluation.baselines import FitContext, Split

SYNTH_MODELS = ["tiny", "small", "large", "huge"]
SYNTH_PRICES = np.array([1e-4, 5e-4, 2e-3, 1e-2])  # USD per call
SYNTH_SKILL = np.array([-0.5, 0.5, 1.5, 2.5])


def synthetic(n: int, seed: int = 0, dim: int = 384) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(embeddings [n, dim], 0/1 scores [n, K], costs [n, K])."""
    rng = np.random.default_rng(seed)
    direction = np.random.default_rng(12345).normal(size=dim)
    direction /= np.linalg.norm(direction)
    difficulty = rng.uniform(-2, 2, size=n)
    noise = rng.normal(size=(n, dim))
    noise -= np.outer(noise @ direction, direction)
    emb = 3.0 * np.outer(difficulty, direction) + noise * 0.3
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    p = 1 / (1 + np.exp(-(SYNTH_SKILL[None, :] - 2.0 * difficulty[:, None])))
    scores = (rng.random((n, len(SYNTH_MODELS))) < p).astype(float)
    costs = SYNTH_PRICES[None, :] * rng.uniform(0.5, 1.5, size=(n, len(SYNTH_MODELS)))
    return emb.astype(np.float32), scores, costs


def synthetic_prompts(scores: np.ndarray) -> np.ndarray:
    """Prompt texts for routers that read them: the rows only the dearest model gets right are
    written as multi-step code questions (LiteLLM's complexity scorer puts them in a higher tier)."""
    hard = (scores[:, -1] == 1) & (scores[:, :-1] == 0).all(axis=1)
    return np.array([
        f"Write a python function and a class for task {i}; explain step by step, first parse then prove it."
        if hard[i] else f"What is {i} plus {i + 1}?"
        for i in range(len(scores))
    ], dtype=object)


@pytest.fixture(scope="session")
def synth_splits() -> tuple[Split, Split, Split]:
    emb, scores, costs = synthetic(420, seed=1)
    prompts = synthetic_prompts(scores)
    parts = [slice(0, 240), slice(240, 320), slice(320, 420)]
    return tuple(Split(emb[s], scores[s], costs[s], prompts=prompts[s]) for s in parts)  # type: ignore[return-value]


@pytest.fixture(scope="session")
def synth_ctx(synth_splits) -> FitContext:
    train, val, _ = synth_splits
    return FitContext(train, val, seed=0, margin=0.0)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """The baselines' small MLPs run fastest on one thread; on a busy 2-core machine two threads
    thrash (``proteus eval --threads`` defaults to 1 for the same reason).  Restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


TOPICS = ["arithmetic", "geography", "history", "chemistry", "poetry", "algebra", "biology", "law"]
TEMPLATES = [
    "What is {a} plus {b}? Answer with a number.",
    "Name the capital city of country number {a} in the {topic} quiz.",
    "Explain in two sentences why {topic} question {a} has the answer it has.",
    "Prove rigorously that the {topic} conjecture {a} holds for every n greater than {b}, citing each lemma.",
]


def write_synthetic_routerbench(path, n: int = 200, seed: int = 0):
    """A RouterBench-schema CSV (prompt, sample_id, eval_name, <model>, <model>|total_cost) whose prompt
    wording follows the query difficulty, so sentence embeddings carry the routing signal."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    _, scores, costs = synthetic(n, seed=seed, dim=8)
    # re-derive a difficulty per row from the outcomes' pattern: fewer models right = harder template
    hardness = np.clip(len(SYNTH_MODELS) - scores.sum(axis=1), 0, len(TEMPLATES) - 1).astype(int)
    rows = []
    for i in range(n):
        topic = TOPICS[int(rng.integers(len(TOPICS)))]
        prompt = TEMPLATES[hardness[i]].format(a=int(rng.integers(1, 999)), b=int(rng.integers(1, 99)), topic=topic)
        row = {"sample_id": f"s{i}", "prompt": prompt, "eval_name": topic}
        row.update({m: scores[i, k] for k, m in enumerate(SYNTH_MODELS)})
        row.update({f"{m}|total_cost": costs[i, k] for k, m in enumerate(SYNTH_MODELS)})
        rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path
