"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_path() -> Path:
    """``$PROTEUS_SHARED_DATA`` or ``../shared/data`` beside the checkout."""
    return Path(os.environ.get("PROTEUS_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_path()
    if not path.is_dir():
        pytest.skip(f"shared routing logs not found at {path} (set PROTEUS_SHARED_DATA)")
    return path


ROUTERBENCH_MODELS = [
    "WizardLM/WizardLM-13B-V1.2", "claude-instant-v1", "claude-v1", "claude-v2", "gpt-3.5-turbo-1106",
    "gpt-4-1106-preview", "meta/code-llama-instruct-34b-chat", "meta/llama-2-70b-chat",
    "mistralai/mistral-7b-chat", "mistralai/mixtral-8x7b-chat", "zero-one-ai/Yi-34B-Chat",
]


def random_artifact(models, *, seed: int = 0, **manifest_overrides):
    """A randomly initialised but valid (model, manifest) pair, for tests that need weights, not skill."""
    import torch

    from litellm_proteus.artifact import EncoderSpec, Manifest
    from litellm_proteus.costs import CostNormalizer
    from litellm_proteus.model import ModelConfig, ProteusModel

    models = list(models)
    torch.manual_seed(seed)
    config = ModelConfig(embed_dim=384, n_models=len(models))
    norm = CostNormalizer(space="log10_usd_per_call")
    norm.update([1e-5, 1e-2])
    fields = dict(
        models=models,
        encoder=EncoderSpec(name="all-MiniLM-L6-v2", embed_dim=384),
        architecture=config,
        tau_range=(0.7, 0.9),
        tau_train_range=(0.65, 0.95),
        cost_normalization=norm.to_dict(),
        avg_input_tokens={m: 400.0 for m in models},
        avg_output_tokens={m: 100.0 for m in models},
    )
    fields.update(manifest_overrides)
    return ProteusModel(config).eval(), Manifest(**fields)


@pytest.fixture(scope="session")
def build_random_artifact():
    """``random_artifact`` as a fixture (test modules cannot import conftest under importlib mode)."""
    return random_artifact


@pytest.fixture
def make_artifact(tmp_path):
    """Factory: ``random_artifact`` saved to a directory."""

    def _make(models=None, *, seed: int = 0, directory: Path | None = None, **manifest_overrides) -> Path:
        from litellm_proteus.artifact import save_artifact

        model, manifest = random_artifact(models or ROUTERBENCH_MODELS, seed=seed, **manifest_overrides)
        return save_artifact(directory or (tmp_path / f"artifact-{seed}"), model, manifest)

    return _make


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A randomly initialised one-layer BERT (16-d) with the default encoder's tokenizer, saved as a
    local folder: a real transformers encoder that loads and runs in well under a second."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from litellm_proteus.encoder import DEFAULT_ENCODER, resolve_encoder_path

    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(resolve_encoder_path(DEFAULT_ENCODER), local_files_only=True)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
