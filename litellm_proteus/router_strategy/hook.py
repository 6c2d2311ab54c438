"""``proteus_hook``: the proxy callback that loads PROTEUS and handles the HTTP side.

Listed in ``litellm_settings.callbacks`` (``litellm_proteus.router_strategy.proteus_hook``), its
import registers the strategy (see ``patch.py``) before the proxy builds its Router.  Per request
it:

- rejects a bad ``tau`` (not a number, NaN, <= 0 or > 1) with HTTP 400 naming ``tau`` and the
  accepted range, before any routing work (``async_pre_call_hook``);
- drops a client-sent ``metadata.proteus`` (only the router may write the decision there);
- adds the decision headers to the response (``async_post_call_response_headers_hook``).

LiteLLM detects hook overrides on the leaf class, so they are defined here directly.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from litellm.integrations.custom_logger import CustomLogger

from ..engine import METADATA_KEYS, TauError, request_tau
from ..observability import DecisionRecord
from .patch import active_strategy
from .strategy import DECISION_METADATA_KEY


def decision_from_request(data: dict) -> DecisionRecord | None:
    for key in METADATA_KEYS:
        metadata = data.get(key)
        if isinstance(metadata, dict):
            record = DecisionRecord.from_dict(metadata.get(DECISION_METADATA_KEY))
            if record is not None:
                return record
    return None


class ProteusHook(CustomLogger):
    async def async_pre_call_hook(self, user_api_key_dict: Any, cache: Any, data: dict, call_type: Any) -> dict | None:
        strategy = active_strategy()
        if strategy is None or not isinstance(data, dict) or not strategy.manages(data.get("model")):
            return None
        for key in METADATA_KEYS:
            if isinstance(data.get(key), dict):
                data[key].pop(DECISION_METADATA_KEY, None)
        try:
            request_tau(*(data.get(k) for k in METADATA_KEYS))
        except TauError as exc:
            raise HTTPException(status_code=400, detail={"error": f"invalid metadata.tau: {exc}", "param": "tau"}) from exc
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
        return record.headers() if record is not None else None


proteus_hook = ProteusHook()
