"""Segment transcribers: the interface and the embedded pocketsphinx default.

A transcriber turns a batch of 16 kHz speech segments into one text per segment, working on the
segments in parallel. pocketsphinx runs in ``workers`` worker processes
(`fleetgate.multimodal.native`), each with its own decoder loaded once at start; the same
workers decode the uploads (`AudioPreparer`), so the gateway never runs either library itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.audio.limits import AudioLimits
from fleetgate.multimodal.audio.prepare import AUDIO_WORKER, PreparedAudio, prepare_in
from fleetgate.multimodal.audio.vad import VadConfig
from fleetgate.multimodal.native.pool import FailureHook, NativeWorkerPool, WorkerSpec

__all__ = ["PocketsphinxTranscriber", "SegmentTranscriber"]

Samples = npt.NDArray[np.float32]


@runtime_checkable
class SegmentTranscriber(Protocol):
    """Transcribes a batch of 16 kHz mono segments; one string per segment, same order."""

    async def transcribe_segments(
        self, segments: Sequence[Samples], *, language: str | None = None, prompt: str | None = None
    ) -> list[str]: ...

    async def aclose(self) -> None: ...


class PocketsphinxTranscriber:
    """The embedded default: CMU pocketsphinx 5 with its bundled US-English model.

    Example::

        asr = PocketsphinxTranscriber(workers=2)
        texts = await asr.transcribe_segments([seg.samples for seg in segments])
        await asr.aclose()
    """

    LANGUAGES = frozenset({"en", "en-us", "english"})

    def __init__(
        self,
        *,
        workers: int = 2,
        pad_s: float = 0.3,
        timeout_s: float = 60.0,
        on_failure: FailureHook | None = None,
        **decoder_config: Any,
    ) -> None:
        if workers <= 0:
            raise ValueError("workers must be positive")
        spec = WorkerSpec(
            AUDIO_WORKER,
            {"recogniser": True, "pad_s": pad_s, "decoder_config": decoder_config},
            name="pocketsphinx",
        )
        self.workers = NativeWorkerPool(
            spec, size=workers, call_timeout_s=timeout_s, on_failure=on_failure
        )

    def warm_up(self) -> None:
        """Start the workers (and load their decoders) now, blocking, instead of on first use."""
        self.workers.warm_up()

    async def prepare(self, data: bytes, limits: AudioLimits, vad: VadConfig) -> PreparedAudio:
        """Decode and segment an upload on the recogniser's workers."""
        return await prepare_in(self.workers, data, limits, vad)

    async def transcribe_segments(
        self, segments: Sequence[Samples], *, language: str | None = None, prompt: str | None = None
    ) -> list[str]:
        """Transcribe ``segments`` in parallel on the workers."""
        if language is not None and language.lower() not in self.LANGUAGES:
            raise InvalidRequest(
                f"language {language!r} is not supported by the embedded recogniser (English only)",
                param="language",
            )
        jobs = [
            self.workers.call("recognise", np.asarray(seg, dtype=np.float32).tobytes())
            for seg in segments
        ]
        return [str(text) for text in await asyncio.gather(*jobs)]

    def close(self) -> None:
        """Stop the workers (blocking)."""
        self.workers.close()

    async def aclose(self) -> None:
        """Stop the workers."""
        await self.workers.aclose()
