"""One place that turns every failure into an OpenAI error response: a `FleetgateError` as
itself, an aiohttp HTTP exception by its status, a request aiohttp's parser cannot read (a
multipart part header with a NUL) as 400, a store that cannot be reached (any route) as 503
``store_unavailable``, anything else as a 500 ``internal_error`` (logged)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from fleetgate.errors import FleetgateError
from fleetgate.http.text import refuse_unstorable_request
from fleetgate.store.errors import is_unreachable, store_unavailable

__all__ = ["error_middleware", "error_response"]

log = logging.getLogger("fleetgate.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HTTP_TYPES = {
    400: ("invalid_request_error", None),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("not_found_error", None),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "payload_too_large"),
    415: ("invalid_request_error", "unsupported_media_type"),
}


def error_response(error: FleetgateError) -> web.Response:
    return web.Response(
        body=orjson.dumps(error.to_dict()),
        status=error.status,
        content_type="application/json",
        headers=error.headers or None,
    )


def _http_exception(exc: web.HTTPException) -> web.Response:
    kind, code = _HTTP_TYPES.get(exc.status, ("invalid_request_error", None))
    message = exc.text or exc.reason
    if message and message.startswith(f"{exc.status}:"):
        message = message.split(":", 1)[1].strip()
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
    return web.Response(
        body=orjson.dumps(body), status=exc.status, content_type="application/json",
        headers=headers,
    )  # fmt: skip


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        refuse_unstorable_request(request)  # a NUL in a path id or the query: 400, any route
        return await handler(request)
    except FleetgateError as exc:
        if exc.status >= 500:
            log.warning(
                "%s %s -> %d %s",
                request.method,
                request.path,
                exc.status,
                exc.detail or exc.message,
            )
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _http_exception(exc)
    except HttpProcessingError as exc:  # aiohttp's parser, reading a body part's headers
        body = {
            "error": {
                "message": f"The request could not be read: {exc.message}",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
        return web.Response(body=orjson.dumps(body), status=400, content_type="application/json")
    except Exception as exc:
        if is_unreachable(exc):  # the database (or the path to it) is down: 503, whatever route
            log.warning("%s %s -> 503 store unavailable: %r", request.method, request.path, exc)
            return error_response(store_unavailable(exc))
        log.exception("unhandled error on %s %s", request.method, request.path)
        body = {
            "error": {
                "message": "Internal error in the gateway.",
                "type": "api_error",
                "param": None,
                "code": "internal_error",
            }
        }
        return web.Response(body=orjson.dumps(body), status=500, content_type="application/json")
