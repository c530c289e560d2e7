"""Uploaded audio -> 16 kHz speech segments, decoded in worker processes.

`AudioPreparer` is what `fleetgate.multimodal.audio.transcribe.Transcriber` needs before
recognition; `IsolatedAudioDecoder` runs it in `AudioWorker` processes (the pocketsphinx
backend does the same in its own workers), so a decoder crash or a decompression bomb costs
one request (503 or 400), never the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fleetgate.multimodal.audio.limits import AudioLimits
from fleetgate.multimodal.audio.vad import SpeechSegment, VadConfig
from fleetgate.multimodal.native.pool import FailureHook, NativeWorkerPool, WorkerSpec

__all__ = ["AUDIO_WORKER", "AudioPreparer", "IsolatedAudioDecoder", "PreparedAudio", "prepare_in"]

AUDIO_WORKER = "fleetgate.multimodal.audio.worker:AudioWorker"


@dataclass(frozen=True, slots=True)
class PreparedAudio:
    """Decoded audio: its length in 16 kHz samples and its speech segments."""

    samples: int
    segments: tuple[SpeechSegment, ...]


@runtime_checkable
class AudioPreparer(Protocol):
    """Decodes and segments one uploaded file (never on the event loop)."""

    async def prepare(self, data: bytes, limits: AudioLimits, vad: VadConfig) -> PreparedAudio: ...

    async def aclose(self) -> None: ...


def _unpack(result: Any) -> PreparedAudio:
    samples, segments = result
    return PreparedAudio(
        int(samples),
        tuple(
            SpeechSegment(float(start), float(end), np.frombuffer(pcm, dtype=np.float32))
            for start, end, pcm in segments
        ),
    )


async def prepare_in(
    pool: NativeWorkerPool, data: bytes, limits: AudioLimits, vad: VadConfig
) -> PreparedAudio:
    """Run `AudioWorker.prepare` on ``pool``."""
    return _unpack(await pool.call("prepare", data, limits.model_dump(), vad.model_dump()))


class IsolatedAudioDecoder:
    """Decodes uploads in ``workers`` `AudioWorker` processes (no recogniser loaded).

    Example::

        decoder = IsolatedAudioDecoder()
        prepared = await decoder.prepare(upload, AudioLimits(), VadConfig())
        await decoder.aclose()
    """

    def __init__(
        self, *, workers: int = 1, timeout_s: float = 60.0, on_failure: FailureHook | None = None
    ) -> None:
        self.workers = NativeWorkerPool(
            WorkerSpec(AUDIO_WORKER, {}, name="audio-decode"),
            size=workers,
            call_timeout_s=timeout_s,
            on_failure=on_failure,
        )

    async def prepare(self, data: bytes, limits: AudioLimits, vad: VadConfig) -> PreparedAudio:
        return await prepare_in(self.workers, data, limits, vad)

    async def aclose(self) -> None:
        await self.workers.aclose()
