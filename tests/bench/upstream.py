"""A tiny OpenAI-compatible upstream with known timing, run in its own thread and loop.

``first_ms`` before the first chunk, then ``gap_ms`` between chunks; each chunk carries
``tokens_per_chunk`` tokens of the request's ``max_tokens``; usage is sent when asked for (and
on every chunk with ``continuous_usage_stats``). ``first_ms=gap_ms=0`` answers instantly.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class Upstream:
    first_ms: float = 0.0
    gap_ms: float = 0.0
    tokens_per_chunk: int = 1
    fail_every: int = 0
    require_key: str | None = None  # else 401, as a gateway answers a wrong key
    seen: list[dict[str, object]] = field(default_factory=list)
    count: int = 0


def _chunk(endpoint: str, text: str, usage: dict[str, int] | None) -> bytes:
    if endpoint == "chat":
        choice = {"index": 0, "delta": {"content": text}}
    else:
        choice = {"index": 0, "text": text}
    payload: dict[str, object] = {"choices": [choice]}
    if usage is not None:
        payload["usage"] = usage
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def make_app(up: Upstream) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        up.count += 1
        if up.require_key and request.headers.get("Authorization") != f"Bearer {up.require_key}":
            return web.json_response({"error": {"message": "Invalid API key."}}, status=401)
        if len(up.seen) < 50:
            up.seen.append(body)
        if up.fail_every and up.count % up.fail_every == 0:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        endpoint = "chat" if request.path.endswith("chat/completions") else "completions"
        n = int(body.get("max_tokens") or 4)
        prompt_tokens = 7
        if not body.get("stream"):
            await asyncio.sleep((up.first_ms + up.gap_ms * max(0, n - 1)) / 1000)
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n}
            msg = {"message": {"role": "assistant", "content": "x " * n}, "text": "x " * n}
            return web.json_response({"choices": [msg], "usage": usage})
        opts = body.get("stream_options") or {}
        cont = bool(opts.get("continuous_usage_stats"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if up.first_ms:
            await asyncio.sleep(up.first_ms / 1000)
        done = 0
        while done < n:
            k = min(up.tokens_per_chunk, n - done)
            if done and up.gap_ms:
                await asyncio.sleep(up.gap_ms / 1000)
            done += k
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": done} if cont else None
            await resp.write(_chunk(endpoint, " x" * k, usage))
        if opts.get("include_usage"):
            final = {"prompt_tokens": prompt_tokens, "completion_tokens": n}
            await resp.write(b"data: " + orjson.dumps({"choices": [], "usage": final}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "up-model"}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", handle)
    app.router.add_post("/v1/completions", handle)
    return app


@contextmanager
def serve(up: Upstream) -> Iterator[str]:
    """Run the upstream on 127.0.0.1 (ephemeral port) in a thread; yield its base URL."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, object] = {}

    async def start() -> None:
        runner = web.AppRunner(make_app(up), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        server = site._server
        assert server is not None
        holder["port"] = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        started.set()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()
        runner = holder["runner"]
        assert isinstance(runner, web.AppRunner)
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield f"http://127.0.0.1:{holder['port']}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def _sim_main(config: object, urls: Any, stop: Any) -> None:
    from fleetgate.sim import start_sim

    async def main() -> None:
        runner, url = await start_sim(config)  # type: ignore[arg-type]
        urls.put(url)
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await runner.cleanup()

    import uvloop

    uvloop.run(main())


@contextmanager
def serve_sim(config: object) -> Iterator[str]:
    """Run fleetgate's simulator in its own process (no GIL sharing with the load generator,
    as in a real deployment); yield its ``/v1`` base URL."""
    ctx = mp.get_context("spawn")
    urls: Any = ctx.Queue()
    stop = ctx.Event()
    proc = ctx.Process(target=_sim_main, args=(config, urls, stop), daemon=True)
    proc.start()
    try:
        yield f"{urls.get(timeout=60)}/v1"
    finally:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join()
        urls.close()
        urls.join_thread()
