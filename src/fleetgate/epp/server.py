"""The picker's gRPC server: Envoy's ``ExternalProcessor`` and the gRPC health services.

One `grpc.aio` server on the gateway's event loop: each ext_proc stream is one
`fleetgate.epp.exchange.Exchange`; an error in one stream ends that stream (Envoy applies its
``failure_mode_allow``) and never the server. Health, per the protocol: ``liveness`` serves
while the process answers; ``readiness``, the ext_proc service's name and the overall status
(``""``) serve once the gateway has started with nothing missing and, with a `LeaderLease`,
only on the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from fleetgate.api.state import GatewayState
from fleetgate.epp.exchange import EppOptions, Exchange
from fleetgate.epp.lease import LeaderLease
from fleetgate.epp.picker import EndpointPicker

__all__ = ["EXT_PROC_SERVICE", "EppServer", "ExternalProcessor"]

log = logging.getLogger("fleetgate.epp")

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
_MAX_MESSAGES = 10_000_000  # messages of one stream at most (a 500-token answer is ~500)


class ExternalProcessor(ext_proc_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """``Process``: one bidirectional stream per HTTP request."""

    def __init__(self, exchange: Callable[[], Exchange]) -> None:
        self._exchange = exchange

    async def Process(  # noqa: N802 - the gRPC method's name
        self, requests: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        exchange = self._exchange()
        try:
            count = 0
            async for msg in requests:
                count += 1
                if count > _MAX_MESSAGES:
                    break
                reply = await exchange.handle(msg)
                if reply is not None:
                    yield reply
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("ext_proc stream failed")
            await context.abort(grpc.StatusCode.INTERNAL, "the picker failed on this request")
        finally:
            if exchange.open:  # the common stream has settled already: no task to make
                # shielded: a cancelled stream (client gone) still settles and bills
                await asyncio.shield(exchange.close())


class EppServer:
    """The picker's gRPC server over a built gateway (``gw``: its state after ``create_app``).

    Example::

        server = EppServer(gw, EppOptions(), host="127.0.0.1", port=9002)
        port = await server.start()
        ...
        await server.aclose()
    """

    def __init__(
        self,
        gw: GatewayState,
        options: EppOptions,
        *,
        host: str = "127.0.0.1",
        port: int = 9002,
        lease: Callable[[Callable[[bool], None]], LeaderLease] | None = None,
    ) -> None:
        self.gw = gw
        self.options = options
        self._address = f"{host}:{port}"
        self.picker = EndpointPicker(gw.dispatcher, gw.tables, gw.health, options.fallbacks)
        self.health = health.aio.HealthServicer()
        self.lease = None if lease is None else lease(self._leader_changed)
        self._server: Any = None
        self._synced = False
        self._watch: asyncio.Task[None] | None = None
        self._warned: set[str] = set()  # aliases whose output filters cannot run here

    def exchange(self) -> Exchange:
        return Exchange(self.gw, self.picker, self.options, warned=self._warned)

    @property
    def ready(self) -> bool:
        """Synced (started, nothing missing) and, with a lease, the leader."""
        leader = self.lease is None or self.lease.leader
        return self._synced and leader

    async def start(self) -> int:
        """Serve; returns the port bound (``port=0``: a free one)."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        ext_proc_grpc.add_ExternalProcessorServicer_to_server(
            ExternalProcessor(self.exchange), server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        port = int(server.add_insecure_port(self._address))
        await self.health.set("liveness", health_pb2.HealthCheckResponse.SERVING)
        await self._publish()
        await server.start()
        self._server = server
        if self.lease is not None:
            await self.lease.start()
        self._watch = asyncio.create_task(self._follow(), name="epp-readiness")
        return port

    def _leader_changed(self, leader: bool) -> None:
        asyncio.get_running_loop().create_task(self._publish())

    async def _follow(self) -> None:
        while True:  # until aclose: readiness follows what the gateway still lacks
            synced = not self.gw.features.missing()
            if synced != self._synced:
                self._synced = synced
                await self._publish()
            await asyncio.sleep(1.0)

    async def _publish(self) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("readiness", EXT_PROC_SERVICE, ""):
            await self.health.set(service, status)

    async def aclose(self, grace_s: float = 5.0) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        if self.lease is not None:
            await self.lease.aclose()
        server, self._server = self._server, None
        if server is not None:
            await self.health.enter_graceful_shutdown()
            await server.stop(grace_s)
