"""Prompt-token counting with and without LiteLLM (``litellm_proteus/token_count.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

import litellm

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
from litellm_proteus.token_count import choose_counter, count_prompt_tokens, estimate_tokens

TEXT = "Which gas do plants absorb from the air during photosynthesis?"

# A fresh interpreter in which ``import litellm`` raises ImportError (as where it is not installed):
# an engine over the bundled artifact decides one request and reports how it counted the prompt.
WITHOUT_LITELLM = f"""
import json, sys
sys.modules['litellm'] = None
from litellm_proteus.config import ProteusConfig
from litellm_proteus.engine import DecisionEngine, DecisionRequest
from litellm_proteus.predictor import ProteusPredictor
predictor = ProteusPredictor({str(DEFAULT_ARTIFACT_DIR)!r}, device='cpu')
engine = DecisionEngine(predictor.manifest, ProteusConfig(), predictor=predictor)
deployments = [{{'model_name': 'g', 'model_info': {{'id': f'd{{i}}', 'proteus_model': slot}},
                'litellm_params': {{'model': 'openai/' + slot, 'input_cost_per_token': 1e-6 * (i + 1),
                                   'output_cost_per_token': 2e-6 * (i + 1)}}}}
               for i, slot in enumerate(predictor.models)]
scored, problems = engine.score_all(deployments)
text = {TEXT!r}
routed = engine.decide([DecisionRequest(text, [{{'role': 'user', 'content': text}}], 0.8, scored)])
print(json.dumps({{'counter': engine.token_counter_name, 'tokens': routed[0].prompt_tokens,
                  'encoder_tokens': len(predictor.encoder.content_ids([text])[0]), 'problems': problems}}))
"""


def test_litellm_counts_when_importable():
    counter, name = choose_counter(encoder=None)
    assert name == "litellm" and counter is count_prompt_tokens
    assert counter(None, TEXT) == litellm.token_counter(text=TEXT)


def test_without_litellm_the_engine_counts_with_the_encoders_tokenizer():
    done = subprocess.run([sys.executable, "-c", WITHOUT_LITELLM], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["problems"] == []
    assert result["counter"] == "encoder"
    assert result["tokens"] == result["encoder_tokens"] > 1


def test_without_litellm_or_an_encoder_tokens_are_estimated_from_length(monkeypatch):
    monkeypatch.setitem(sys.modules, "litellm", None)
    counter, name = choose_counter(encoder=None)
    assert name == "chars/4"
    assert counter(None, TEXT) == estimate_tokens(TEXT) == len(TEXT) // 4
