"""Anthropic error answers -> fleetgate errors."""

from __future__ import annotations

import pytest

from fleetgate.errors import ContextWindowExceeded, UpstreamStatusError
from fleetgate.providers.anthropic.errors import anthropic_error, anthropic_stream_error


def body(kind: str, message: str) -> dict[str, object]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}


def test_400_keeps_status_and_shows_anthropic_message_to_the_caller() -> None:
    err = anthropic_error(400, body("invalid_request_error", "max_tokens: Field required"))
    assert isinstance(err, UpstreamStatusError)
    assert err.status == 400 and not err.retryable
    assert err.to_dict()["error"]["message"] == "max_tokens: Field required"
    assert err.to_dict()["error"]["type"] == "invalid_request_error"


def test_529_overloaded_is_retryable_5xx() -> None:
    err = anthropic_error(529, body("overloaded_error", "Overloaded"))
    assert isinstance(err, UpstreamStatusError)
    assert err.upstream_status == 529 and err.retryable and err.status == 502


def test_429_is_retryable_rate_limit_with_retry_after() -> None:
    err = anthropic_error(429, body("rate_limit_error", "slow down"), retry_after=3)
    assert isinstance(err, UpstreamStatusError)
    assert err.status == 429 and err.retryable and err.retry_after == 3


def test_prompt_too_long_is_context_window_exceeded() -> None:
    err = anthropic_error(
        400, body("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
    )
    assert isinstance(err, ContextWindowExceeded)
    assert err.to_dict()["error"]["code"] == "context_length_exceeded"


def test_non_json_body_still_maps_by_status() -> None:
    err = anthropic_error(502, "<html>bad gateway</html>")
    assert isinstance(err, UpstreamStatusError) and err.retryable
    assert "502" in err.message


@pytest.mark.parametrize(
    ("kind", "status"),
    [("overloaded_error", 529), ("api_error", 500), ("rate_limit_error", 429), ("weird", 500)],
)
def test_stream_error_event_status_comes_from_its_type(kind: str, status: int) -> None:
    err = anthropic_stream_error(body(kind, "boom"))
    assert isinstance(err, UpstreamStatusError) and err.upstream_status == status
