"""Facts of Anthropic's Messages API that both directions share: version, URL, headers, and
the documented error types with their HTTP statuses.

The outbound provider (this package) and the inbound ``/v1/messages`` front door
(``fleetgate.api.messages``) both read these; they live here, below both, so that nothing in
``providers/`` imports ``api/``.

Anthropic answers errors as ``{"type": "error", "error": {"type", "message"}, "request_id"}``
with these statuses (docs: "Errors"): 400 invalid_request_error, 401 authentication_error,
402 billing_error, 403 permission_error, 404 not_found_error, 413 request_too_large,
429 rate_limit_error, 500 api_error, 504 timeout_error, 529 overloaded_error.
"""

from __future__ import annotations

__all__ = [
    "ANTHROPIC_ERROR_STATUS",
    "ANTHROPIC_VERSION",
    "anthropic_headers",
    "anthropic_messages_url",
    "error_type_for_status",
]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header value (the current version of the Messages API)."""

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


def error_type_for_status(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    for kind, known in ANTHROPIC_ERROR_STATUS.items():
        if known == status:
            return kind
    # Anthropic documents invalid_request_error for 4xx statuses it does not list.
    return "api_error" if status >= 500 else "invalid_request_error"


def anthropic_headers(api_key: str, *, version: str = ANTHROPIC_VERSION) -> dict[str, str]:
    """Headers for an Anthropic Messages call: the key goes in ``x-api-key``, not Authorization."""
    return {
        "x-api-key": api_key,
        "anthropic-version": version,
        "content-type": "application/json",
    }


def anthropic_messages_url(api_base: str) -> str:
    """``{api_base}/v1/messages``; ``api_base`` may end in ``/`` or ``/v1``."""
    return api_base.rstrip("/").removesuffix("/v1") + "/v1/messages"
