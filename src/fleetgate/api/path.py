"""`RequestPath`: the request path as other features use it, and its port `REQUEST_PATH`.

The core feature (`fleetgate.api.feature.CoreFeature`) provides it when it is built; the
features that send requests down the path without owning it ask for it: the Responses API
(a ``/v1/responses`` request is a chat request in another wire format), the batch lane
(each line runs the whole path) and any feature that runs its own calls through the stages
(MCP tool calls). It is everything they use of the path and nothing else: authenticate a
caller, read a body within the server's limits, check a model, run the path for an HTTP
request (``serve``) or for one that did not arrive over HTTP (``answer``), and, for a call
that is not a model call, the stages in order and the record of a finished request.

Example::

    path = core.ports.require(REQUEST_PATH)          # in a feature's build(core)
    principal = path.authenticate(request)
    body = await path.read_body(request)
    return await path.serve(request, Endpoint.CHAT, principal, body, started)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from fleetgate.api import completions
from fleetgate.api.exchange import record_exchange
from fleetgate.api.state import GatewayState
from fleetgate.contract.principal import Principal
from fleetgate.contract.request import GatewayRequest, ResponseWire
from fleetgate.contract.stages import Stage
from fleetgate.core import Port
from fleetgate.http.body import read_json
from fleetgate.providers.base import RoutedEndpoint

__all__ = ["REQUEST_PATH", "RequestPath"]


class RequestPath:
    """The request path of one gateway (see the module doc)."""

    __slots__ = ("_gw",)

    def __init__(self, gw: GatewayState) -> None:
        self._gw = gw

    def authenticate(self, request: web.Request) -> Principal:
        """The caller of ``request`` (its bearer token through the authenticator chain)."""
        return self._gw.core.auth.authenticate_request(request.headers)

    async def read_body(self, request: web.Request) -> dict[str, Any]:
        """The JSON body within ``server.max_request_bytes`` and ``server.body_timeout_s``."""
        gw = self._gw
        return await read_json(request, gw.max_request_bytes, gw.body_timeout_s)

    def check_model(self, principal: Principal, model: str) -> None:
        """404 unless ``principal`` may use ``model`` and an alias serves it."""
        self._gw.check_model(principal, model)

    async def serve(
        self,
        request: web.Request,
        endpoint: RoutedEndpoint,
        principal: Principal,
        body: dict[str, Any],
        started: float,
        wire: ResponseWire | None = None,
        bind: Callable[[GatewayRequest], None] | None = None,
    ) -> web.StreamResponse:
        """`fleetgate.api.completions.serve`: the path after authentication and parsing."""
        return await completions.serve(
            request, self._gw, endpoint, principal, body, started, wire, bind
        )

    async def answer(
        self,
        endpoint: RoutedEndpoint,
        principal: Principal,
        body: dict[str, Any],
        *,
        request_id: str,
        headers: dict[str, str],
        batch: bool = False,
    ) -> tuple[int, dict[str, Any]]:
        """`fleetgate.api.completions.answer`: the path for a request not sent over HTTP."""
        return await completions.answer(
            self._gw, endpoint, principal, body, request_id=request_id, headers=headers,
            batch=batch,
        )  # fmt: skip

    def stages(self) -> Sequence[Stage]:
        """The stages in request-path order (set once every feature is built: read it when
        a request runs, not when a feature is built)."""
        return self._gw.stages

    def record(self, req: GatewayRequest) -> None:
        """Record a finished request as the path does (metrics, access log)."""
        gw = self._gw
        record_exchange(req, gw.metrics, gw.access_log)


REQUEST_PATH: Port[RequestPath] = Port("request-path")
"""The request path (provided by the core feature, first in the feature list)."""
