"""``POST /proteus/feedback`` on the LiteLLM proxy: ``{"call_id": ..., "score": 0..1, "source": "api"}``.

LiteLLM has no hook for a plugin to add a route, so the hook's import (the proxy loads callbacks
at start-up, in every worker) adds an ``APIRouter`` to ``litellm.proxy.proxy_server.app``, guarded
by LiteLLM's own ``user_api_key_auth`` dependency: the same authentication as LiteLLM's own routes
(a ``custom_auth`` function, the master key, virtual keys), with LiteLLM's answers to a missing or
wrong key.  (LiteLLM virtual keys that are not proxy admins also need the route in their
``allowed_routes``, as for any non-OpenAI route.)  A body that is not a JSON object (or is nested
deeper than the JSON parser goes) is a 400 before authentication (LiteLLM's auth cannot read such a
body).  Then ``parse_feedback_body``: fields other than ``call_id``, ``score`` and ``source`` are a
400.  Answers: 200 with the decision's call id, state key and score; refusals in OpenAI's error
shape with the status ``FeedbackError`` carries.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ..feedback import FEEDBACK_ROUTE, FeedbackError, parse_feedback_body, submit_to_strategy

logger = logging.getLogger("litellm_proteus.router")


def error_response(message: str, status: int, param: str | None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "service_unavailable"
    return JSONResponse(
        status_code=status, content={"error": {"message": message, "type": kind, "param": param, "code": str(status)}}
    )


async def require_json_object(request: Request) -> None:
    """Runs before LiteLLM's auth, which fails with a 500 on a body that is not a JSON object."""
    from litellm.proxy._types import ProxyException

    try:
        body = await request.json()
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        body = None
    if not isinstance(body, dict):
        raise ProxyException(
            message='body must be a JSON object {"call_id": ..., "score": 0..1}', type="invalid_request_error",
            param=None, code=400,
        )


async def proteus_feedback(request: Request) -> Any:
    from .patch import active_strategy

    body = await request.json()  # a JSON object: checked by require_json_object
    strategy = active_strategy()
    if strategy is None:
        return error_response("PROTEUS routing is not active on this proxy", 404, None)
    try:
        call_id, score, source = parse_feedback_body(body)
        # Redis lookups are synchronous: keep them off the event loop
        decision = await asyncio.to_thread(submit_to_strategy, strategy, call_id, score, source)
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

    router = APIRouter()
    router.add_api_route(
        FEEDBACK_ROUTE,
        proteus_feedback,
        methods=["POST"],
        dependencies=[Depends(require_json_object), Depends(user_api_key_auth)],
        tags=["proteus"],
    )
    app.include_router(router)
    logger.info("PROTEUS feedback route: POST %s", FEEDBACK_ROUTE)
    return True
