"""Prompt-token counting (``litellm_proteus/token_count.py``): ``litellm`` is LiteLLM's count, ``chars``
training's estimate, which needs no LiteLLM."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import litellm
import pytest

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
from litellm_proteus.token_count import choose_counter, count_prompt_tokens, estimate_prompt_tokens

TEXT = "Which gas do plants absorb from the air during photosynthesis?"

# A fresh interpreter in which ``import litellm`` raises ImportError (as where it is not installed):
# an engine over the bundled artifact decides one request with ``prompt_tokens: chars``, and one
# asked for ``prompt_tokens: litellm`` is refused when built.
WITHOUT_LITELLM = f"""
import json, sys
sys.modules['litellm'] = None
from litellm_proteus.config import ProteusConfig
from litellm_proteus.engine import DecisionEngine, DecisionRequest
from litellm_proteus.predictor import ProteusPredictor
predictor = ProteusPredictor({str(DEFAULT_ARTIFACT_DIR)!r}, device='cpu')
deployments = [{{'model_name': 'g', 'model_info': {{'id': f'd{{i}}', 'proteus_model': slot}},
                'litellm_params': {{'model': 'openai/' + slot, 'input_cost_per_token': 1e-6 * (i + 1),
                                   'output_cost_per_token': 2e-6 * (i + 1)}}}}
               for i, slot in enumerate(predictor.models)]
text = {TEXT!r}
engine = DecisionEngine(predictor.manifest, ProteusConfig(prompt_tokens='chars'), predictor=predictor)
scored, problems = engine.score_all(deployments)
routed = engine.decide([DecisionRequest(text, [{{'role': 'user', 'content': text}}], 0.8, scored)])
try:  # prompt_tokens: litellm without LiteLLM is refused when the engine is built
    DecisionEngine(predictor.manifest, ProteusConfig(prompt_tokens='litellm'), predictor=predictor)
    refused = ''
except ValueError as exc:
    refused = str(exc)
print(json.dumps({{'counter': engine.token_counter_name, 'tokens': routed[0].prompt_tokens, 'problems': problems,
                  'refused': refused}}))
"""


def test_chars_is_trainings_estimate_and_litellm_is_litellms_count():
    counter = choose_counter("chars")
    assert counter(None, TEXT) == math.ceil(len(TEXT) / 4) == 16
    counter = choose_counter("litellm")
    assert counter is count_prompt_tokens
    assert counter(None, TEXT) == litellm.token_counter(text=TEXT)
    with pytest.raises(ValueError, match="prompt_tokens='tiktoken': must be one of \\['chars', 'litellm'\\]"):
        choose_counter("tiktoken")


def test_the_chars_counter_routes_without_litellm():
    done = subprocess.run([sys.executable, "-c", WITHOUT_LITELLM], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"counter": "chars", "tokens": estimate_prompt_tokens(None, TEXT), "problems": [],
                      "refused": "prompt_tokens='litellm' needs LiteLLM installed; use prompt_tokens='chars'"}
