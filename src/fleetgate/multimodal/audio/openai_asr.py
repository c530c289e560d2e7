"""Transcription through an OpenAI-compatible ``/v1/audio/transcriptions`` upstream.

vLLM serving Whisper, or a hosted provider. Each segment is sent as a 16 kHz WAV in its own
multipart request; up to ``concurrency`` run at once.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Sequence

import aiohttp
import numpy as np
import numpy.typing as npt

from fleetgate.errors import UpstreamBadResponse
from fleetgate.extras import require
from fleetgate.multimodal.audio.decode import TARGET_RATE
from fleetgate.multimodal.upstream import SideServiceClient

__all__ = ["OpenAITranscriber", "wav_bytes"]

Samples = npt.NDArray[np.float32]


def wav_bytes(samples: Samples, rate: int = TARGET_RATE) -> bytes:
    """``samples`` as a 16-bit PCM WAV file."""
    sf = require("soundfile", extra="audio", purpose="encoding audio")
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


class OpenAITranscriber(SideServiceClient):
    """Sends segments to an OpenAI-compatible transcription endpoint.

    Example::

        asr = OpenAITranscriber("http://whisper:8000/v1", model="openai/whisper-large-v3",
                                http=resources.http)
        texts = await asr.transcribe_segments(segments)
        await asr.aclose()
    """

    service = "transcription"
    path = "/audio/transcriptions"

    async def transcribe_segments(
        self, segments: Sequence[Samples], *, language: str | None = None, prompt: str | None = None
    ) -> list[str]:
        """Transcribe each segment with a concurrent upstream request."""
        jobs = [self._one(seg, language, prompt) for seg in segments]
        return list(await asyncio.gather(*jobs))

    async def _one(self, samples: Samples, language: str | None, prompt: str | None) -> str:
        form = aiohttp.FormData()
        form.add_field("file", wav_bytes(samples), filename="segment.wav", content_type="audio/wav")
        form.add_field("model", self.model)
        form.add_field("response_format", "json")
        if language:
            form.add_field("language", language)
        if prompt:
            form.add_field("prompt", prompt)
        data = await self._post(data=form)
        try:
            payload = json.loads(data)
        except ValueError as exc:
            raise UpstreamBadResponse("transcription upstream sent invalid JSON") from exc
        if not isinstance(payload, dict) or not isinstance(payload.get("text"), str):
            raise UpstreamBadResponse("transcription upstream answer has no 'text'")
        return str(payload["text"]).strip()

    def _error_body(self, data: bytes) -> object:
        try:
            return json.loads(data)
        except ValueError:
            return data.decode(errors="replace")
