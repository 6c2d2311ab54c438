"""The modes of what PROTEUS writes to disk: the decision log's folder and files, shadow rows,
offline feedback files.  They hold key hashes, prompts and responses: owner only (0700 / 0600) by
default, group read with ``decision_log.file_mode: "0640"``, whatever the process's umask."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import time

import pytest

from litellm_proteus.config import DecisionLogSettings, ProteusConfig, ProteusConfigError
from litellm_proteus.decision_log import DecisionLogWriter, RotatingJsonl, decision_record, log_files
from litellm_proteus.feedback import append_to_log_dir
from litellm_proteus.shadow import ShadowEvaluator
from litellm_proteus.shadow_budget import DailyBudget
from litellm_proteus.shadow_settings import ShadowSettings


@pytest.fixture
def umask():
    """Set the process's umask for a test (restored after it)."""
    before = os.umask(0o022)
    yield os.umask
    os.umask(before)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def decision(call_id: str) -> dict:
    return decision_record(
        call_id=call_id, key_hash="f" * 64, tier="standard", tau_source="default", state_key="tier:standard",
        tau=0.82, tau_requested=None, tau_effective=0.82, delta=0.0, mu=0.5, model_group="proteus-auto",
        candidates=[], chosen=0, propensity=1.0, prompt="my secret prompt", artifact="sha", log_prompt=True,
        ts=time.time(),
    )


def write(writer: DecisionLogWriter, call_id: str) -> None:
    writer.submit(decision(call_id))  # a prompt in it (log_prompts); outcomes go to the same file
    assert writer.flush()


@pytest.mark.parametrize("process_umask", [0o022, 0o000, 0o002])
def test_the_writer_makes_its_folder_0700_and_its_files_0600_whatever_the_umask(tmp_path, umask, process_umask):
    umask(process_umask)
    directory = tmp_path / "var" / "proteus" / "log"  # missing parents too
    writer = DecisionLogWriter(DecisionLogSettings(dir=str(directory), log_prompts=True, log_responses=True))
    try:
        write(writer, "c1")
        assert mode(directory) == 0o700
        assert [mode(p) for p in log_files(directory)] == [0o600]
        shutil.rmtree(directory)  # removed while the proxy runs: made again, as private
        write(writer, "c2")
        assert mode(directory) == 0o700 and [mode(p) for p in log_files(directory)] == [0o600]
    finally:
        writer.close()


def test_file_mode_0640_lets_the_group_read_whatever_the_umask(tmp_path, umask):
    umask(0o077)  # would take the group's bits
    directory = tmp_path / "log"
    writer = DecisionLogWriter(DecisionLogSettings(dir=str(directory), file_mode="0640"))
    try:
        write(writer, "c1")
    finally:
        writer.close()
    assert mode(directory) == 0o750 and [mode(p) for p in log_files(directory)] == [0o640]


def test_an_existing_folder_keeps_its_mode_and_one_open_to_others_is_warned_about_once(tmp_path, umask, caplog):
    opened, private = tmp_path / "opened", tmp_path / "private"
    opened.mkdir()
    opened.chmod(0o755)
    private.mkdir()
    private.chmod(0o700)
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.decision_log"):
        for directory in (opened, opened, private):
            files = RotatingJsonl(directory, 1 << 20, 10)
            files.write('{"a":1}\n')
            files.close()
    assert mode(opened) == 0o755 and mode(private) == 0o700  # the operator's choice
    assert {mode(p) for d in (opened, private) for p in d.iterdir()} == {0o600}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert f"log directory {opened} lets other users in (mode 0755" in warnings[0] and f"chmod 0700 {opened}" in warnings[0]
    caplog.clear()
    group = tmp_path / "group"  # file_mode 0640: a 0750 folder is what it asks for
    group.mkdir()
    group.chmod(0o750)
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.decision_log"):
        RotatingJsonl(group, 1 << 20, 10, file_mode=0o640).close()
    assert caplog.records == []


@pytest.mark.parametrize("file_mode, files, folder", [(None, 0o600, 0o700), ("0640", 0o640, 0o750)])
def test_shadow_rows_are_written_with_the_logs_file_mode(tmp_path, umask, file_mode, files, folder):
    directory = tmp_path / "log"
    settings = ShadowSettings(rate=0.25, judge_model="judge", daily_budget_usd=1.0)
    shadow = ShadowEvaluator(settings, str(directory), 1 << 20, 10, DailyBudget(1.0),
                             **({"file_mode": file_mode} if file_mode else {}))  # the default: owner only
    assert shadow._write({"call_id": "c1", "prompt": "my secret prompt"})
    shadow.files.close()
    assert [mode(p) for p in directory.iterdir()] == [files] and mode(directory) == folder


def test_the_proxy_builds_its_writer_and_shadow_evaluator_with_the_configured_file_mode(tmp_path, umask):
    from litellm_proteus.router_strategy.serving_log import shared_decision_log, shared_shadow

    config = ProteusConfig.parse({
        "decision_log": {"dir": str(tmp_path / "log"), "log_prompts": True, "file_mode": "0640"},
        "shadow": {"rate": 0.1, "judge_model": "judge", "daily_budget_usd": 1.0},
    })
    writer, _ = shared_decision_log(config)
    shadow = shared_shadow(config)
    try:
        assert writer.files.file_mode == shadow.files.file_mode == 0o640
        write(writer, "c1")
        assert shadow._write({"call_id": "c1"})
        assert {mode(p) for p in (tmp_path / "log").iterdir()} == {0o640} and mode(tmp_path / "log") == 0o750
    finally:
        writer.close()
        shadow.files.close()


@pytest.mark.parametrize("folder, feedback", [(0o700, 0o600), (0o750, 0o640)])
def test_an_offline_feedback_file_gets_the_mode_the_folder_gives_the_logs_files(tmp_path, umask, folder, feedback):
    directory = tmp_path / "log"
    group = {"file_mode": "0640"} if folder == 0o750 else {}
    writer = DecisionLogWriter(DecisionLogSettings(dir=str(directory), **group))
    try:
        write(writer, "c1")
    finally:
        writer.close()
    [logged] = log_files(directory)
    logged.rename(directory / "decisions-20260101T000000-1-0.jsonl")  # the proxy's (another process's) file
    before = set(directory.iterdir())
    append_to_log_dir(directory, "c1", 1.0, "python")
    [added] = set(directory.iterdir()) - before
    assert mode(added) == feedback


@pytest.mark.parametrize("value", [416, 640, "0644", "0666", "600", True, None])
def test_file_mode_is_refused_naming_the_field_and_the_allowed_values(value):
    with pytest.raises(ProteusConfigError) as info:
        ProteusConfig.parse({"decision_log": {"dir": "/tmp/x", "file_mode": value}})
    assert "routing_strategy_args.decision_log.file_mode: Input should be '0600' or '0640'" in str(info.value)
    assert ProteusConfig.parse({"decision_log": {"dir": "/tmp/x"}}).decision_log.file_mode == "0600"
