"""The one error tree of fleetgate.

Every failure a caller can see is one of these; library and upstream exceptions are translated
into them at the edge (``providers/``, ``store/``, ``limits/``) and one handler in ``api/``
renders them as OpenAI error objects ``{"error": {"message", "type", "param", "code"}}``.

    FleetgateError
    ├── ClientError                    4xx: the caller can fix it
    │   ├── InvalidRequest             400 invalid_request_error
    │   │   └── ContextWindowExceeded  400 code=context_length_exceeded
    │   ├── AuthenticationFailed       401 authentication_error
    │   ├── PermissionDenied           403 permission_error
    │   ├── NotFound                   404 not_found_error
    │   │   ├── ModelNotFound          404 code=model_not_found
    │   │   └── UnsupportedEndpoint    404 code=unsupported_endpoint: an API this gateway lacks
    │   ├── Conflict                   409 code=conflict: a compare-and-set lost (state moved)
    │   ├── RequestTimeout             408 code=request_timeout
    │   ├── PayloadTooLarge            413 code=payload_too_large
    │   ├── RateLimited                429 rate_limit_exceeded (Retry-After)
    │   │   └── BudgetExceeded         429 code=budget_exceeded
    │   └── ContentBlocked             400 code=content_filter
    ├── UpstreamError                  5xx: an engine or provider failed
    │   ├── UpstreamConnectError       502 could not connect / connection reset
    │   ├── UpstreamBadResponse        502 garbage from upstream
    │   ├── UpstreamStatusError        upstream answered 4xx/5xx (status kept)
    │   │   └── UpstreamContextExceeded   400 code=context_length_exceeded: try a bigger window
    │   ├── UpstreamTimeout            504
    │   └── NoHealthyDeployment        503
    ├── ServiceUnavailable             503 a dependency of ours (store, limiter) failed closed
    │   ├── LimiterUnavailable         503 code=limiter_unavailable: the shared limiter (Redis)
    │   ├── Overloaded                 503 a saturated pool shed the request (Retry-After)
    │   └── MissingExtra               503 code=missing_extra: an optional package is not installed
    ├── RecordRefused                  the store refused a record for good (never rendered)
    └── ConfigError                    invalid configuration (never rendered to API callers)

Example::

    raise InvalidRequest("'messages' must not be empty", param="messages")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AuthenticationFailed",
    "BudgetExceeded",
    "ClientError",
    "ConfigError",
    "Conflict",
    "ContentBlocked",
    "ContextWindowExceeded",
    "FleetgateError",
    "InvalidRequest",
    "LimiterUnavailable",
    "MissingExtra",
    "ModelNotFound",
    "NoHealthyDeployment",
    "NotFound",
    "Overloaded",
    "PayloadTooLarge",
    "PermissionDenied",
    "RateLimited",
    "RecordRefused",
    "RequestTimeout",
    "ServiceUnavailable",
    "UnsupportedEndpoint",
    "UpstreamBadResponse",
    "UpstreamConnectError",
    "UpstreamContextExceeded",
    "UpstreamError",
    "UpstreamStatusError",
    "UpstreamTimeout",
]


class FleetgateError(Exception):
    """Base of every fleetgate error; carries what the OpenAI error object needs.

    ``message`` is what the caller sees; ``detail`` (optional) is what only the logs see, so an
    upstream URL, credential or internal host name never reaches a caller.
    """

    status: int = 500
    type: str = "api_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        # For logs only, never rendered: upstream URLs, host names, library messages.
        self.detail = detail
        if code is not None:
            self.code = code
        self.headers: dict[str, str] = dict(headers or {})

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI error object for this error."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def _whole_seconds(seconds: float) -> str:
    """A ``Retry-After`` value: ``seconds`` rounded up to whole seconds, at least 1."""
    return str(max(1, int(seconds + 0.999)))


class ClientError(FleetgateError):
    status = 400
    type = "invalid_request_error"


class InvalidRequest(ClientError):
    status = 400


class ContextWindowExceeded(InvalidRequest):
    code = "context_length_exceeded"


class AuthenticationFailed(ClientError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(ClientError):
    status = 403
    type = "permission_error"


class NotFound(ClientError):
    status = 404
    type = "not_found_error"


class ModelNotFound(NotFound):
    type = "invalid_request_error"
    code = "model_not_found"


class UnsupportedEndpoint(NotFound):
    """An OpenAI API path this gateway does not serve (moderations, images, vector stores...).

    404 rather than 501: the OpenAI SDKs raise ``NotFoundError`` for a 404 and do not retry
    it, while a 5xx is retried (twice by default) and reads as an outage of the gateway."""

    type = "invalid_request_error"
    code = "unsupported_endpoint"


class Conflict(ClientError):
    """The state the caller expected has moved (a lost compare-and-set); re-read and retry."""

    status = 409
    type = "invalid_request_error"
    code = "conflict"


class RequestTimeout(ClientError):
    """The client did not send its request (headers or body) in time."""

    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class PayloadTooLarge(ClientError):
    status = 413
    code = "payload_too_large"


class RateLimited(ClientError):
    """Over a limit; ``retry_after`` seconds until a retry may succeed."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(
        self,
        message: str,
        *,
        retry_after: float = 1.0,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, param=param, code=code, headers=headers)
        self.retry_after = retry_after
        self.headers.setdefault("Retry-After", _whole_seconds(retry_after))


class BudgetExceeded(RateLimited):
    type = "insufficient_quota"
    code = "budget_exceeded"


class ContentBlocked(ClientError):
    code = "content_filter"


class UpstreamError(FleetgateError):
    """An upstream (engine or provider) failed. ``retryable`` guides retries and fallbacks."""

    status = 502
    type = "upstream_error"
    retryable = True


class UpstreamConnectError(UpstreamError):
    code = "upstream_connect_error"


class UpstreamBadResponse(UpstreamError):
    code = "upstream_bad_response"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamStatusError(UpstreamError):
    """The upstream answered with an error status.

    429 and 5xx are retryable; other 4xx are the caller's fault and are passed on with the
    upstream's status (400 stays 400) so a client's mistake never turns into a 5xx.
    """

    def __init__(
        self,
        message: str,
        *,
        upstream_status: int,
        body: Any = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=f"upstream_{upstream_status}")
        self.upstream_status = upstream_status
        self.body = body
        self.retry_after = retry_after
        self.retryable = upstream_status == 429 or upstream_status >= 500 or upstream_status == 408
        if upstream_status >= 500 or upstream_status in (401, 403):
            # A 401/403 from upstream means the gateway's credentials are wrong, not the
            # caller's: another deployment may still answer.
            self.status = 502
            self.retryable = True
        elif upstream_status == 429:
            self.status = 429
            self.type = "rate_limit_error"
        else:
            self.status = upstream_status
            self.type = "invalid_request_error"

    def to_dict(self) -> dict[str, Any]:
        # A 4xx from the upstream is the caller's error: show the upstream's own error object.
        if self.status < 500 and isinstance(self.body, dict):
            err = self.body.get("error")
            if isinstance(err, dict) and "message" in err:
                return {
                    "error": {
                        "message": str(err.get("message")),
                        "type": str(err.get("type") or self.type),
                        "param": err.get("param"),
                        "code": err.get("code", self.code),
                    }
                }
        return super().to_dict()


class UpstreamContextExceeded(UpstreamStatusError):
    """The upstream said the prompt does not fit its context window (a 400 that another
    deployment or a fallback alias with a larger window may still serve: tried, never a
    cooldown)."""

    code = "context_length_exceeded"

    def __init__(self, message: str, *, upstream_status: int, body: Any = None) -> None:
        super().__init__(message, upstream_status=upstream_status, body=body)
        self.code = "context_length_exceeded"
        self.retryable = True


class NoHealthyDeployment(UpstreamError):
    status = 503
    type = "service_unavailable"
    code = "no_healthy_deployment"


class ServiceUnavailable(FleetgateError):
    status = 503
    type = "service_unavailable"


class LimiterUnavailable(ServiceUnavailable):
    """The shared limiter (Redis) cannot be reached. ``maybe_applied``: the call may have
    reached it before the connection failed (so retrying it must not count twice)."""

    code = "limiter_unavailable"

    def __init__(self, message: str, *, maybe_applied: bool = False) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied


class Overloaded(ServiceUnavailable):
    """A saturated deployment pool shed the request before it reached an engine: its queue
    wait or TTFT deadline could not be met, or a higher band took its place; or, with
    ``preempted_in_flight``, its stream was cut for a starved higher band or quota owner (sent
    inside the stream, after the output so far). Retryable after ``retry_after`` seconds.
    ``code``: ``queue_timeout``, ``deadline_unmeetable``, ``deadline_exceeded``,
    ``queue_full``, ``preempted`` or ``preempted_in_flight``."""

    code = "overloaded"

    def __init__(self, message: str, *, code: str, retry_after: float = 1.0) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after
        self.headers["Retry-After"] = _whole_seconds(retry_after)


class MissingExtra(ServiceUnavailable):
    """An optional dependency is not installed; the message names the ``pip install`` extra
    that brings it (``fleetgate[bench]``, ``fleetgate[audio]``)."""

    code = "missing_extra"

    def __init__(self, message: str, *, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


class RecordRefused(FleetgateError):
    """The store refused a record for what it holds (a value too long or of the wrong type, a
    missing required value), not for being away: retrying it can never succeed. The record
    writer sets such a record aside and keeps writing the rest."""

    type = "record_refused"


class ConfigError(FleetgateError):
    """Invalid configuration. The message names the offending field."""

    type = "config_error"
