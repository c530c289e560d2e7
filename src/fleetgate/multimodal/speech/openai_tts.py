"""TTS through an OpenAI-compatible ``/v1/audio/speech`` upstream (asks for 24 kHz ``pcm``)."""

from __future__ import annotations

from fleetgate.multimodal.speech.tts import SynthesizedAudio
from fleetgate.multimodal.upstream import SideServiceClient

__all__ = ["OpenAISynthesizer"]


class OpenAISynthesizer(SideServiceClient):
    """Speech from an OpenAI-compatible upstream.

    Example::

        tts = OpenAISynthesizer("https://api.openai.com/v1", model="gpt-4o-mini-tts", api_key=k,
                                http=resources.http)
        audio = await tts.synthesize("Hello", voice="alloy")
        await tts.aclose()
    """

    SAMPLE_RATE = 24_000

    service = "speech"
    path = "/audio/speech"

    async def synthesize(
        self, text: str, *, voice: str = "alloy", speed: float = 1.0
    ) -> SynthesizedAudio:
        """Ask the upstream for raw PCM of ``text``."""
        body = {
            "model": self.model,
            "input": text,
            "voice": voice,
            "speed": speed,
            "response_format": "pcm",
        }
        data = await self._post(json=body)
        return SynthesizedAudio(data[: len(data) // 2 * 2], self.SAMPLE_RATE)
