"""The OpenMP waiting policy is chosen before torch loads; each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from litellm_proteus.openmp import OMP_POLICIES, SHORT_SPIN_COUNT, configure_openmp

PROBE = """
import json, os, sys
{pre}
from litellm_proteus.openmp import configure_openmp
set_ = configure_openmp({policy!r})
print(json.dumps({{"set": set_, "spin": os.environ.get("GOMP_SPINCOUNT"), "wait": os.environ.get("OMP_WAIT_POLICY")}}))
"""


def run_probe(policy: str, *, pre: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    clean.update(env or {})
    return subprocess.run([sys.executable, "-c", PROBE.format(pre=pre, policy=policy)], env=clean,
                          capture_output=True, text=True, timeout=120, check=True)


def probe(policy: str, *, pre: str = "", env: dict[str, str] | None = None) -> dict:
    return json.loads(run_probe(policy, pre=pre, env=env).stdout.strip().splitlines()[-1])


def test_short_spin_is_the_default_and_sets_libgomp_spin_count():
    assert probe("short-spin") == {"set": f"GOMP_SPINCOUNT={SHORT_SPIN_COUNT}", "spin": SHORT_SPIN_COUNT, "wait": None}


def test_passive_and_active_set_the_openmp_standard_variable():
    assert probe("passive") == {"set": "OMP_WAIT_POLICY=PASSIVE", "spin": None, "wait": "PASSIVE"}
    assert probe("active")["wait"] == "ACTIVE"
    assert probe("unset") == {"set": None, "spin": None, "wait": None}


def test_the_users_own_setting_wins():
    assert probe("short-spin", env={"OMP_WAIT_POLICY": "ACTIVE"}) == {"set": None, "spin": None, "wait": "ACTIVE"}
    assert probe("passive", env={"GOMP_SPINCOUNT": "5"}) == {"set": None, "spin": "5", "wait": None}


def test_nothing_is_set_once_torch_has_read_its_settings_and_the_user_is_told():
    result = run_probe("short-spin", pre="import torch")
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"set": None, "spin": None, "wait": None}
    assert "torch was imported before litellm_proteus" in result.stderr and "GOMP_SPINCOUNT=" in result.stderr


def test_the_plugin_applies_short_spin_before_torch_loads():
    code = "import os; import litellm_proteus.router_strategy; print(os.environ.get('GOMP_SPINCOUNT'))"
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split()[-1] == SHORT_SPIN_COUNT  # set at all = set before torch was imported


def test_an_unknown_policy_names_the_allowed_ones():
    with pytest.raises(ValueError, match="must be one of") as info:
        configure_openmp("spin-forever")
    assert all(p in str(info.value) for p in OMP_POLICIES)
