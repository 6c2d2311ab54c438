"""Packaging guards: the exact LiteLLM pin, the console script, and the runtime/training boundary."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

from litellm_proteus.router_strategy import patch

ROOT = Path(__file__).resolve().parents[1]


def test_litellm_is_pinned_exactly_and_matches_the_patched_version():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    litellm = [d for d in deps if d.startswith("litellm")]
    assert litellm == [f"litellm[proxy]=={patch.SUPPORTED_LITELLM}"]
    assert version("litellm") == patch.SUPPORTED_LITELLM


def test_torch_range_stays_open_for_users():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "torch>=2.2" in deps


def test_runtime_never_imports_training_code():
    code = (
        "import sys, litellm_proteus.router_strategy, litellm_proteus.predictor, litellm_proteus.tiers;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('train', 'proteus_train')];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_every_subcommand_has_help():
    for sub in ("train", "eval", "tiers", "bench"):
        done = subprocess.run(["proteus", sub, "--help"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "usage: proteus " + sub in done.stdout, done.stderr[-1000:]
