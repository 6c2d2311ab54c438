"""``proteus distill-static``: a transformer turned into a token table, and that table as an encoder."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from litellm_proteus.encoder import STATIC_TABLE_FILE, open_encoder
from proteus_train import distill
from proteus_train.distill import INFO_FILE, cached_static_encoder, distill_static


@pytest.fixture(scope="module")
def static_dir(tiny_bert, tmp_path_factory):
    return distill_static(str(tiny_bert), tmp_path_factory.mktemp("static") / "tiny", device="cpu", batch_size=4096)


def test_each_row_is_the_tokens_hidden_state_between_the_special_tokens(tiny_bert, static_dir):
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    table = load_file(str(static_dir / STATIC_TABLE_FILE))["embeddings"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    model = AutoModel.from_pretrained(tiny_bert).eval()
    assert table.shape == (len(tokenizer), 16) and table.dtype == torch.float16
    ids = tokenizer("routing accuracy", add_special_tokens=False)["input_ids"]
    for token in ids + [0, len(tokenizer) - 1]:
        with torch.inference_mode():
            hidden = model(input_ids=torch.tensor([[tokenizer.cls_token_id, token, tokenizer.sep_token_id]])).last_hidden_state
        np.testing.assert_allclose(table[token].float().numpy(), hidden[0, 1].numpy(), rtol=2e-3, atol=2e-3)
    info = json.loads((static_dir / INFO_FILE).read_text())
    assert info["base"] == str(tiny_bert) and info["tokens"] == len(tokenizer) and info["dims"] == 16


def test_a_static_folder_encodes_prompts_as_the_mean_of_their_kept_tokens(static_dir, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    table = load_file(str(static_dir / STATIC_TABLE_FILE))["embeddings"].float().numpy()
    encoder = open_encoder(str(static_dir), device="cpu", max_tokens=16, truncation="tail", precision="bf16")
    assert (encoder.backend, encoder.precision, encoder.embed_dim) == ("static", "fp32", 16)
    assert not hasattr(encoder, "encode_tensor")  # a table is not fine-tuned
    long_text = "filler words " * 40 + "what is the capital of France?"
    reference_tokenizer = AutoTokenizer.from_pretrained(str(static_dir))  # the trainer's tokenizer: same ids
    kept = reference_tokenizer(long_text, add_special_tokens=False)["input_ids"][-14:]  # 16 minus [CLS], [SEP]
    expected = table[kept].mean(0)
    vecs = encoder.encode([long_text, "", "short one"])
    np.testing.assert_allclose(vecs[0], expected / np.linalg.norm(expected), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)  # the empty prompt too
    np.testing.assert_allclose(encoder.encode(["short one"])[0], vecs[2], rtol=1e-6, atol=1e-7)  # batch-independent
    assert "static=" in encoder.fingerprint
    copy = tmp_path / "copy"  # an artifact's bundled copy of the same table shares the embedding cache
    distill.copy_static_encoder(static_dir, copy)
    assert open_encoder(str(copy), device="cpu", max_tokens=16).fingerprint == encoder.fingerprint


def test_static_folders_refuse_transformer_only_options_by_name(static_dir, tiny_bert):
    with pytest.raises(ValueError, match="backend must be 'auto', 'hf' or 'static'; got 'fused'"):
        open_encoder(str(static_dir), device="cpu", backend="fused")
    with pytest.raises(ValueError, match="quantize must be None; got 'int8'"):
        open_encoder(str(static_dir), device="cpu", quantize="int8")
    with pytest.raises(ValueError, match="precision must be one of"):
        open_encoder(str(static_dir), device="cpu", precision="fp8")
    with pytest.raises(ValueError, match="backend 'static' needs a static encoder folder"):
        open_encoder(str(tiny_bert), device="cpu", backend="static")
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        distill_static(str(tiny_bert), static_dir.parent / "never", batch_size=0)


def test_the_cache_distils_once_per_base_encoder(tiny_bert, tmp_path, monkeypatch):
    first = cached_static_encoder(str(tiny_bert), tmp_path, device="cpu")
    assert (first / STATIC_TABLE_FILE).is_file() and not list(tmp_path.glob("static/*.partial-*"))
    monkeypatch.setattr(distill, "distill_static", lambda *a, **k: pytest.fail("distilled again"))
    assert cached_static_encoder(str(tiny_bert), tmp_path, device="cpu") == first
    assert cached_static_encoder(str(first), tmp_path) == first  # a static folder is used as it is
    monkeypatch.undo()
    scratch = cached_static_encoder(str(tiny_bert), None, device="cpu")  # no cache: a temp folder, removed at exit
    assert (scratch / STATIC_TABLE_FILE).is_file()
    assert scratch.parent == Path(tempfile.gettempdir()) and scratch.name.startswith("proteus-static-")


def test_cli_writes_a_folder_usable_as_an_encoder(tiny_bert, tmp_path):
    out = tmp_path / "static"
    done = subprocess.run(
        [sys.executable, "-m", "litellm_proteus.cli", "distill-static", "--encoder", str(tiny_bert), "--out", str(out),
         "--device", "cpu", "--quiet"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["out"] == str(out) and summary["dims"] == 16
    assert open_encoder(str(out), device="cpu").encode(["hello"]).shape == (1, 16)


def test_cli_never_writes_into_a_folder_that_holds_files(tiny_bert, tmp_path):
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "manifest.json").write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "litellm_proteus.cli", "distill-static", "--encoder", str(tiny_bert), "--out", str(artifact),
         "--device", "cpu", "--quiet"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2 and f"error: --out {artifact} is not empty" in done.stderr, done.stderr[-2000:]
    assert sorted(p.name for p in artifact.iterdir()) == ["manifest.json"]


def test_an_encoder_that_is_already_static_is_an_error_not_a_traceback(tmp_path, capsys):
    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
    from litellm_proteus.cli import main

    assert main(["distill-static", "--encoder", str(DEFAULT_ARTIFACT_DIR / "encoder"), "--out", str(tmp_path / "d"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is already static" in err and "Traceback" not in err and not (tmp_path / "d").exists()
