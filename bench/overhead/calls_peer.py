"""The other side of ``calls.py``'s measured gateway: its upstream and its client, one process.

The gateway under measurement (``calls_probe.py``) is configured with this process as its
upstream and tells it, over ``POST /drive``, to send it N chat completions one after another
and answer when they are done; nothing of the client's or the upstream's work is counted in the
measured process.

Streams go in lockstep: the upstream writes event k+1 only once the client has received event
k through the gateway (or after ``STALL_S``, counted as a stall), so every event reaches the
gateway on a read of its own, as an engine's tokens do, whatever the machine's load: the calls
and allocations per chunk do not depend on timing.

    python calls_peer.py --port 9100       # prints "PEER <port>" once it listens
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, field

import aiohttp
import orjson
import uvloop
from aiohttp import web
from upstream import JSON_HEADERS, SSE_HEADERS, Bodies, Upstream
from wrkrun import request_body

CHAT_PATH = "/v1/chat/completions"
STALL_S = 0.25


@dataclass
class Progress:
    """How many events the client has received of the stream in flight."""

    seen: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    stalls: int = 0

    def add(self, events: int) -> None:
        self.seen += events
        self.changed.set()

    async def reach(self, count: int) -> None:
        """Wait until the client has seen ``count`` events, or ``STALL_S``."""
        while self.seen < count:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), STALL_S)
            except TimeoutError:
                self.stalls += 1
                return


@dataclass
class Peer(Upstream):
    """The instant upstream (``upstream.Upstream``), with lockstep streams and ``/drive``."""

    progress: Progress = field(default_factory=Progress)
    streams: dict[int, Bodies] = field(default_factory=dict)
    session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/drive" and request.method == "POST":
            return await self._drive(request)
        return await super().handle(request)

    async def _chat(self, request: web.BaseRequest) -> web.StreamResponse:
        payload = orjson.loads(await request.read())
        if not payload.get("stream"):
            return web.Response(body=self.bodies.completion, headers=JSON_HEADERS)
        events = [*self.bodies.sse_events, self.bodies.sse_usage_event, b"data: [DONE]\n\n"]
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        for k, event in enumerate(events):
            await self.progress.reach(k)
            await response.write(event)
        await response.write_eof()
        return response

    async def _drive(self, request: web.BaseRequest) -> web.Response:
        """``{"url", "key", "mode": "json"|"sse", "count", "repeat"}``: send the requests."""
        order = orjson.loads(await request.read())
        self.bodies = self.streams.setdefault(order["repeat"], Bodies.build(order["repeat"]))
        stream = order["mode"] == "sse"
        body = request_body(stream)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {order['key']}"}
        if self.session is None:
            self.session = aiohttp.ClientSession()
        stalls = self.progress.stalls
        for _ in range(int(order["count"])):
            problem = await self._one(order["url"] + CHAT_PATH, body, headers, stream)
            if problem is not None:
                return web.json_response({"error": problem})
        return web.json_response({"ok": True, "stalls": self.progress.stalls - stalls})

    async def _one(
        self, url: str, body: bytes, headers: dict[str, str], stream: bool
    ) -> str | None:
        assert self.session is not None
        self.progress.seen = 0
        async with self.session.post(url, data=body, headers=headers) as response:
            received = b""
            async for data in response.content.iter_any():
                before = received.count(b"\n\n")
                received += data
                self.progress.add(received.count(b"\n\n") - before)
        if response.status != 200:
            return f"HTTP {response.status} {received[:200]!r}"
        expected = b"data: [DONE]" if stream else b'"choices"'
        return None if expected in received else f"no {expected!r} in {received[:200]!r}"


async def serve(port: int) -> None:
    peer = Peer()
    runner = web.ServerRunner(web.Server(peer.handle, access_log=None), handle_signals=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"PEER {port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        if peer.session is not None:
            await peer.session.close()
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    uvloop.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
