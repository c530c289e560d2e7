"""Anthropic error answers -> fleetgate errors.

Anthropic answers errors as ``{"type": "error", "error": {"type", "message"}, "request_id"}``
(the documented types and statuses are in :mod:`fleetgate.providers.anthropic.wire`). In a
stream that already answered 200 the same object arrives as an ``error`` event, so the status
is inferred from the error type. The reverse, for the ``/v1/messages`` front door, is in
``fleetgate.api.messages.errors``.
"""

from __future__ import annotations

from typing import Any

from fleetgate.errors import (
    ContextWindowExceeded,
    FleetgateError,
    UpstreamStatusError,
)
from fleetgate.providers.anthropic.wire import ANTHROPIC_ERROR_STATUS, error_type_for_status

__all__ = ["anthropic_error", "anthropic_stream_error"]

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
    kind = kind or error_type_for_status(status)
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
