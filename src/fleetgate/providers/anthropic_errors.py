"""Anthropic error bodies -> fleetgate errors, and the reverse for the ``/v1/messages`` door.

Anthropic answers errors as ``{"type": "error", "error": {"type", "message"}, "request_id"}``
with these statuses (docs: "Errors"): 400 invalid_request_error, 401 authentication_error,
402 billing_error, 403 permission_error, 404 not_found_error, 413 request_too_large,
429 rate_limit_error, 500 api_error, 504 timeout_error, 529 overloaded_error. In a stream that
already answered 200 the same object arrives as an ``error`` event, so the status is inferred
from the error type.
"""

from __future__ import annotations

from typing import Any

from fleetgate.errors import (
    ContextWindowExceeded,
    FleetgateError,
    UpstreamStatusError,
)

__all__ = [
    "ANTHROPIC_ERROR_STATUS",
    "anthropic_error",
    "anthropic_error_body",
    "anthropic_stream_error",
    "fleetgate_error_to_anthropic",
]

ANTHROPIC_ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""Anthropic's documented error type -> HTTP status."""

_STATUS_TYPE = {status: kind for kind, status in ANTHROPIC_ERROR_STATUS.items()}

# Anthropic's message when the prompt does not fit: "prompt is too long: 201000 tokens > 200000
# maximum". OpenAI clients recognise this condition by code=context_length_exceeded.
_TOO_LONG_PREFIX = "prompt is too long"


def _error_fields(body: Any) -> tuple[str | None, str | None]:
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            kind = err.get("type")
            message = err.get("message")
            return (
                kind if isinstance(kind, str) else None,
                message if isinstance(message, str) else None,
            )
    return None, None


def anthropic_error(status: int, body: Any, *, retry_after: float | None = None) -> FleetgateError:
    """The fleetgate error for an Anthropic error answer (``status`` and its parsed JSON body).

    Returns an :class:`UpstreamStatusError` whose ``body`` is an OpenAI error object, so a 4xx
    reaches the caller with Anthropic's message and type, and 429/5xx/529 are retryable.
    A 400 whose message says the prompt is too long becomes :class:`ContextWindowExceeded`.
    ``body`` may be anything (a proxy in front of Anthropic can answer HTML).
    """
    kind, message = _error_fields(body)
    kind = kind or _default_type(status)
    text = message or f"Anthropic upstream answered HTTP {status}"
    if status == 400 and text.lower().startswith(_TOO_LONG_PREFIX):
        return ContextWindowExceeded(text, param="messages")
    openai_body = {"error": {"message": text, "type": kind, "param": None, "code": None}}
    return UpstreamStatusError(
        f"Anthropic {kind}: {text}",
        upstream_status=status,
        body=openai_body,
        retry_after=retry_after,
    )


def anthropic_stream_error(data: Any) -> FleetgateError:
    """The fleetgate error for an ``event: error`` inside a stream (status from its type)."""
    kind, _ = _error_fields(data)
    status = ANTHROPIC_ERROR_STATUS.get(kind or "", 500)
    return anthropic_error(status, data)


def anthropic_error_body(status: int, message: str, kind: str | None = None) -> dict[str, Any]:
    """An Anthropic-shaped error body, e.g. for the ``/v1/messages`` front door."""
    return {"type": "error", "error": {"type": kind or _default_type(status), "message": message}}


def fleetgate_error_to_anthropic(err: FleetgateError) -> tuple[int, dict[str, Any]]:
    """``(status, body)`` rendering a fleetgate error in Anthropic's shape for ``/v1/messages``."""
    obj = err.to_dict()["error"]
    kind = obj.get("type")
    known = kind if isinstance(kind, str) and kind in ANTHROPIC_ERROR_STATUS else None
    return err.status, anthropic_error_body(err.status, str(obj.get("message")), known)


def _default_type(status: int) -> str:
    # Anthropic documents invalid_request_error for 4xx statuses it does not list.
    return _STATUS_TYPE.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
