"""TTS through an OpenAI-compatible ``/v1/audio/speech`` upstream (asks for 24 kHz ``pcm``)."""

from __future__ import annotations

import asyncio

import aiohttp

from fleetgate.errors import UpstreamConnectError, UpstreamStatusError, UpstreamTimeout
from fleetgate.multimodal.speech.tts import SynthesizedAudio

__all__ = ["OpenAISynthesizer"]


class OpenAISynthesizer:
    """Speech from an OpenAI-compatible upstream.

    Example::

        tts = OpenAISynthesizer("https://api.openai.com/v1", model="gpt-4o-mini-tts", api_key=k)
        audio = await tts.synthesize("Hello", voice="alloy")
        await tts.aclose()
    """

    SAMPLE_RATE = 24_000

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        concurrency: int = 8,
        timeout_s: float = 60.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/audio/speech"
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._limit = asyncio.Semaphore(concurrency)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._owns_session = session is None

    async def synthesize(
        self, text: str, *, voice: str = "alloy", speed: float = 1.0
    ) -> SynthesizedAudio:
        """Ask the upstream for raw PCM of ``text``."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        body = {
            "model": self.model,
            "input": text,
            "voice": voice,
            "speed": speed,
            "response_format": "pcm",
        }
        async with self._limit:
            try:
                async with self._session.post(self.url, json=body, headers=self._headers) as resp:
                    data = await resp.read()
                    if resp.status >= 400:
                        raise UpstreamStatusError(
                            f"speech upstream answered {resp.status}",
                            upstream_status=resp.status,
                            body=data.decode(errors="replace"),
                        )
            except TimeoutError as exc:
                raise UpstreamTimeout("speech upstream timed out") from exc
            except aiohttp.ClientError as exc:
                raise UpstreamConnectError(f"speech upstream failed: {exc}") from exc
        return SynthesizedAudio(data[: len(data) // 2 * 2], self.SAMPLE_RATE)

    async def aclose(self) -> None:
        """Close the HTTP session if this synthesizer created it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None
