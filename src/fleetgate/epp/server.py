"""The picker's gRPC server: Envoy's ``ExternalProcessor`` and the gRPC health services.

One `grpc.aio` server on the gateway's event loop: each ext_proc stream is one
`fleetgate.epp.exchange.Exchange`; an error in one stream ends that stream (Envoy applies its
``failure_mode_allow``) and never the server. Health, per the protocol: ``liveness`` serves
while the process answers; ``readiness``, the ext_proc service's name and the overall status
(``""``) serve once the gateway has started with nothing missing, the endpoints are synced
(with ``--pool-name``: the InferencePool's pods listed, `fleetgate.epp.pool_watch`) and, with a
`LeaderLease`, only on the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from fleetgate.api.state import GatewayState
from fleetgate.epp import protocol
from fleetgate.epp.exchange import EppOptions, Exchange
from fleetgate.epp.lease import LeaderLease
from fleetgate.epp.picker import EndpointPicker

__all__ = ["EXT_PROC_SERVICE", "EppServer", "ExternalProcessor"]

log = logging.getLogger("fleetgate.epp")

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
_MAX_MESSAGES = 10_000_000  # messages of one stream at most (a 500-token answer is ~500)


class ExternalProcessor(ext_proc_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """``Process``: one bidirectional stream per HTTP request.

    The end of a response (its headers in header-only mode, its last chunk when streamed) is
    settled (billed, recorded, the pick's counts given back) after its reply is sent: Envoy
    forwards the response only once it has that reply.

    The message that carries the pick (the request body's last chunk) may wait for a pool to
    wake: not answered within ``more_time_after_s``, Envoy is asked for ``more_time_s`` more
    on it (`protocol.more_time`) before its ``message_timeout`` fires."""

    def __init__(
        self,
        exchange: Callable[[], Exchange],
        more_time_after_s: float = 0.1,
        more_time_s: float = 10.0,
    ) -> None:
        self._exchange = exchange
        self._after = more_time_after_s
        self._more = more_time_s

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
                if msg.WhichOneof("request") == "response_body" and not (
                    msg.response_body.end_of_stream
                ):  # most of a streamed answer's messages: read at once, no coroutine
                    reply = exchange.chunk(msg)
                elif _picks(msg):
                    async with contextlib.aclosing(self._pick(exchange, msg)) as replies:
                        async for reply in replies:  # more time asked (a pool wakes), the pick
                            yield reply
                    reply = None
                else:
                    reply = await exchange.handle(msg, settle=False)
                if reply is not None:
                    yield reply
                if exchange.settle_due:  # the response ended: billed once its reply is out
                    await exchange.after_reply()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("ext_proc stream failed")
            await context.abort(grpc.StatusCode.INTERNAL, "the picker failed on this request")
        finally:
            if exchange.open:  # the common stream has settled already: no task to make
                # shielded: a cancelled stream (client gone) still settles and bills
                await asyncio.shield(exchange.close())

    async def _pick(self, exchange: Exchange, msg: Any) -> AsyncGenerator[Any, None]:
        """The replies to the message that carries the pick: more time asked of Envoy when the
        pick waits (for a pool to wake), then the pick."""
        task = asyncio.ensure_future(exchange.handle(msg, settle=False))
        try:
            done, _ = await asyncio.wait((task,), timeout=self._after)
            if not done:  # waiting for a pool: Envoy's timer is extended
                yield protocol.more_time(self._more)
            reply = await task
        finally:
            if not task.done():  # the stream ended (client gone)
                task.cancel()
        if reply is not None:
            yield reply


def _picks(msg: Any) -> bool:
    """The message answered with the pick: the request body's last chunk, not observed."""
    return (
        msg.WhichOneof("request") == "request_body"
        and msg.request_body.end_of_stream
        and not msg.observability_mode
    )


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
        endpoints_synced: Callable[[], bool] | None = None,
    ) -> None:
        self.gw = gw
        self.options = options
        self._address = f"{host}:{port}"
        self.picker = EndpointPicker(
            gw.dispatcher, gw.tables, gw.health, options.fallbacks, options.wake_hold_s
        )
        self.health = health.aio.HealthServicer()
        self.lease = None if lease is None else lease(self._leader_changed)
        # the endpoint source has its first set (None: the config's, synced at start)
        self._endpoints_synced = endpoints_synced or (lambda: True)
        self._server: Any = None
        self._synced = False
        self.follow_s = 1.0  # how often readiness is looked at again
        self._watch: asyncio.Task[None] | None = None
        self._warned: set[str] = set()  # aliases whose output filters cannot run here
        self._handoff: dict[str, Exchange] = {}  # observed mode: picks awaiting their observer

    def exchange(self) -> Exchange:
        return Exchange(
            self.gw, self.picker, self.options, warned=self._warned, handoff=self._handoff
        )

    @property
    def ready(self) -> bool:
        """Synced (started, nothing missing) and, with a lease, the leader."""
        leader = self.lease is None or self.lease.leader
        return self._synced and leader

    async def start(self) -> int:
        """Serve; returns the port bound (``port=0``: a free one)."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        opts = self.options
        processor = ExternalProcessor(self.exchange, opts.more_time_after_s, opts.more_time_s)
        ext_proc_grpc.add_ExternalProcessorServicer_to_server(processor, server)
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
            synced = self._endpoints_synced() and not self.gw.features.missing()
            if synced != self._synced:
                self._synced = synced
                await self._publish()
            await asyncio.sleep(self.follow_s)

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
