"""``POST /proteus/feedback`` on the LiteLLM proxy: ``{"call_id": ..., "score": 0..1, "source": "api"}``.

LiteLLM has no hook for a plugin to add a route, so the hook's import (the proxy loads callbacks
at start-up, in every worker) adds an ``APIRouter`` to ``litellm.proxy.proxy_server.app``, guarded
by LiteLLM's own ``user_api_key_auth`` dependency: the same authentication as LiteLLM's own routes
(a ``custom_auth`` function, the master key, virtual keys), with LiteLLM's answers to a missing or
wrong key.  (LiteLLM virtual keys that are not proxy admins also need the route in their
``allowed_routes``, as for any non-OpenAI route.)  A body that is not a JSON object (or is not UTF-8,
or is nested deeper than the JSON parser goes) is a 400 before authentication (LiteLLM's auth cannot read such a
body).  Then ``parse_feedback_body``: fields other than ``call_id``, ``score`` and ``source`` are a
400.  The caller (LiteLLM's ``UserAPIKeyAuth`` for the request: its key, hashed as the decision log
stores a request's key, and whether it is a proxy admin, such as the master key) is checked against
``decision_log.feedback_from`` (``caller_of``): by default only the key that made the request, or a
proxy admin, may score it; anyone else gets a 403.  Answers: 200 with the decision's call id, state key and score; refusals in OpenAI's error
shape with the status ``FeedbackError`` carries.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ..feedback import FEEDBACK_ROUTE, FeedbackCaller, FeedbackError, parse_feedback_body, submit_to_strategy
from ..tiers import hash_key

logger = logging.getLogger("litellm_proteus.router")


def error_response(message: str, status: int, param: str | None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "service_unavailable"
    return JSONResponse(
        status_code=status, content={"error": {"message": message, "type": kind, "param": param, "code": str(status)}}
    )


async def require_json_object(request: Request) -> None:
    """Runs before LiteLLM's auth, which fails with a 500 on a body that is not a JSON object."""
    from litellm.proxy._types import ProxyException

    why = ""
    try:
        body = await request.json()
    except json.JSONDecodeError as error:
        body, why = None, f"; it is not JSON ({error.msg} at line {error.lineno} column {error.colno})"
    except RecursionError:
        body, why = None, "; it is nested deeper than the JSON parser goes"
    except UnicodeDecodeError as error:  # a ValueError too: before the digits limit's
        body, why = None, f"; it is not UTF-8 JSON (byte {error.start}: {error.reason})"
    except ValueError:  # Python's limit on integer digits (sys.get_int_max_str_digits)
        body, why = None, f"; it holds a number of more than {sys.get_int_max_str_digits()} digits"
    if body is not None and not isinstance(body, dict):
        why = f"; got {type(body).__name__}"
    if not isinstance(body, dict):
        raise ProxyException(
            message='body must be a JSON object {"call_id": ..., "score": 0..1}' + why, type="invalid_request_error",
            param=None, code=400,
        )


def caller_of(auth: Any) -> FeedbackCaller:
    """The feedback caller of LiteLLM's ``UserAPIKeyAuth``: its key as LiteLLM logs it on a request
    (``user_api_key_hash``: the hashed virtual key, the master key's alias, a session token's key
    alias), through ``tiers.hash_key`` as the decision log stores it; admin when its role is
    ``proxy_admin``."""
    from litellm.proxy._types import LitellmUserRoles

    try:
        from litellm.proxy.litellm_pre_call_utils import LiteLLMProxyRequestSetup

        key = LiteLLMProxyRequestSetup.get_logged_api_key(auth)
    except (ImportError, AttributeError):
        key = getattr(auth, "api_key", None)
    role = getattr(auth, "user_role", None)
    admin = str(getattr(role, "value", role)) == LitellmUserRoles.PROXY_ADMIN.value
    return FeedbackCaller(hash_key(key) if isinstance(key, str) and key else None, admin)


async def proteus_feedback(request: Request, auth: Any) -> Any:
    from .patch import active_strategy

    body = await request.json()  # a JSON object: checked by require_json_object
    strategy = active_strategy()
    if strategy is None:
        return error_response("PROTEUS routing is not active on this proxy", 404, None)
    try:
        call_id, score, source = parse_feedback_body(body)
        # Redis lookups are synchronous: keep them off the event loop
        decision = await asyncio.to_thread(submit_to_strategy, strategy, call_id, score, source, caller_of(auth))
    except FeedbackError as exc:
        return error_response(str(exc), exc.status, exc.param)
    return {"call_id": decision["call_id"], "state_key": decision["state_key"], "score": score}


def register_feedback_route() -> bool:
    """Add the route to the running proxy's app (once); False outside a proxy process."""
    server = sys.modules.get("litellm.proxy.proxy_server")
    app = getattr(server, "app", None)
    if app is None or any(getattr(route, "path", None) == FEEDBACK_ROUTE for route in app.router.routes):
        return False
    from litellm.proxy.auth.user_api_key_auth import user_api_key_auth

    async def feedback_endpoint(request: Request, auth: Any = Depends(user_api_key_auth)) -> Any:
        return await proteus_feedback(request, auth)

    router = APIRouter()
    router.add_api_route(
        FEEDBACK_ROUTE,
        feedback_endpoint,
        methods=["POST"],
        dependencies=[Depends(require_json_object)],
        tags=["proteus"],
    )
    app.include_router(router)
    logger.info("PROTEUS feedback route: POST %s", FEEDBACK_ROUTE)
    return True
