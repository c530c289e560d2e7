from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web
from PIL import Image


def make_png(
    width: int = 64, height: int = 48, color: tuple[int, int, int] = (200, 30, 30)
) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def png_bytes() -> bytes:
    return make_png()


@pytest.fixture
def png_factory() -> Callable[..., bytes]:
    return make_png


@pytest.fixture
async def image_server(png_bytes: bytes) -> AsyncIterator[tuple[str, list[str]]]:
    """A 127.0.0.1 server; yields its base URL and the list of paths it was asked for."""
    hits: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        hits.append(request.path)
        if request.path == "/img.png":
            return web.Response(body=png_bytes, content_type="image/png")
        if request.path == "/lie.png":
            return web.Response(body=b"<html>not an image</html>", content_type="image/png")
        if request.path == "/to-private":
            raise web.HTTPFound("http://10.0.0.7/img.png")
        if request.path == "/to-self":
            raise web.HTTPFound("/img.png")
        if request.path == "/loop":
            raise web.HTTPFound("/loop")
        if request.path == "/big":
            resp = web.StreamResponse()
            await resp.prepare(request)
            for _ in range(64):
                await resp.write(b"\0" * 16384)
            return resp
        if request.path == "/slow":
            await asyncio.sleep(1.0)
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", hits
    finally:
        await runner.cleanup()
