import asyncio
import io
from collections.abc import AsyncIterator

import numpy as np
import pytest
import soundfile as sf
from aiohttp import web
from tests.resources.support import outbound

from fleetgate.errors import UpstreamStatusError
from fleetgate.multimodal.audio.openai_asr import OpenAITranscriber
from fleetgate.resources.outbound import OutboundHttp

__all__ = ["outbound"]


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[str, list[dict[str, object]]]]:
    seen: list[dict[str, object]] = []
    active = {"now": 0, "max": 0}

    async def handler(request: web.Request) -> web.Response:
        form = await request.post()
        upload = form["file"]
        assert isinstance(upload, web.FileField)
        samples, rate = sf.read(io.BytesIO(upload.file.read()))
        if form["model"] == "broken":
            return web.json_response({"error": {"message": "bad model"}}, status=400)
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        await asyncio.sleep(0.05)
        active["now"] -= 1
        seen.append({"rate": rate, "len": len(samples), "lang": form.get("language"),
                     "max_active": active["max"]})  # fmt: skip
        return web.json_response({"text": f" {len(samples)} samples "})

    app = web.Application()
    app.router.add_post("/v1/audio/transcriptions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", seen
    finally:
        await runner.cleanup()


async def test_segments_are_sent_concurrently_as_wav_and_kept_in_order(
    upstream: tuple[str, list[dict[str, object]]], outbound: OutboundHttp
) -> None:
    url, seen = upstream
    segments = [np.zeros(n, np.float32) for n in (1600, 3200, 4800)]
    asr = OpenAITranscriber(url, model="whisper", concurrency=3, http=outbound)
    try:
        texts = await asr.transcribe_segments(segments, language="en")
    finally:
        await asr.aclose()
    assert texts == ["1600 samples", "3200 samples", "4800 samples"]
    assert all(s["rate"] == 16000 and s["lang"] == "en" for s in seen)
    assert max(int(str(s["max_active"])) for s in seen) > 1


async def test_upstream_4xx_keeps_its_status(
    upstream: tuple[str, list[dict[str, object]]], outbound: OutboundHttp
) -> None:
    url, _ = upstream
    asr = OpenAITranscriber(url, model="broken", http=outbound)
    try:
        with pytest.raises(UpstreamStatusError) as info:
            await asr.transcribe_segments([np.zeros(160, np.float32)])
    finally:
        await asr.aclose()
    assert info.value.status == 400
    assert info.value.to_dict()["error"]["message"] == "bad model"
