"""A share of requests per tier: ``{rate: 0.02, tiers: {premium: 0.0}}``, the pattern of the
strategy config's sampled features (exploration, shadow evaluation); 0 = off."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .settings_types import Number


class TierRates(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rate: Number = Field(0.0, ge=0.0, le=1.0, description="share of requests, on tiers not listed in `tiers`")
    tiers: dict[str, Number] = Field(default_factory=dict, description="per-tier rate overriding `rate`")

    @field_validator("tiers")
    @classmethod
    def _tier_rates(cls, tiers: dict[str, float]) -> dict[str, float]:
        bad = {name: rate for name, rate in tiers.items() if not 0.0 <= rate <= 1.0}
        if bad:
            raise ValueError(f"rates must lie in [0, 1]; got {bad}")
        return tiers

    def rate_for(self, tier: str | None) -> float:
        return self.tiers.get(tier, self.rate) if tier is not None else self.rate

    @property
    def enabled(self) -> bool:
        return self.rate > 0 or any(r > 0 for r in self.tiers.values())
