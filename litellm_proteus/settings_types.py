"""The number types of the strategy config's settings models (``routing_strategy_args``).

Pydantic's lax mode reads a YAML ``true`` as 1 (``int``) or 1.0 (``float``): ``exploration.rate:
true`` would explore on every request, ``redis.timeout_ms: true`` wait 1 ms.  ``Number`` and
``Integer`` refuse a boolean with pydantic's own wrong-type error (so config errors keep their form:
the field, the reason, the allowed values) and coerce the rest as ``float`` and ``int`` do (an
integer for a number, a numeric string).  Every int or float of the settings models is one of them,
as every boolean is a ``StrictBool`` (``tests/litellm_proteus/test_config.py`` walks the models)."""

from __future__ import annotations

from typing import Annotated, Any, Callable

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError


def _refuse_booleans(error_type: str, message: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise PydanticCustomError(error_type, message)
        return value

    return check


Number = Annotated[float, BeforeValidator(_refuse_booleans("float_type", "Input should be a valid number"))]
Integer = Annotated[int, BeforeValidator(_refuse_booleans("int_type", "Input should be a valid integer"))]
