"""Images decode in worker processes: a refused image is still a 400 with its code, and a
decoder that dies costs one image; the next one gets a new worker."""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import zlib
from collections.abc import AsyncIterator, Callable

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.images.isolated import IsolatedImageProcessor
from fleetgate.multimodal.images.process import ImageProcessor, ProcessingParams


def _png_header_only(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 1024)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.fixture
async def isolated() -> AsyncIterator[IsolatedImageProcessor]:
    processor = IsolatedImageProcessor(ProcessingParams(max_pixels=32 * 32), workers=1)
    yield processor
    await processor.aclose()


async def test_the_same_image_comes_out_as_in_process_decoding(
    isolated: IsolatedImageProcessor, png_factory: Callable[..., bytes]
) -> None:
    raw = png_factory(300, 200)
    out = await isolated.process(raw, param="p")
    assert out == ImageProcessor(isolated.params).process(raw, param="p")
    assert os.getpid() not in isolated.workers.pids()


async def test_a_bomb_is_refused_from_its_header_with_its_code(
    isolated: IsolatedImageProcessor,
) -> None:
    with pytest.raises(InvalidRequest) as info:
        await isolated.process(_png_header_only(100_000, 100_000), param="messages[0]")
    assert (info.value.code, info.value.param) == ("image_too_large", "messages[0]")


async def test_a_killed_decoder_is_replaced_for_the_next_image(
    isolated: IsolatedImageProcessor, png_factory: Callable[..., bytes]
) -> None:
    await isolated.process(png_factory(), param=None)
    (pid,) = isolated.workers.pids()
    os.kill(pid, signal.SIGKILL)
    while pid in isolated.workers.pids():
        await asyncio.sleep(0.01)
    out = await isolated.process(png_factory(40, 40), param=None)
    assert (out.width, out.height) == (32, 32)
    assert isolated.workers.pids() and pid not in isolated.workers.pids()
