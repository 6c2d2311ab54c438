"""The random-weight transformer artifact (speed measurements, GPU tests) loads and routes like any artifact."""

from __future__ import annotations

from transformers import BertConfig

from litellm_proteus.encoder_transformer import TransformerEncoder
from litellm_proteus.predictor import Candidate, ProteusPredictor
from proteus_train.bench.random_transformer import write_random_transformer_artifact


def test_the_artifact_routes_on_a_transformer(tmp_path):
    config = BertConfig(hidden_size=384, num_hidden_layers=1, num_attention_heads=6, intermediate_size=64)
    out = write_random_transformer_artifact(config, tmp_path / "tf")
    predictor = ProteusPredictor(out, device="cpu", precision="fp32")
    assert isinstance(predictor.encoder, TransformerEncoder) and predictor.network.runtime == "torch"
    [decision] = predictor.decide(["What is 2 + 2?"], [0.8], [[Candidate(0, 1e-4), Candidate(1, 1e-3)]])
    assert decision.index in (0, 1) and 0.0 <= decision.mu <= 1.0
