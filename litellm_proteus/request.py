"""A request as PROTEUS reads it: LiteLLM's request kwargs -> one typed, frozen ``ProteusRequest``.

Everything PROTEUS takes from a request is read here, once per request (``read_request``), so the
decision engine works on typed values only and client input is checked in one place:

- routing text (``prompts.request_text``) and the messages prompt tokens are counted on;
- the request's own ``tau`` (``metadata.tau``, else ``litellm_metadata.tau``): a number in (0, 1],
  else a TauError naming ``tau``;
- tier hints: the key's tier from key metadata, else from team metadata (as LiteLLM's auth puts
  them in ``user_api_key_metadata`` / ``user_api_key_team_metadata``), and the key hash for Redis;
- deployments that already failed this request (LiteLLM's ``previous_models`` retry breadcrumbs).

``messages`` must be a list and ``input`` a string or a list: any other shape is a RequestShapeError
naming the field (the proxy hook answers it with HTTP 400).
"""

from __future__ import annotations

import logging
import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config import ProteusConfig
from .observability import RateLimitedWarnings
from .prompts import request_text

logger = logging.getLogger("litellm_proteus.request")
_warnings = RateLimitedWarnings(logger)

METADATA_KEYS = ("metadata", "litellm_metadata")
KEY_HASH_FIELDS = ("user_api_key_hash", "user_api_key")


class TauError(ValueError):
    """A tau that is not a number in (0, 1]; ``field``: the metadata field that sent it, when known."""

    field: str | None = None


class RequestShapeError(ValueError):
    """A request field PROTEUS reads that has the wrong JSON type; ``field`` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr`` cut to ``limit`` characters: error messages echo client input, not megabytes of it."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # nested deeper than the stack; an int past Python's digit limit
        try:
            text = reprlib.repr(value)  # bounded depth
        except (RecursionError, ValueError):
            text = f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def parse_tau(value: Any) -> float:
    """A request's tau: a number (or numeric string) in (0, 1]; anything else is a TauError."""
    if isinstance(value, bool):
        number = math.nan
    elif isinstance(value, (int, float, str)):
        try:
            number = float(value.strip() if isinstance(value, str) else value)
        except (ValueError, OverflowError):  # OverflowError: an int too large for a float
            number = math.nan
    else:
        number = math.nan
    if not (math.isfinite(number) and 0.0 < number <= 1.0):
        raise TauError(f"tau must be a number in (0, 1] (the target fraction of correct answers); got {short_repr(value)}")
    return number


def request_tau(*metadatas: Mapping[str, Any] | None) -> float | None:
    """``tau`` from the first metadata dict that carries one (``metadata`` then ``litellm_metadata``)."""
    return read_tau(dict(zip(METADATA_KEYS, metadatas)))[0]


@dataclass(frozen=True)
class TierChoice:
    tier: str
    source: str  # key_metadata | team_metadata | redis | default


def metadata_tier(metadata: Mapping[str, Any] | None, config: ProteusConfig, where: str) -> str | None:
    """The tier named in a key's/team's metadata; anything but a configured tier name is ignored
    with a (rate-limited) warning: the request still gets served, at the next source's tier."""
    if not isinstance(metadata, Mapping):
        return None
    tier = metadata.get(config.tier_metadata_key)
    if tier is None:
        return None
    if not isinstance(tier, str) or tier not in config.tiers:
        _warnings.warn(
            f"tier:{where}:{short_repr(tier)}",  # each bad value is reported, each at most every 30 s
            "ignoring %s.%s=%s: not a configured tier (allowed: %s)",
            where,
            config.tier_metadata_key,
            short_repr(tier),
            sorted(config.tiers),
        )
        return None
    return tier


def tier_from_metadata(
    key_metadata: Mapping[str, Any] | None, team_metadata: Mapping[str, Any] | None, config: ProteusConfig
) -> TierChoice | None:
    for where, metadata in (("key_metadata", key_metadata), ("team_metadata", team_metadata)):
        tier = metadata_tier(metadata, config, where)
        if tier is not None:
            return TierChoice(tier, where)
    return None


def failed_deployment_ids(*metadatas: Mapping[str, Any] | None) -> list[str]:
    """Deployment ids LiteLLM recorded as failed for this request, oldest first.

    LiteLLM 1.106 appends one record per failed attempt to ``metadata.previous_models``
    (``deployment_id``); older releases stored the failed call's kwargs (``model_info.id``).
    Malformed records are skipped.  (The proxy hook drops client-sent breadcrumbs: only LiteLLM's
    own retries may shrink the candidate set.)"""
    ids: list[str] = []
    for metadata in metadatas:
        if not isinstance(metadata, Mapping):
            continue
        records = metadata.get("previous_models")
        if not isinstance(records, (list, tuple)):
            continue
        for record in records:
            if not isinstance(record, Mapping):
                continue
            info = record.get("model_info")
            dep_id = record.get("deployment_id") or (info.get("id") if isinstance(info, Mapping) else None)
            if isinstance(dep_id, str) and dep_id and dep_id not in ids:
                ids.append(dep_id)
    return ids


def check_shape(messages: Any = None, input: Any = None, empty_messages: bool = True) -> None:
    """``messages`` is a list (or absent), ``input`` a string or a list (or absent).  ``empty_messages``
    False (a client's body): ``messages: []`` is refused too (nothing to route on, and providers
    refuse it), and so is a message that is not an object (LiteLLM answers it with a 400 only after
    its retries); the router itself may be handed an empty list by LiteLLM's other endpoints."""
    if messages is not None and not isinstance(messages, (list, tuple)):
        raise RequestShapeError(
            "messages", f"messages must be a JSON array of messages, e.g. [{{\"role\": \"user\", \"content\": \"hi\"}}]; got {short_repr(messages)}"
        )
    if messages is not None and not empty_messages and not messages:
        raise RequestShapeError(
            "messages", "messages must be a non-empty JSON array of messages, e.g. [{\"role\": \"user\", \"content\": \"hi\"}]; "
            "got an empty array"
        )
    if messages is not None and not empty_messages:
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise RequestShapeError(
                    "messages", f"messages[{i}] must be a JSON object with a role and content, e.g. "
                    f"{{\"role\": \"user\", \"content\": \"hi\"}}; got {short_repr(message)}"
                )
    if input is not None and not isinstance(input, (str, list, tuple)):
        raise RequestShapeError("input", f"input must be a string or a JSON array; got {short_repr(input)}")


PROMPT_FORMS = ("a string, an array of strings, an array of token ids or an array of arrays of token ids, "
                "e.g. \"Say hi\" or [\"Say hi\"]")


def check_prompt(prompt: Any) -> None:
    """A ``/v1/completions`` ``prompt`` in one of OpenAI's forms (LiteLLM answers any other with a 500
    after its retries)."""
    def token(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if isinstance(prompt, str):
        return
    if isinstance(prompt, (list, tuple)) and prompt and (
        all(isinstance(p, str) for p in prompt) or all(token(p) for p in prompt)
        or all(isinstance(p, (list, tuple)) and p and all(token(t) for t in p) for p in prompt)
    ):
        return
    raise RequestShapeError("prompt", f"prompt must be {PROMPT_FORMS}; got {short_repr(prompt)}")


@dataclass(frozen=True)
class ProteusRequest:
    text: str  # what the encoder sees
    messages: tuple[Mapping[str, Any], ...] | None  # for counting prompt tokens (None: count ``text``)
    tau: float | None  # the request's own tau, if any
    tau_field: str | None  # the metadata field it came from: metadata | litellm_metadata
    metadata_tier: TierChoice | None  # the key's tier from key or team metadata
    key_hash: str | None  # the API key (hash) whose Redis tier applies when metadata names none
    failed_ids: tuple[str, ...]  # deployments that already failed this request, oldest first


def read_tau(request_kwargs: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """(tau, the metadata field it came from); TauError for a tau that is not a number in (0, 1]."""
    for field in METADATA_KEYS:
        metadata = request_kwargs.get(field)
        if isinstance(metadata, Mapping) and metadata.get("tau") is not None:
            try:
                return parse_tau(metadata["tau"]), field
            except TauError as exc:
                exc.field = field
                raise
    for field in METADATA_KEYS:  # a misspelt key would route at the default tier without a word
        metadata = request_kwargs.get(field)
        near = [k for k in metadata if isinstance(k, str) and k != "tau" and k.strip().lower() == "tau"] \
            if isinstance(metadata, Mapping) else []
        if near:
            raise TauError(f"{field} has {short_repr(near[0])}, not 'tau': the accuracy target is read from "
                           f"{field}.tau (lower case), a number in (0, 1]")
    return None, None


def read_request(config: ProteusConfig, messages: Any, input: Any, request_kwargs: Mapping[str, Any]) -> ProteusRequest:
    """The one reading of a request (see the module docstring)."""
    check_shape(messages, input)
    tau, tau_field = read_tau(request_kwargs)
    metadatas = [m for m in (request_kwargs.get(k) for k in METADATA_KEYS) if isinstance(m, Mapping)]
    tier = None
    for metadata in metadatas:
        tier = tier_from_metadata(metadata.get("user_api_key_metadata"), metadata.get("user_api_key_team_metadata"), config)
        if tier is not None:
            break
    key_hash = next(
        (m[f] for m in metadatas for f in KEY_HASH_FIELDS if isinstance(m.get(f), str) and m[f]), None
    )
    kept = tuple(m for m in messages if isinstance(m, Mapping)) if messages else None
    return ProteusRequest(
        text=request_text(messages, input),
        messages=kept or None,
        tau=tau,
        tau_field=tau_field,
        metadata_tier=tier,
        key_hash=key_hash,
        failed_ids=tuple(failed_deployment_ids(*metadatas)),
    )
