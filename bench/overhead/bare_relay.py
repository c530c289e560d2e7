"""The thinnest Python proxy: the ceiling a Python gateway can reach on this box.

An aiohttp server and one aiohttp ``ClientSession`` on uvloop. It forwards the request body to
the same path on the upstream and relays the response bytes back: a body with a length is
read and returned whole, anything else (SSE) is streamed as it arrives. No auth, no parsing,
no routing, no metrics, no logging.

    python bench/overhead/bare_relay.py --port 9200 --upstream http://127.0.0.1:9100
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import aiohttp
import uvloop
from aiohttp import web

PASSED_HEADERS = ("Content-Type", "Cache-Control")


class Relay:
    """Forward every request to ``upstream`` over one pooled client session."""

    def __init__(self, upstream: str, session: aiohttp.ClientSession) -> None:
        self._upstream = upstream.rstrip("/")
        self._session = session

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Relay one request; stream the response when it has no length."""
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with self._session.request(
            request.method, self._upstream + request.path_qs, data=body, headers=headers
        ) as upstream:
            out_headers = {k: upstream.headers[k] for k in PASSED_HEADERS if k in upstream.headers}
            if upstream.content_length is not None:
                return web.Response(
                    status=upstream.status, body=await upstream.read(), headers=out_headers
                )
            response = web.StreamResponse(status=upstream.status, headers=out_headers)
            await response.prepare(request)
            async for data in upstream.content.iter_any():
                await response.write(data)
            await response.write_eof()
            return response


async def serve(host: str, port: int, upstream: str) -> None:
    """Serve until SIGTERM or SIGINT, then close the server and the session."""
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
    async with aiohttp.ClientSession(
        connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent",)
    ) as session:
        server = web.Server(Relay(upstream, session).handle, access_log=None)
        runner = web.ServerRunner(server, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=4096)
        await site.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()


def main() -> None:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:9100")
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port, args.upstream))


if __name__ == "__main__":
    main()
