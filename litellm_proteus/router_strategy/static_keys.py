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
when it changes; a change that cannot be read (a YAML error, a bad entry, the file removed) keeps
the keys last read, with a logged error, so an edit in progress never locks every client out
(before any good read it is an error: HTTP 500 naming the file).  Production deployments should use
LiteLLM's virtual keys instead.

The proxy's master key (``LITELLM_MASTER_KEY`` / ``general_settings.master_key``) authenticates as
on a stock proxy: a proxy admin, named by LiteLLM's master-key alias (``litellm_proxy_master_key``,
so ``proteus tiers set litellm_proxy_master_key premium`` gives it a tier).  LiteLLM hands every
request to a ``custom_auth`` before it checks the master key itself, so this module does.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from typing import Any

from fastapi import HTTPException, Request
from litellm.constants import LITELLM_PROXY_MASTER_KEY_ALIAS
from litellm.proxy._types import LitellmUserRoles, UserAPIKeyAuth

from ..tiers import hash_key

KEYS_FILE_ENV = "PROTEUS_KEYS_FILE"
logger = logging.getLogger("litellm_proteus.static_keys")
_lock = threading.Lock()
_cache: dict[str, Any] = {"stamp": None, "keys": {}}  # "stamp": the file version the keys were read from


def _load(path: str) -> dict[str, dict[str, Any]]:
    """The keys of ``path``, re-read when its modification time changes.  A version that cannot be
    read keeps the keys last read (logged once per version); with none read yet it raises."""
    try:
        stamp: Any = os.stat(path).st_mtime_ns
    except OSError as exc:
        stamp = f"missing: {exc}"
    with _lock:
        if _cache["stamp"] == stamp or _cache.get("bad_stamp") == stamp:
            return _cache["keys"]
        try:
            keys = _read(path)
        except Exception as exc:  # noqa: BLE001 - the file gone (OSError), a YAML syntax error, a bad entry
            return _keep_last(stamp, exc)
        _cache.update(keys=keys, stamp=stamp, bad_stamp=None)
        return keys


def _read(path: str) -> dict[str, dict[str, Any]]:
    import yaml

    with open(path) as handle:
        data = yaml.safe_load(handle) or {}
    keys = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(keys, dict):
        raise ValueError(f"{path}: expected a mapping 'keys: {{sk-...: {{metadata: ...}}}}'")
    return {str(k): _entry(path, str(k), v) for k, v in keys.items()}


def _keep_last(stamp: Any, exc: Exception) -> dict[str, dict[str, Any]]:
    """Under ``_lock``: a version that cannot be read.  Before any good read, the error (the request
    gets a 500 naming it); after one, the keys last read, and the error logged once per version."""
    if _cache["stamp"] is None:
        raise exc if isinstance(exc, ValueError) else ValueError(f"{KEYS_FILE_ENV}: {exc}")
    _cache["bad_stamp"] = stamp
    logger.error("PROTEUS static keys: %s; keeping the %d keys last read until the file reads cleanly", exc,
                 len(_cache["keys"]))
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
