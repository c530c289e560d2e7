"""The speech-in pipeline: bytes -> 16 kHz -> speech segments -> batch transcription.

Stateless apart from the backend it is given, so it scales by adding workers. Decoding and VAD
run in an executor, never on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleetgate.multimodal.audio.asr import SegmentTranscriber
from fleetgate.multimodal.audio.decode import TARGET_RATE, AudioLimits, decode_audio
from fleetgate.multimodal.audio.vad import SpeechSegment, VadConfig, segment_speech

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


def _prepare(
    data: bytes, limits: AudioLimits, vad: VadConfig
) -> tuple[npt.NDArray[np.float32], list[SpeechSegment]]:
    samples = decode_audio(data, limits=limits)
    return samples, segment_speech(samples, vad)


class Transcriber:
    """Turns uploaded audio into a :class:`Transcript` through a :class:`SegmentTranscriber`.

    Example::

        transcriber = Transcriber(PocketsphinxTranscriber())
        transcript = await transcriber.transcribe(wav_bytes)
        body, content_type = render_transcript(transcript, "verbose_json")
    """

    def __init__(
        self,
        backend: SegmentTranscriber,
        *,
        vad: VadConfig | None = None,
        limits: AudioLimits | None = None,
        executor: Executor | None = None,
        default_language: str = "en",
    ) -> None:
        self.backend = backend
        self.vad = vad or VadConfig()
        self.limits = limits or AudioLimits()
        self._executor = executor
        self._language = default_language

    async def transcribe(
        self, data: bytes, *, language: str | None = None, prompt: str | None = None
    ) -> Transcript:
        """Transcribe one uploaded file (WAV, FLAC, OGG or MP3)."""
        loop = asyncio.get_running_loop()
        call = functools.partial(_prepare, data, self.limits, self.vad)
        samples, segments = await loop.run_in_executor(self._executor, call)
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
            duration=round(len(samples) / TARGET_RATE, 3),
            language=language or self._language,
            segments=tuple(kept),
        )
