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
import soundfile as sf

from fleetgate.errors import (
    UpstreamBadResponse,
    UpstreamConnectError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from fleetgate.multimodal.audio.decode import TARGET_RATE

__all__ = ["OpenAITranscriber", "wav_bytes"]

Samples = npt.NDArray[np.float32]


def wav_bytes(samples: Samples, rate: int = TARGET_RATE) -> bytes:
    """``samples`` as a 16-bit PCM WAV file."""
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _json_or_text(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


class OpenAITranscriber:
    """Sends segments to an OpenAI-compatible transcription endpoint.

    Example::

        asr = OpenAITranscriber("http://whisper:8000/v1", model="openai/whisper-large-v3")
        texts = await asr.transcribe_segments(segments)
        await asr.aclose()
    """

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
        self.url = base_url.rstrip("/") + "/audio/transcriptions"
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._limit = asyncio.Semaphore(concurrency)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._owns_session = session is None

    async def transcribe_segments(
        self, segments: Sequence[Samples], *, language: str | None = None, prompt: str | None = None
    ) -> list[str]:
        """Transcribe each segment with a concurrent upstream request."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        jobs = [self._one(self._session, seg, language, prompt) for seg in segments]
        return list(await asyncio.gather(*jobs))

    async def _one(
        self,
        session: aiohttp.ClientSession,
        samples: Samples,
        language: str | None,
        prompt: str | None,
    ) -> str:
        form = aiohttp.FormData()
        form.add_field("file", wav_bytes(samples), filename="segment.wav", content_type="audio/wav")
        form.add_field("model", self.model)
        form.add_field("response_format", "json")
        if language:
            form.add_field("language", language)
        if prompt:
            form.add_field("prompt", prompt)
        async with self._limit:
            try:
                async with session.post(self.url, data=form, headers=self._headers) as resp:
                    if resp.status >= 400:
                        body = _json_or_text(await resp.text())
                        raise UpstreamStatusError(
                            f"transcription upstream answered {resp.status}",
                            upstream_status=resp.status,
                            body=body,
                        )
                    payload = await resp.json(content_type=None)
            except TimeoutError as exc:
                raise UpstreamTimeout("transcription upstream timed out") from exc
            except (aiohttp.ContentTypeError, ValueError) as exc:
                raise UpstreamBadResponse("transcription upstream sent invalid JSON") from exc
            except aiohttp.ClientError as exc:
                raise UpstreamConnectError(f"transcription upstream failed: {exc}") from exc
        if not isinstance(payload, dict) or not isinstance(payload.get("text"), str):
            raise UpstreamBadResponse("transcription upstream answer has no 'text'")
        return str(payload["text"]).strip()

    async def aclose(self) -> None:
        """Close the HTTP session if this transcriber created it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None
