"""LiteLLM internals whose public names appeared inside the supported range: one lookup each, so
the rest of the plugin reads the same on every version (1.104.0 is the oldest with the
``routing_groups`` module and the Router hooks ``patch.py`` wraps; up to 1.105.x the two helpers
below carried a leading underscore)."""

from __future__ import annotations

from typing import Any

from litellm.litellm_core_utils import core_helpers

# Router methods checked by patch.check_litellm under either name.
ROUTER_METHOD_ALIASES: dict[str, str] = {"get_model_from_alias": "_get_model_from_alias"}

get_parent_otel_span_from_kwargs = getattr(core_helpers, "get_parent_otel_span_from_kwargs", None) or getattr(
    core_helpers, "_get_parent_otel_span_from_kwargs"
)


def model_from_alias(router: Any, model: str) -> str | None:
    """``Router.get_model_from_alias`` (``_get_model_from_alias`` before LiteLLM 1.106)."""
    resolve = getattr(router, "get_model_from_alias", None) or getattr(router, "_get_model_from_alias")
    return resolve(model)
