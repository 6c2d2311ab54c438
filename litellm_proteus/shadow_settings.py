"""``shadow:`` in the strategy config: the shadow evaluation's settings (``litellm_proteus.shadow``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from .settings_types import Integer, Number
from .tier_rates import TierRates


class ShadowSettings(TierRates):
    """``shadow:`` in the strategy config; off by default (rate 0)."""

    candidates: Integer = Field(1, ge=1, description="other candidate models called per shadowed request")
    judge_model: str | None = Field(None, description="model group of this proxy that judges the answers")
    daily_budget_usd: Number | None = Field(None, gt=0, description="USD per UTC day for shadow and judge calls")
    timeout_s: Number = Field(60.0, gt=0, description="limit of each shadow and judge call")
    judge_max_tokens: Integer = Field(200, ge=1)
    max_in_flight: Integer = Field(16, ge=1, description="shadow jobs running at once per process; more are skipped (counted)")
    max_pending: Integer = Field(1000, ge=1, description="sampled requests waiting for their response, per process")
    redis_key_prefix: str = Field("proteus:shadow:spend:", description="daily spend key prefix (with routing_strategy_args.redis)")

    @model_validator(mode="after")
    def _complete(self) -> "ShadowSettings":
        if self.enabled:
            missing = [name for name in ("judge_model", "daily_budget_usd") if getattr(self, name) is None]
            if missing:
                raise ValueError(f"shadow evaluation (a rate > 0) needs {' and '.join(missing)}")
        return self
