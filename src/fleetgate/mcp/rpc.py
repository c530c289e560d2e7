"""The MCP endpoint's errors: the gateway's errors (`fleetgate.errors`) as JSON-RPC errors.

A tool call fails on the request path like a model call, with a `FleetgateError` (a limit's
429, a content block's 400, a server's 502 or 504), which the stages record; `rpc_error`
turns it into the JSON-RPC error the MCP client gets, in one place. The error's ``data`` is the
HTTP API's OpenAI error object (``type``, ``code``, ``message``, ``param``) with the HTTP
``status``, and for a refusal the retry delay (``retry_after_s``) and what was exceeded
(``reason``: ``requests``, ``tokens``, ``parallel`` or ``budget``)::

    try:
        ...
    except FleetgateError as exc:
        raise rpc_error(exc) from None
"""

from __future__ import annotations

from typing import Any

from mcp.shared.exceptions import MCPError

from fleetgate.errors import (
    BudgetExceeded,
    ContentBlocked,
    FleetgateError,
    PermissionDenied,
    RateLimited,
    UpstreamConnectError,
    UpstreamError,
    UpstreamTimeout,
)

__all__ = [
    "BUDGET_EXCEEDED",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "RATE_LIMITED",
    "RESOURCE_NOT_FOUND",
    "TIMED_OUT",
    "UNAVAILABLE",
    "WITHHELD",
    "ServerError",
    "ServerTimeout",
    "ServerUnavailable",
    "UnknownName",
    "refusal_reason",
    "rpc_error",
]

# JSON-RPC error codes of the gateway. -32000..-32019 is the implementation-defined band; the
# SDK uses -32000 (connection closed, never on the wire) and -32001 (request timeout).
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602  # an unknown (or not allowed) tool or prompt, as the MCP spec says
RESOURCE_NOT_FOUND = -32002  # an unknown (or not allowed) resource, as the MCP spec says
TIMED_OUT = -32001  # the upstream server did not answer within call_timeout_s (the SDK's code)
UNAVAILABLE = -32010  # the upstream server is not connected, or the connection broke
RATE_LIMITED = -32011  # a rate limit or parallel limit refused the call (retry later)
WITHHELD = -32012  # the caller's content policy blocked the arguments or the answer's text
BUDGET_EXCEEDED = -32013  # a budget is spent: no call that costs succeeds before it resets


class UnknownName(PermissionDenied):
    """A tool, prompt or resource that does not exist or that the caller may not use (the
    same answer for both: a caller cannot probe for what it may not use)."""

    def __init__(self, kind: str, name: str) -> None:
        what = "Resource not found" if kind == "resource" else f"Unknown {kind}"
        super().__init__(f"{what}: {name}")
        self.rpc_code = RESOURCE_NOT_FOUND if kind == "resource" else INVALID_PARAMS


class ServerUnavailable(UpstreamConnectError):
    """The MCP server is not connected, or the connection broke during the call."""


class ServerTimeout(UpstreamTimeout):
    """The MCP server did not answer within its ``call_timeout_s``."""


class ServerError(UpstreamError):
    """The MCP server's own JSON-RPC error, passed on (code and message, its credentials
    scrubbed): the call reached it and it refused."""

    status = 400
    code = "mcp_server_error"
    retryable = False

    def __init__(self, rpc_code: int, message: str) -> None:
        super().__init__(message)
        self.rpc_code = rpc_code


def refusal_reason(exc: RateLimited) -> str:
    """What a refusal exceeded, as the limiter named it (``x-ratelimit-reset-<reason>``)."""
    if isinstance(exc, BudgetExceeded):
        return "budget"
    prefix = "x-ratelimit-reset-"
    found = next((h[len(prefix) :] for h in exc.headers if h.startswith(prefix)), None)
    return found or "requests"


def _code(exc: FleetgateError) -> int:
    code = getattr(exc, "rpc_code", None)
    if isinstance(code, int):
        return code
    if isinstance(exc, BudgetExceeded):
        return BUDGET_EXCEEDED
    if isinstance(exc, RateLimited):
        return RATE_LIMITED
    if isinstance(exc, ContentBlocked):
        return WITHHELD
    if isinstance(exc, UpstreamTimeout):
        return TIMED_OUT
    if exc.status >= 500:
        return UNAVAILABLE
    return INVALID_REQUEST


def rpc_error(exc: FleetgateError) -> MCPError:
    """The JSON-RPC error for ``exc`` (module docstring)."""
    data: dict[str, Any] = {**exc.to_dict()["error"], "status": exc.status}
    if isinstance(exc, RateLimited):
        # None: it never resets (a `total` budget), so no retry will succeed
        data["retry_after_s"] = exc.retry_after if "Retry-After" in exc.headers else None
        data["reason"] = refusal_reason(exc)
    return MCPError(_code(exc), exc.message, data=data)
