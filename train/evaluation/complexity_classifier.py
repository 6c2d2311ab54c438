"""LiteLLM's own complexity-router classifier, run locally through a real ``litellm.Router``.

A ``litellm.Router`` is built with an ``auto_router/complexity_router`` deployment (its tiers point
at four placeholder deployments on a closed loopback port: nothing is ever called) and the
``ComplexityRouter`` the Router registers for it classifies prompts with its rule-based scorer
(``classify``: no network, no model).  The tier -> model ladder is chosen by the caller
(``operator_baselines.LiteLLMComplexityRouter``); ``tier_boundaries`` is the documented knob tuned.
"""

from __future__ import annotations

import os
import time
from typing import Sequence

import numpy as np

TIERS: tuple[str, ...] = ("SIMPLE", "MEDIUM", "COMPLEX", "REASONING")
BOUNDARY_KEYS: tuple[str, ...] = ("simple_medium", "medium_complex", "complex_reasoning")
DEPLOYMENT = "proteus-eval-complexity"
_UNREACHABLE = "http://127.0.0.1:9"  # the discard port: the placeholder tier deployments are never called


class ComplexityClassifier:
    """Tier index (0 = SIMPLE .. 3 = REASONING) and weighted score of prompts, by LiteLLM's scorer."""

    def __init__(self, boundaries: Sequence[float] | None = None):
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-map download at import
        import litellm

        config: dict = {"tiers": {tier: f"tier-{tier.lower()}" for tier in TIERS}}
        if boundaries is not None:
            if len(boundaries) != 3 or any(b >= a for a, b in zip(boundaries[1:], boundaries)):
                raise ValueError(f"tier boundaries must be 3 increasing scores; got {list(boundaries)}")
            config["tier_boundaries"] = dict(zip(BOUNDARY_KEYS, map(float, boundaries)))
        model_list = [
            {
                "model_name": f"tier-{tier.lower()}",
                "litellm_params": {"model": f"openai/tier-{tier.lower()}", "api_key": "unused", "api_base": _UNREACHABLE},
            }
            for tier in TIERS
        ]
        model_list.append(
            {"model_name": DEPLOYMENT, "litellm_params": {"model": "auto_router/complexity_router", "complexity_router_config": config}}
        )
        self.router = litellm.Router(model_list=model_list)
        self._strategy = self.router.complexity_routers[DEPLOYMENT][0].strategy
        self.boundaries = tuple(self._strategy.config.tier_boundaries[k] for k in BOUNDARY_KEYS)
        self._cache: dict[str, tuple[int, float]] = {}

    def classify(self, prompts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(tier index, weighted score) per prompt; repeated prompts are classified once."""
        tiers, scores = np.empty(len(prompts), dtype=np.int64), np.empty(len(prompts))
        for i, prompt in enumerate(prompts):
            if prompt not in self._cache:
                tier, score, _signals = self._strategy.classify(prompt)
                self._cache[prompt] = (TIERS.index(tier.value), float(score))
            tiers[i], scores[i] = self._cache[prompt]
        return tiers, scores

    def latency_ms(self, prompts: Sequence[str]) -> float:
        """Mean time (ms) of one uncached classification over ``prompts``."""
        prompts = list(prompts) or ["routing latency probe"]
        start = time.perf_counter()
        for prompt in prompts:
            self._strategy.classify(prompt)
        return (time.perf_counter() - start) * 1000.0 / len(prompts)
