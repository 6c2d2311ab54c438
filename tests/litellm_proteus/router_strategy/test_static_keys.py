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
