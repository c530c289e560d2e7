"""The speech-in pipeline: bytes -> 16 kHz -> speech segments -> batch transcription.

Stateless apart from the backend it is given, so it scales by adding workers. The header is
judged in the gateway (`fleetgate.multimodal.audio.probe`, pure Python, no decoding); decoding
and VAD run in worker processes (an `AudioPreparer`), never in the gateway's process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.audio.asr import SegmentTranscriber
from fleetgate.multimodal.audio.decode import TARGET_RATE, AudioLimits
from fleetgate.multimodal.audio.prepare import AudioPreparer, IsolatedAudioDecoder
from fleetgate.multimodal.audio.probe import judge_audio
from fleetgate.multimodal.audio.vad import VadConfig
from fleetgate.multimodal.fair import FairShare

__all__ = ["Transcriber", "Transcript", "TranscriptSegment"]


@dataclass(frozen=True, slots=True)
class TranscriptSegment:
    """One recognised stretch of speech (times in seconds)."""

    id: int
    start: float
    end: float
    text: str


@dataclass(frozen=True, slots=True)
class Transcript:
    """A whole transcription."""

    text: str
    duration: float
    language: str
    segments: tuple[TranscriptSegment, ...]


class Transcriber:
    """Turns uploaded audio into a :class:`Transcript` through a :class:`SegmentTranscriber`.

    ``preparer`` decodes and segments the upload: by default the backend when it can (the
    pocketsphinx workers do), else an `IsolatedAudioDecoder` of its own. :meth:`aclose`
    stops both.

    Example::

        transcriber = Transcriber(PocketsphinxTranscriber())
        transcript = await transcriber.transcribe(wav_bytes)
        body, content_type = render_transcript(transcript, "verbose_json")
        await transcriber.aclose()
    """

    def __init__(
        self,
        backend: SegmentTranscriber,
        *,
        vad: VadConfig | None = None,
        limits: AudioLimits | None = None,
        preparer: AudioPreparer | None = None,
        default_language: str = "en",
        share: FairShare | None = None,
    ) -> None:
        self.backend = backend
        self.vad = vad or VadConfig()
        self.limits = limits or AudioLimits()
        if preparer is None:
            preparer = backend if isinstance(backend, AudioPreparer) else IsolatedAudioDecoder()
        self.preparer = preparer
        self._language = default_language
        self.share = share

    async def transcribe(
        self,
        data: bytes,
        *,
        language: str | None = None,
        prompt: str | None = None,
        param: str = "file",
        owner: str = "",
    ) -> Transcript:
        """Transcribe one uploaded file (WAV, FLAC, OGG or MP3). Its header is judged here,
        before any worker sees it; errors about the file name ``param``. With a ``share``, the
        work waits for ``owner``'s turn at the workers."""
        judge_audio(data, self.limits, param=param)
        if self.share is None:
            return await self._transcribe(data, language, prompt, param)
        async with self.share.turn(owner):
            return await self._transcribe(data, language, prompt, param)

    async def _transcribe(
        self, data: bytes, language: str | None, prompt: str | None, param: str
    ) -> Transcript:
        try:
            prepared = await self.preparer.prepare(data, self.limits, self.vad)
        except InvalidRequest as exc:
            if exc.param != "file" or param == "file":
                raise
            raise InvalidRequest(exc.message, param=param, code=exc.code) from None
        segments = prepared.segments
        texts = await self.backend.transcribe_segments(
            [s.samples for s in segments], language=language, prompt=prompt
        )
        kept = [
            TranscriptSegment(i, round(seg.start, 3), round(seg.end, 3), text.strip())
            for i, (seg, text) in enumerate(
                pair for pair in zip(segments, texts, strict=True) if pair[1].strip()
            )
        ]
        return Transcript(
            text=" ".join(s.text for s in kept),
            duration=round(prepared.samples / TARGET_RATE, 3),
            language=language or self._language,
            segments=tuple(kept),
        )

    async def aclose(self) -> None:
        """Stop the backend and the decoding workers."""
        await self.backend.aclose()
        if self.preparer is not cast(object, self.backend):
            await self.preparer.aclose()
