"""Speech beside streamed text: chat completions with ``modalities: ["text", "audio"]``.

`SpokenStreamFilter` is a `fleetgate.contract.request.StreamFilter`. Text chunks pass through
untouched and their ``delta.content`` is fed to a `SpeechStreamer`, which cuts phrases and
synthesises
them concurrently; every finished phrase (in order) goes out as its own chunk with
``delta.audio = {"id", "data", "transcript"}`` (``data``: base64 pcm16, 24 kHz mono) as soon as
it is ready, i.e. while the text is still streaming. The chunk carrying ``finish_reason`` is
held until the last phrase is spoken. `SpokenResponseFilter` does the same for a whole
(non-streaming) response: ``message.audio`` with the reply spoken in ``format``.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from fleetgate.contract.request import FilterResult
from fleetgate.multimodal.speech.encode import encode_audio
from fleetgate.multimodal.speech.streamer import AudioDelta, SpeechStreamer
from fleetgate.multimodal.speech.tts import SpeechSynthesizer, SynthesizedAudio

__all__ = ["SpokenResponseFilter", "SpokenStreamFilter", "audio_format"]

_FORMATS = {"pcm16": "pcm", "wav": "wav", "mp3": "mp3", "flac": "flac", "opus": "opus"}


def audio_format(name: str) -> str:
    """The encoder format of an OpenAI ``audio.format`` (``pcm16`` -> ``pcm``); KeyError if
    unknown."""
    return _FORMATS[name]


class SpokenStreamFilter:
    """Adds ``delta.audio`` chunks to a chat stream while its text is written.

    Example::

        req.stream_filters.append(SpokenStreamFilter(SpeechStreamer(tts, voice="alloy")))
    """

    def __init__(self, streamer: SpeechStreamer) -> None:
        self.streamer = streamer
        self._template: dict[str, Any] | None = None
        self.first_audio_at: float | None = None

    def _audio_chunk(self, piece: AudioDelta) -> dict[str, Any]:
        base = self._template or {"object": "chat.completion.chunk"}
        if self.first_audio_at is None:
            self.first_audio_at = time.perf_counter()
        return {
            **base,
            "choices": [
                {"index": 0, "delta": {"audio": piece.to_chat_delta("pcm")}, "finish_reason": None}
            ],
        }

    async def feed(self, chunk: dict[str, Any]) -> FilterResult:
        if self._template is None:
            self._template = {
                k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk
            }
        finished = False
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(text, str) and text:
                self.streamer.feed(text)
            finished = finished or bool(choice.get("finish_reason"))
        if finished:
            # Everything still being spoken goes out before the chunk that ends the choice.
            return FilterResult([*await self._drain(), chunk])
        out = [chunk, *(self._audio_chunk(p) for p in self.streamer.ready())]
        return FilterResult(out)

    async def _drain(self) -> list[dict[str, Any]]:
        self.streamer.finish()
        return [self._audio_chunk(piece) async for piece in self.streamer]

    async def finish(self) -> FilterResult:
        return FilterResult(await self._drain())

    async def aclose(self) -> None:
        """Cancel synthesis still running (the stream ended early or the client left)."""
        await self.streamer.aclose()


class SpokenResponseFilter:
    """Speaks a whole chat response into ``choices[0].message.audio``."""

    def __init__(
        self, synthesizer: SpeechSynthesizer, *, voice: str, fmt: str, speed: float = 1.0
    ) -> None:
        self._synth = synthesizer
        self._voice = voice
        self._format = fmt
        self._speed = speed

    async def apply(self, response: dict[str, Any]) -> dict[str, Any]:
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return response
        message = choices[0].get("message")
        text = message.get("content") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(text, str) or not text.strip():
            return response
        streamer = SpeechStreamer(self._synth, voice=self._voice, speed=self._speed)
        pieces = [p async for p in streamer.stream(_once(text))]
        audio = _join([p.audio for p in pieces])
        data = base64.b64encode(encode_audio(audio, self._format)).decode()
        message["audio"] = {
            "id": streamer.audio_id,
            "data": data,
            "transcript": text,
            "expires_at": int(time.time()) + 3600,
        }
        return response


async def _once(text: str) -> Any:
    yield text


def _join(parts: list[SynthesizedAudio]) -> SynthesizedAudio:
    if not parts:
        return SynthesizedAudio(b"", 24_000)
    rate = parts[0].sample_rate
    return SynthesizedAudio(b"".join(p.pcm for p in parts if p.sample_rate == rate), rate)
