"""Speak text while it is still being written.

Text deltas go into a :class:`PhraseChunker`; each phrase is synthesised as soon as it is cut,
several at once (bounded), and the audio comes out strictly in phrase order. For chat
completions with ``modalities: ["text", "audio"]`` each piece becomes a ``delta.audio`` object
``{"id", "data", "transcript"}``.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

from fleetgate.multimodal.speech.chunker import PhraseChunker
from fleetgate.multimodal.speech.encode import encode_audio
from fleetgate.multimodal.speech.tts import SpeechSynthesizer, SynthesizedAudio

__all__ = ["AudioDelta", "SpeechStreamer"]


@dataclass(frozen=True, slots=True)
class AudioDelta:
    """One spoken phrase, in order."""

    id: str
    index: int
    transcript: str
    audio: SynthesizedAudio

    def to_chat_delta(self, fmt: str = "pcm") -> dict[str, Any]:
        """The ``choices[].delta.audio`` object: ``data`` is base64 of ``fmt`` (pcm16, 24 kHz)."""
        data = base64.b64encode(encode_audio(self.audio, fmt)).decode()
        return {"id": self.id, "data": data, "transcript": self.transcript}


class SpeechStreamer:
    """Synthesises phrases concurrently and yields them in order.

    Push text with :meth:`feed` (from the relay loop), call :meth:`finish` at the end, and read
    with ``async for delta in streamer`` or poll :meth:`ready` between text chunks. Or hand it
    an async iterable of text with :meth:`stream`. Always ``await streamer.aclose()``.

    Example::

        streamer = SpeechStreamer(EspeakSynthesizer(), voice="alloy")
        async for piece in streamer.stream(text_deltas):
            send({"delta": {"audio": piece.to_chat_delta()}})
    """

    def __init__(
        self,
        synthesizer: SpeechSynthesizer,
        *,
        voice: str = "alloy",
        speed: float = 1.0,
        max_concurrency: int = 4,
        chunker: PhraseChunker | None = None,
        audio_id: str | None = None,
    ) -> None:
        self._synth = synthesizer
        self._voice = voice
        self._speed = speed
        self._limit = asyncio.Semaphore(max_concurrency)
        self._chunker = chunker or PhraseChunker()
        self.audio_id = audio_id or f"audio_{uuid.uuid4().hex}"
        self._pending: deque[tuple[str, asyncio.Task[SynthesizedAudio]]] = deque()
        self._index = 0
        self._finished = False
        self._changed = asyncio.Event()

    def feed(self, delta: str) -> None:
        """Add streamed text; complete phrases start synthesising immediately."""
        if self._finished:
            raise RuntimeError("feed() after finish()")
        for phrase in self._chunker.feed(delta):
            self._start(phrase)

    def finish(self) -> None:
        """The text is complete: synthesise what is left."""
        if not self._finished:
            for phrase in self._chunker.flush():
                self._start(phrase)
            self._finished = True
            self._changed.set()

    def _start(self, phrase: str) -> None:
        self._pending.append((phrase, asyncio.create_task(self._speak(phrase))))
        self._changed.set()

    async def _speak(self, phrase: str) -> SynthesizedAudio:
        async with self._limit:
            return await self._synth.synthesize(phrase, voice=self._voice, speed=self._speed)

    def _pop(self) -> AudioDelta:
        phrase, task = self._pending.popleft()
        delta = AudioDelta(self.audio_id, self._index, phrase, task.result())
        self._index += 1
        return delta

    def ready(self) -> list[AudioDelta]:
        """The pieces finished so far that are next in order, without waiting."""
        out: list[AudioDelta] = []
        while self._pending and self._pending[0][1].done():
            out.append(self._pop())
        return out

    async def __aiter__(self) -> AsyncIterator[AudioDelta]:
        while True:
            if self._pending:
                await asyncio.wait({self._pending[0][1]})
                yield self._pop()
            elif self._finished:
                return
            else:
                self._changed.clear()
                await self._changed.wait()

    async def stream(self, text: AsyncIterable[str]) -> AsyncIterator[AudioDelta]:
        """Consume ``text`` in the background and yield audio pieces in order as they finish."""

        async def pump() -> None:
            async for delta in text:
                self.feed(delta)
            self.finish()

        pumper = asyncio.create_task(pump())
        try:
            async for piece in self:
                yield piece
            await pumper
        finally:
            if not pumper.done():
                pumper.cancel()
                await asyncio.gather(pumper, return_exceptions=True)
            await self.aclose()

    async def aclose(self) -> None:
        """Cancel synthesis that is still running (a client went away)."""
        tasks = [task for _, task in self._pending]
        self._pending.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
