"""The ``responses:`` config section (`fleetgate.api.responses`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fleetgate.config.sections import Section

__all__ = ["RESPONSES_SECTION", "ResponsesConfig"]


class ResponsesConfig(BaseModel):
    """Stored responses (``store: true``, the default) are kept ``retention_s`` seconds and
    then deleted by every replica's purge every ``purge_interval_s``; an expired response is
    not found even before the purge removes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # `false`: no `/v1/responses` routes
    enabled: bool = True
    retention_s: float = Field(2_592_000, gt=0)  # 30 days, as OpenAI keeps responses
    # how often each replica deletes expired responses
    purge_interval_s: float = Field(3600.0, gt=0)
    # The most turns a previous_response_id chain may have (older ones are not sent).
    max_turns: int = Field(1000, ge=1)


RESPONSES_SECTION = Section(
    "responses",
    ResponsesConfig,
    reload={"": "live", "enabled": "restart"},  # its routes are registered at start
)
"""The ``responses`` section: the Responses API (``/v1/responses``)."""
