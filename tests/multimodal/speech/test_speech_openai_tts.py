from collections.abc import AsyncIterator

import numpy as np
import pytest
from aiohttp import web
from tests.resources.support import outbound

from fleetgate.errors import UpstreamStatusError
from fleetgate.multimodal.speech.openai_tts import OpenAISynthesizer
from fleetgate.multimodal.speech.streamer import SpeechStreamer
from fleetgate.resources.outbound import OutboundHttp

__all__ = ["outbound"]


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[str, list[dict[str, object]]]]:
    bodies: list[dict[str, object]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        if body["voice"] == "bad":
            return web.json_response({"error": {"message": "unknown voice"}}, status=400)
        n = 240 * len(body["input"])  # 10 ms of 24 kHz audio per character
        return web.Response(body=np.full(n, len(bodies), "<i2").tobytes(), content_type="audio/pcm")

    app = web.Application()
    app.router.add_post("/v1/audio/speech", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", bodies
    finally:
        await runner.cleanup()


async def test_upstream_pcm_through_the_streamer(
    upstream: tuple[str, list[dict[str, object]]], outbound: OutboundHttp
) -> None:
    url, bodies = upstream
    tts = OpenAISynthesizer(url, model="tts-1", http=outbound)
    streamer = SpeechStreamer(tts, voice="nova")
    try:
        streamer.feed("Good morning, everyone. Today we ship the release.")
        streamer.finish()
        pieces = [p async for p in streamer]
    finally:
        await tts.aclose()
    assert [p.transcript for p in pieces] == [b["input"] for b in bodies]
    assert all(b["response_format"] == "pcm" and b["voice"] == "nova" for b in bodies)
    for piece in pieces:
        assert piece.audio.sample_rate == 24000
        assert len(piece.audio.pcm) == 2 * 240 * len(piece.transcript)


async def test_upstream_error_keeps_status(
    upstream: tuple[str, list[dict[str, object]]], outbound: OutboundHttp
) -> None:
    url, _ = upstream
    tts = OpenAISynthesizer(url, model="tts-1", http=outbound)
    try:
        with pytest.raises(UpstreamStatusError) as info:
            await tts.synthesize("hi", voice="bad")
    finally:
        await tts.aclose()
    assert info.value.status == 400
