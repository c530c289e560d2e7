"""Shared helpers of the routing tests: a request as routing sees it."""

from __future__ import annotations

from typing import Any

from fleetgate.contract.principal import Principal
from fleetgate.contract.request import Endpoint, GatewayRequest
from fleetgate.routing.context import RouteContext

ANYONE = Principal("key-0")


def route_ctx(
    alias: str = "chat",
    *,
    principal: Principal = ANYONE,
    prompt_tokens: int = 0,
    max_tokens: int = 0,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> RouteContext:
    """The routing context of a chat request with these facts."""
    req = GatewayRequest(
        request_id="req-1",
        endpoint=Endpoint.CHAT,
        principal=principal,
        body=body if body is not None else {"model": alias},
        alias=alias,
        stream=False,
        want_usage=False,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        headers=headers or {},
    )
    return RouteContext(req)
