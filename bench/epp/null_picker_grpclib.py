"""``null_picker.py`` on grpclib: the gRPC exchange alone, without gRPC's C core.

grpclib is gRPC in pure Python (HTTP/2 by ``h2``, on the asyncio loop itself: no poller thread
handing events to the loop). It is not a dependency of fleetgate: install it beside the run
(``pip install --target DIR grpclib``) and give ``--path DIR``. Same answers as
``null_picker.py``; what it costs against that one is what grpc.aio's core costs.

    python bench/epp/null_picker_grpclib.py --port 9301 --endpoints 127.0.0.1:9100 --path DIR
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import sys
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--endpoints", required=True, help="ip:port,ip:port")
    parser.add_argument("--path", default=None, help="where grpclib is installed")
    args = parser.parse_args()
    if args.path:
        sys.path.insert(0, args.path)
    import uvloop
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
    from grpclib.const import Cardinality, Handler  # type: ignore[import-not-found]
    from grpclib.server import Server  # type: ignore[import-not-found]

    from fleetgate.epp import protocol

    endpoints = itertools.cycle(args.endpoints.split(","))

    class NullPicker:
        async def process(self, stream: Any) -> None:
            async for msg in stream:
                kind = msg.WhichOneof("request")
                if kind == "request_headers":
                    await stream.send_message(protocol.continue_headers(request=True))
                elif kind == "request_body":
                    await stream.send_message(protocol.picked([next(endpoints)], None, {}))
                elif kind == "response_headers":
                    await stream.send_message(protocol.continue_headers(request=False))
                elif kind == "response_body":
                    await stream.send_message(protocol.continue_body(request=False))

        def __mapping__(self) -> dict[str, Any]:
            return {
                "/envoy.service.ext_proc.v3.ExternalProcessor/Process": Handler(
                    self.process, Cardinality.STREAM_STREAM,
                    pb.ProcessingRequest, pb.ProcessingResponse,
                )
            }  # fmt: skip

    async def serve() -> None:
        server = Server([NullPicker()])
        await server.start("127.0.0.1", args.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        server.close()
        await server.wait_closed()

    uvloop.run(serve())


if __name__ == "__main__":
    main()
