"""Fleetgate errors -> Anthropic error bodies, for the front door."""

from __future__ import annotations

from fleetgate.api.messages.errors import anthropic_error_body, fleetgate_error_to_anthropic
from fleetgate.errors import RateLimited


def test_front_door_renders_fleetgate_errors_in_anthropic_shape() -> None:
    status, payload = fleetgate_error_to_anthropic(RateLimited("too many requests"))
    assert status == 429
    assert payload == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "too many requests"},
    }
    assert anthropic_error_body(418, "teapot")["error"]["type"] == "invalid_request_error"
    assert anthropic_error_body(503, "down")["error"]["type"] == "api_error"
