"""A file of static API keys for the proxy (``general_settings.custom_auth``), for demos and tests.

LiteLLM's virtual keys (with key/team metadata) need its Postgres database.  To try per-key tiers
without one, point ``PROTEUS_KEYS_FILE`` at a YAML file::

    keys:
      sk-alice: {metadata: {proteus_tier: premium}}          # tier from key metadata
      sk-bob:   {team_id: research, team_metadata: {proteus_tier: economy}}
      sk-carol: {}                                           # tier from Redis, else the default

and set ``general_settings: {custom_auth: litellm_proteus.router_strategy.static_keys.user_api_key_auth}``.
Requests authenticate as their key's LiteLLM hash (``hash_token``), exactly like virtual keys, so
``proteus tiers set sk-carol premium`` applies.  Unknown keys get HTTP 401.  The file is re-read
when it changes.  Production deployments should use LiteLLM's virtual keys instead.

The proxy's master key (``LITELLM_MASTER_KEY`` / ``general_settings.master_key``) authenticates as
on a stock proxy: a proxy admin, named by LiteLLM's master-key alias (``litellm_proxy_master_key``,
so ``proteus tiers set litellm_proxy_master_key premium`` gives it a tier).  LiteLLM hands every
request to a ``custom_auth`` before it checks the master key itself, so this module does.
"""

from __future__ import annotations

import os
import secrets
import threading
from typing import Any

from fastapi import HTTPException, Request
from litellm.constants import LITELLM_PROXY_MASTER_KEY_ALIAS
from litellm.proxy._types import LitellmUserRoles, UserAPIKeyAuth

from ..tiers import hash_key

KEYS_FILE_ENV = "PROTEUS_KEYS_FILE"
_lock = threading.Lock()
_cache: dict[str, Any] = {"stamp": None, "keys": {}}


def _load(path: str) -> dict[str, dict[str, Any]]:
    import yaml

    stamp = os.stat(path).st_mtime_ns
    with _lock:
        if _cache["stamp"] != stamp:
            with open(path) as handle:
                data = yaml.safe_load(handle) or {}
            keys = data.get("keys") if isinstance(data, dict) else None
            if not isinstance(keys, dict):
                raise ValueError(f"{path}: expected a mapping 'keys: {{sk-...: {{metadata: ...}}}}'")
            _cache["keys"] = {str(k): _entry(path, str(k), v) for k, v in keys.items()}
            _cache["stamp"] = stamp
        return _cache["keys"]


ENTRY_FIELDS = {"alias": str, "team_id": str, "metadata": dict, "team_metadata": dict}  # what the auth reads
_KIND = {str: "a string", dict: "a mapping, e.g. {proteus_tier: premium}"}


def _entry(path: str, key: str, value: Any) -> dict[str, Any]:
    """One key's entry, checked when the file is read: a bad one would otherwise fail every request
    from that key with a 500 (UserAPIKeyAuth and the metadata dicts are built from it per request)."""
    entry = value or {}
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: keys.{key} must be a mapping with any of {list(ENTRY_FIELDS)} (or empty); "
                         f"got {type(entry).__name__}")
    for name, kind in ENTRY_FIELDS.items():
        field = entry.get(name)
        if field is not None and not isinstance(field, kind):
            raise ValueError(f"{path}: keys.{key}.{name} must be {_KIND[kind]} (or null); "
                             f"got {type(field).__name__} {field!r:.80}")
    return entry


def is_master_key(api_key: str) -> bool:
    from litellm.proxy import proxy_server

    master_key = getattr(proxy_server, "master_key", None)
    if not (isinstance(master_key, str) and master_key and isinstance(api_key, str)):
        return False
    return secrets.compare_digest(api_key.encode(), master_key.encode())


def master_key_auth() -> UserAPIKeyAuth:
    """What LiteLLM's own auth returns for the master key."""
    from litellm.proxy import proxy_server

    return UserAPIKeyAuth(
        api_key=LITELLM_PROXY_MASTER_KEY_ALIAS,
        user_role=LitellmUserRoles.PROXY_ADMIN,
        user_id=proxy_server.litellm_proxy_admin_name,
    )


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    if is_master_key(api_key):
        return master_key_auth()
    path = os.environ.get(KEYS_FILE_ENV)
    if not path:
        raise HTTPException(status_code=500, detail=f"{KEYS_FILE_ENV} is not set (static_keys custom_auth)")
    entry = _load(path).get(api_key or "")
    if entry is None:
        raise HTTPException(status_code=401, detail="invalid API key")
    return UserAPIKeyAuth(
        api_key=hash_key(api_key),
        key_alias=entry.get("alias"),
        metadata=dict(entry.get("metadata") or {}),
        team_id=entry.get("team_id"),
        team_metadata=dict(entry.get("team_metadata") or {}),
    )
