"""The shipped configs are valid: every PROTEUS deployment maps to a slot of the config's artifact
(the bundled default, or the shipped ZeroEval one) and has a price, and the tiers sit inside that
artifact's trained tau range."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR, read_manifest
from litellm_proteus.config import ProteusConfig
from litellm_proteus.engine import DecisionEngine

REPO = Path(__file__).resolve().parents[3]
CONFIGS = ["config.example.yaml", "examples/tiers/config.yaml", "examples/real_providers.yaml", "examples/zeroeval.yaml"]
HAS_DEFAULT = (DEFAULT_ARTIFACT_DIR / "manifest.json").is_file()


def load(name: str) -> dict:
    return yaml.safe_load((REPO / name).read_text())


def artifact_of(config: ProteusConfig) -> Path:
    """The config's artifact; relative paths are relative to the repository (the proxy's working
    directory in the examples' instructions)."""
    return REPO / config.artifact if config.artifact else DEFAULT_ARTIFACT_DIR


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("PROTEUS_REDIS_URL", "redis://127.0.0.1:6390/0")


@pytest.mark.parametrize("name", CONFIGS)
def test_config_is_valid_and_every_deployment_is_routable(name, env, make_artifact):
    data = load(name)
    assert "litellm_proteus.router_strategy.proteus_hook" in data["litellm_settings"]["callbacks"]
    settings = data["router_settings"]
    assert settings["routing_strategy"] == "proteus"
    config = ProteusConfig.parse(settings["routing_strategy_args"])
    directory = artifact_of(config)
    manifest = read_manifest(directory if config.artifact or HAS_DEFAULT else make_artifact())
    DecisionEngine(manifest, config).check_model_list(data["model_list"])  # slot + price for each


@pytest.mark.skipif(not HAS_DEFAULT, reason="default artifact not built yet")
@pytest.mark.parametrize("name", CONFIGS)
def test_tiers_sit_inside_the_artifacts_tau_range(name, env):
    config = ProteusConfig.parse(load(name)["router_settings"]["routing_strategy_args"])
    lo, hi = read_manifest(artifact_of(config)).tau_range
    tiers = config.tiers
    assert all(lo <= tau <= hi for tau in tiers.values()), (tiers, (lo, hi))


@pytest.mark.skipif(not HAS_DEFAULT, reason="default artifact not built yet")
def test_example_config_routing_changes_with_tau():
    """The out-of-the-box promise: with the bundled artifact, tau visibly changes the model.  (Short
    hand-typed prompts are far from RouterBench's, and the bundled artifact sends most of them to
    GPT-4 whatever the tau; the arithmetic and MBPP-style ones move.)"""
    import litellm

    import litellm_proteus.router_strategy  # noqa: F401

    data = load("config.example.yaml")
    settings = {k: v for k, v in data["router_settings"].items()}
    router = litellm.Router(model_list=data["model_list"], **settings)
    lo, hi = read_manifest(DEFAULT_ARTIFACT_DIR).tau_range
    prompts = [
        "Prove that there are infinitely many primes.",
        "Write a Python function that returns the n-th Fibonacci number.",
        "What is the capital of France?",
        "Which is heavier, a kilogram of feathers or a kilogram of iron? Answer A) feathers B) iron C) equal.",
        "Summarise the causes of the French Revolution in three sentences.",
        "What is 17*23?",
        "Write a function to find the minimum cost path to reach (m, n) from (0, 0) for the given cost matrix.",
    ]

    async def route(tau):
        out = []
        for prompt in prompts:
            metadata = {"tau": tau}
            await router.acompletion(model="proteus-auto", messages=[{"role": "user", "content": prompt}], metadata=metadata)
            out.append(metadata["proteus"])
        return out

    low, high = asyncio.run(route(lo)), asyncio.run(route(hi))
    assert sum(d["cost_usd"] for d in high) >= sum(d["cost_usd"] for d in low)
    assert any(a["model"] != b["model"] for a, b in zip(low, high))
