"""Benchmark prompts: real RouterBench prompts (or the bundled ones) cut to exact token lengths."""

from __future__ import annotations

import json

import pytest

from proteus_train.bench.prompts import BUNDLED_PROMPTS, _turns_text, cut_prompts, load_prompts


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from litellm_proteus.encoder import DEFAULT_ENCODER, resolve_encoder_path

    return AutoTokenizer.from_pretrained(resolve_encoder_path(DEFAULT_ENCODER), local_files_only=True)


def offsets_of(tokenizer):
    return lambda text: tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]


def n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_bundled_prompts_are_used_without_data(tmp_path):
    prompts, source = load_prompts(None)
    assert source.startswith("bundled")
    bundled = json.loads(BUNDLED_PROMPTS.read_text())["prompts"]
    assert len(prompts) == len(set(bundled)) >= 150
    empty_dir_prompts, empty_source = load_prompts(tmp_path)  # a data dir without routerbench CSVs
    assert empty_source.startswith("bundled") and sorted(empty_dir_prompts) == sorted(prompts)


def test_load_order_is_seeded():
    assert load_prompts(None, seed=1)[0] == load_prompts(None, seed=1)[0]
    assert load_prompts(None, seed=1)[0] != load_prompts(None, seed=2)[0]


def test_routerbench_turns_are_joined():
    assert _turns_text("['first turn', 'second turn']") == "first turn\nsecond turn"
    assert _turns_text("[not a python list") == "[not a python list"
    assert _turns_text("plain prompt") == "plain prompt"


@pytest.mark.parametrize("length", [32, 128, 512])
def test_cut_to_token_length_from_the_tail(tokenizer, length):
    prompts, _ = load_prompts(None)
    cut = cut_prompts(prompts, offsets_of(tokenizer), length, 20)
    assert len(cut) == 20 and len(set(cut)) == 20
    for text in cut:
        assert abs(n_tokens(tokenizer, text) - length) <= 2  # a mid-word cut may re-tokenise by a token
    # a short prompt is joined with the following ones; the cut keeps the end of the joined text
    assert any(text.endswith(p) for text in cut for p in prompts)


def test_cut_repeats_when_the_pool_is_tiny(tokenizer):
    cut = cut_prompts(["one short prompt about bread", "another about tea"], offsets_of(tokenizer), 4, 5)
    assert len(cut) == 5 and all(n_tokens(tokenizer, t) == 4 for t in cut)


def test_cut_rejects_bad_input(tokenizer):
    with pytest.raises(ValueError, match="n_tokens and count"):
        cut_prompts(["x"], offsets_of(tokenizer), 0, 3)
    with pytest.raises(ValueError, match="fewer than 64 tokens"):
        cut_prompts(["tiny"], offsets_of(tokenizer), 64, 3)


@pytest.mark.shared_data
def test_real_routerbench_prompts(shared_data, tokenizer):
    prompts, source = load_prompts(shared_data)
    assert source.startswith("routerbench") and len(prompts) > 3000
    assert not any(p.startswith("['") for p in prompts[:50])  # list-of-turns strings were parsed
    cut = cut_prompts(prompts, offsets_of(tokenizer), 128, 16)
    assert all(abs(n_tokens(tokenizer, t) - 128) <= 2 for t in cut)
