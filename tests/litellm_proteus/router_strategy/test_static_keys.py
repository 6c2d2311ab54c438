"""The static keys file (demo custom_auth): entries the auth cannot use are refused when the file is read."""

from __future__ import annotations

import asyncio

import pytest

from litellm_proteus.router_strategy import static_keys


@pytest.fixture
def keys_file(tmp_path, monkeypatch):
    monkeypatch.setattr(static_keys, "_cache", {"stamp": None, "keys": {}})
    path = tmp_path / "keys.yaml"
    monkeypatch.setenv(static_keys.KEYS_FILE_ENV, str(path))
    return path


def auth(key: str):
    return asyncio.run(static_keys.user_api_key_auth(None, key))


def test_good_entries_authenticate(keys_file):
    keys_file.write_text("keys:\n  sk-alice: {metadata: {proteus_tier: premium}}\n"
                         "  sk-bob: {team_id: research, team_metadata: {proteus_tier: economy}}\n  sk-carol: {}\n")
    assert auth("sk-alice").metadata == {"proteus_tier": "premium"}
    bob = auth("sk-bob")
    assert bob.team_id == "research" and bob.team_metadata == {"proteus_tier": "economy"}
    assert auth("sk-carol").metadata == {}


@pytest.mark.parametrize("entry, field, allowed", [
    ('{metadata: "premium"}', "keys.sk-gina.metadata", "a mapping"),
    ("{team_metadata: [premium]}", "keys.sk-gina.team_metadata", "a mapping"),
    ("{team_id: 42}", "keys.sk-gina.team_id", "a string"),
    ("premium", "keys.sk-gina", "a mapping"),
])
def test_bad_entry_is_refused_when_the_file_is_read(keys_file, entry, field, allowed):
    keys_file.write_text(f"keys:\n  sk-ok: {{}}\n  sk-gina: {entry}\n")
    with pytest.raises(ValueError) as caught:
        static_keys._load(str(keys_file))
    message = str(caught.value)
    assert str(keys_file) in message and f"{field} must be {allowed}" in message


def test_a_change_that_cannot_be_read_keeps_the_keys_last_read(keys_file, caplog):
    """An edit in progress (a YAML error, a bad entry) or the file removed must not lock every client
    out: the keys last read stay, with one logged error per version, until the file reads cleanly."""
    import logging
    import os

    keys_file.write_text("keys:\n  sk-alice: {metadata: {proteus_tier: premium}}\n")
    assert auth("sk-alice").metadata == {"proteus_tier": "premium"}
    stamp = os.stat(keys_file).st_mtime_ns
    for n, broken in enumerate(["keys:\n  sk-alice: {metadata: [\n", "keys:\n  sk-alice: premium\n"], 1):
        keys_file.write_text(broken)
        os.utime(keys_file, ns=(stamp + n * 10**9, stamp + n * 10**9))  # a new version, whatever the clock's grain
        with caplog.at_level(logging.ERROR, logger="litellm_proteus.static_keys"):
            caplog.clear()
            assert auth("sk-alice").metadata == {"proteus_tier": "premium"}
            assert auth("sk-alice").metadata == {"proteus_tier": "premium"}
        assert len(caplog.records) == 1 and "keeping the 1 keys last read" in caplog.text
    keys_file.unlink()
    assert auth("sk-alice").metadata == {"proteus_tier": "premium"}
    keys_file.write_text("keys:\n  sk-bob: {}\n")
    with pytest.raises(Exception) as refused:
        auth("sk-alice")  # the file reads cleanly again: its keys are the keys
    assert getattr(refused.value, "status_code", None) == 401 and auth("sk-bob").metadata == {}


def test_a_keys_file_that_never_read_cleanly_is_an_error_naming_it(keys_file):
    keys_file.write_text("keys:\n  sk-alice: {metadata: [\n")
    with pytest.raises(Exception, match="while parsing|expected"):
        static_keys._load(str(keys_file))
