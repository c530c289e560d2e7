"""The cheapest picker grpc.aio allows: the gRPC exchange alone, as a baseline for the picker.

The same ext_proc streams as ``fleetgate epp`` (request headers, body, response headers, and
the response body when Envoy sends it, or an observing filter's stream, read and never
answered), answered with the protocol's destination header and
metadata for the engines in turn, and nothing else: no key, no limits, no routing, no billing.
What ``fleetgate epp`` costs above it is fleetgate's work; what it costs itself is gRPC's.

    python bench/epp/null_picker.py --port 9300 --endpoints 127.0.0.1:9100,127.0.0.1:9101
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
from collections.abc import AsyncIterator
from typing import Any

import grpc
import uvloop
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from fleetgate.epp import protocol


class NullPicker(ext_proc_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, endpoints: list[str]) -> None:
        self._next = itertools.cycle(endpoints)

    async def Process(  # noqa: N802 - the gRPC method's name
        self, requests: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        async for msg in requests:
            if msg.observability_mode:  # an observing filter's message: never answered
                continue
            kind = msg.WhichOneof("request")
            if kind == "request_headers":
                yield protocol.continue_headers(request=True)
            elif kind == "request_body":
                yield protocol.picked([next(self._next)], None, {})
            elif kind == "response_headers":
                yield protocol.continue_headers(request=False)
            elif kind == "response_body":
                yield protocol.continue_body(request=False)


async def serve(port: int, endpoints: list[str]) -> None:
    server = grpc.aio.server()
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(NullPicker(endpoints), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--endpoints", required=True, help="ip:port,ip:port")
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.endpoints.split(",")))


if __name__ == "__main__":
    main()
