"""``proteus_hook``: the proxy callback that loads PROTEUS and handles the HTTP side.

Listed in ``litellm_settings.callbacks`` (``litellm_proteus.router_strategy.proteus_hook``), its
import registers the strategy (see ``patch.py``) before the proxy builds its Router.  Per request
it:

- rejects a bad ``tau`` (not a number, NaN, <= 0 or > 1) with HTTP 400 naming ``tau`` and the
  accepted range (and a ``metadata`` that is not an object, naming ``metadata``; ``messages`` that
  is not an array, an ``input`` that is neither a string nor an array, or a ``/v1/completions``
  ``prompt`` in none of OpenAI's forms, naming that field),
  before any routing work (``async_pre_call_hook``), for every request PROTEUS may route: its
  group's, or a fallback's;
- drops the metadata fields the plugin itself sets (``PLUGIN_METADATA_KEYS``: ``proteus``, where only
  the router may write the decision and the request's own id, which keys its picks' outcomes, and
  ``proteus_shadow_of``, which marks shadow and judge calls and exempts them from shadow sampling)
  from every client request, and client-sent retry breadcrumbs (``previous_models``) from those
  PROTEUS may route;
- adds the decision headers to the response (``async_post_call_response_headers_hook``); when
  another deployment than PROTEUS's pick answered (a fallback group, after the pick failed), only
  ``x-proteus-fallback: <the group that answered>``: the decision headers describe a pick that did
  not answer; on an error response, what the request was routed for and ``x-proteus-failed: <the
  last pick's model>`` (``DecisionRecord.failure_headers``);
- writes the outcome of each PROTEUS pick to the decision log (success/failure events, and the
  request's end in an error for a pick LiteLLM ran no failure event for: ``serving_log``).

Its import also adds ``POST /proteus/feedback`` to the proxy (``feedback_route.py``).

LiteLLM detects hook overrides on the leaf class, so they are defined here directly.
"""

from __future__ import annotations

from typing import Any

from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy._types import ProxyException

from ..request import METADATA_KEYS, RequestShapeError, TauError, check_prompt, check_shape, request_tau, short_repr
from ..observability import DecisionRecord
from ..shadow import SHADOW_METADATA_KEY
from .feedback_route import register_feedback_route
from .patch import active_strategy
from .serving_log import deployment_by_id, log_outcome, log_request_failed
from .strategy import DECISION_METADATA_KEY


def decision_from_request(data: dict) -> DecisionRecord | None:
    for key in METADATA_KEYS:
        metadata = data.get(key)
        if isinstance(metadata, dict):
            record = DecisionRecord.from_dict(metadata.get(DECISION_METADATA_KEY))
            if record is not None:
                return record
    return None


# Written into request metadata by the plugin only (the router's decision; the shadow and judge calls'
# mark): a client's copy is forged.
PLUGIN_METADATA_KEYS = (DECISION_METADATA_KEY, SHADOW_METADATA_KEY)

# Written by LiteLLM's router during retries (``Router.log_retry``); a client that sends them could
# shrink PROTEUS's candidate set to the deployments it wants.
RETRY_BREADCRUMBS = ("previous_models", "request_retry_count")


# ``/v1/completions`` (LiteLLM's route type): its ``prompt`` is checked like ``messages``.
COMPLETION_CALL_TYPES = ("atext_completion", "text_completion")


def bad_request(message: str, param: str) -> ProxyException:
    """HTTP 400 in OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``), the
    same on every endpoint (an HTTPException's detail comes out as a dict repr on some)."""
    error = ProxyException(message=message, type="invalid_request_error", param=param, code=400)
    # LiteLLM 1.104-1.105's /v1/completions re-wraps a hook's exception with
    # code=getattr(e, "status_code", 500): carry the status there too.
    error.status_code = 400  # type: ignore[attr-defined]
    return error


class ProteusHook(CustomLogger):
    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> dict | None:
        strategy = active_strategy()
        if strategy is None or not isinstance(data, dict):
            return None
        metadatas = [data[key] for key in METADATA_KEYS if isinstance(data.get(key), dict)]
        for metadata in metadatas:  # on every group: the response headers are built from the decision
            for key in PLUGIN_METADATA_KEYS:
                metadata.pop(key, None)
        if not strategy.reaches(data.get("model"), data.get("fallbacks")):
            return data
        for key in METADATA_KEYS:
            if data.get(key) is not None and not isinstance(data[key], dict):
                raise bad_request(
                    f"{key} must be a JSON object, e.g. {{\"tau\": 0.9}}; got {short_repr(data[key])}", key
                )
        for metadata in metadatas:
            for key in RETRY_BREADCRUMBS:
                metadata.pop(key, None)
        try:
            request_tau(*(data.get(k) for k in METADATA_KEYS))
        except TauError as exc:
            raise bad_request(f"invalid {exc.field or 'metadata'}.tau: {exc}", "tau") from exc
        try:
            check_shape(data.get("messages"), data.get("input"), empty_messages=False)
            if call_type in COMPLETION_CALL_TYPES:
                check_prompt(data.get("prompt"))
        except RequestShapeError as exc:
            raise bad_request(str(exc), exc.field) from exc
        return data

    async def async_post_call_response_headers_hook(
        self,
        data: dict,
        user_api_key_dict: Any,
        response: object,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, object] | None = None,
    ) -> dict[str, str] | None:
        record = decision_from_request(data) if isinstance(data, dict) else None
        if record is None:
            return None
        if response is None:  # the request ended in an error: LiteLLM's failure path passes no response
            return record.failure_headers()
        answered = answering_model_id(response, litellm_call_info)
        if answered is not None and record.deployment_id and answered != record.deployment_id:
            return {FALLBACK_HEADER: answering_group(data, answered)}
        return record.headers()

    async def async_post_call_failure_hook(
        self,
        request_data: dict,
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        log_request_failed(request_data, original_exception)
        return None

    async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        log_outcome(active_strategy(), kwargs, response_obj, start_time, end_time, success=True)

    async def async_log_failure_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        log_outcome(active_strategy(), kwargs, response_obj, start_time, end_time, success=False)


FALLBACK_HEADER = "x-proteus-fallback"


def answering_model_id(response: object, litellm_call_info: dict | None) -> str | None:
    """The deployment that produced ``response`` (LiteLLM's ``_hidden_params.model_id``), if known."""
    model_id = (litellm_call_info or {}).get("model_id") if isinstance(litellm_call_info, dict) else None
    if model_id is None:
        hidden = getattr(response, "_hidden_params", None)
        model_id = hidden.get("model_id") if isinstance(hidden, dict) else None
    return str(model_id) if model_id not in (None, "") else None


def answering_group(data: dict, model_id: str) -> str:
    """The model group of the deployment that answered (the fallback group), else its id."""
    strategy = active_strategy()
    try:
        deployment = deployment_by_id(strategy, model_id) if strategy is not None else None
    except RuntimeError:  # its router is gone
        deployment = None
    if deployment is not None and deployment.get("model_name"):
        return str(deployment["model_name"])
    for key in METADATA_KEYS:
        metadata = data.get(key)
        if isinstance(metadata, dict) and isinstance(metadata.get("model_group"), str):
            return metadata["model_group"]
    return model_id


proteus_hook = ProteusHook()
register_feedback_route()
