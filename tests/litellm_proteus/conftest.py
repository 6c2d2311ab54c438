"""Shared fixtures of the plugin tests: a throw-away ``redis-server`` on a free loopback port and a
steerable artifact (hand-set weights whose routing direction follows tau)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RedisServer:
    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_redis() -> RedisServer:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = RedisServer(process, port)
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1)
    for _ in range(100):  # up to ~10 s
        try:
            if client.ping():
                return server
        except redis.exceptions.ConnectionError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"redis-server did not start on port {port}")


@pytest.fixture
def redis_server():
    server = start_redis()
    yield server
    server.stop()


# -- a steerable artifact ------------------------------------------------------------------------
# Random weights (``make_artifact``) give a mu that barely moves with tau, so routing-direction tests
# use hand-set weights instead: the performance head predicts fixed correctness per slot
# (``STEER_P``: strong models high, cheap ones low) and the policy maps tau monotonically to mu
# (~0.07 at the bottom of the declared range, ~0.93 at the top).  Low tau therefore routes to a
# cheap deployment and high tau to the strongest, through the real eq. 2 and cost normaliser.
STEER_MODELS = ["gpt-4-1106-preview", "mistralai/mixtral-8x7b-chat", "mistralai/mistral-7b-chat"]
STEER_P = {"gpt-4-1106-preview": 0.92, "mistralai/mixtral-8x7b-chat": 0.70, "mistralai/mistral-7b-chat": 0.55}
# USD per token (RouterBench-era list prices).
PRICES = {
    "gpt-4-1106-preview": (10e-6, 30e-6),
    "mistralai/mixtral-8x7b-chat": (0.6e-6, 0.6e-6),
    "mistralai/mistral-7b-chat": (0.2e-6, 0.2e-6),
}
TAU_RANGE = (0.7, 0.9)


def build_steerable_artifact(directory: Path, models=STEER_MODELS, p=STEER_P) -> Path:
    import math

    import torch

    from litellm_proteus.artifact import EncoderSpec, Manifest, save_artifact
    from litellm_proteus.costs import CostNormalizer
    from litellm_proteus.model import ModelConfig, ProteusModel

    config = ModelConfig(embed_dim=384, n_models=len(models), use_critic=False)
    model = ProteusModel(config)
    h = config.hidden_dim
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        model.performance_head.bias.copy_(torch.tensor([math.log(p[m] / (1 - p[m])) for m in models]))
        # The Beta head reads [gated trunk features (h), tau feature, lambda feature]: steer mu by the
        # tau feature alone, so that raw_alpha = -raw_beta = 40 * (tau_norm - 0.5) whatever affine
        # encoding ProteusModel._conditioning uses for tau_norm.
        assert model.beta_head.linear.in_features == h + 2, "ProteusModel changed: update this builder"
        feature = lambda tn: float(model._conditioning(torch.tensor([tn]), torch.tensor([1.0]), torch.zeros(1, 1))[0, 0])
        slope = feature(1.0) - feature(0.0)
        assert abs(feature(0.5) - (feature(0.0) + feature(1.0)) / 2) < 1e-6 and slope > 0
        weight = 40.0 / slope
        bias = -weight * feature(0.5)
        model.beta_head.linear.weight[0, h] = weight  # alpha grows with tau
        model.beta_head.linear.weight[1, h] = -weight  # beta shrinks with tau
        model.beta_head.linear.bias.copy_(torch.tensor([bias, -bias]))
    manifest = Manifest(
        models=list(models),
        encoder=EncoderSpec(name="all-MiniLM-L6-v2", embed_dim=384),
        architecture=config,
        tau_range=TAU_RANGE,
        tau_train_range=(0.65, 0.95),
        cost_normalization=CostNormalizer(low=-5.0, high=-2.0).to_dict(),
        avg_input_tokens={m: 400.0 for m in models},
        avg_output_tokens={m: 100.0 for m in models},
    )
    return save_artifact(directory, model, manifest)


@pytest.fixture(scope="session")
def steerable_artifact(tmp_path_factory) -> Path:
    return build_steerable_artifact(tmp_path_factory.mktemp("steerable") / "artifact")
