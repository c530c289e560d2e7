"""Segment transcribers: the interface and the embedded pocketsphinx default.

A transcriber turns a batch of 16 kHz speech segments into one text per segment, working on the
segments in parallel. The pocketsphinx decoders are not thread-safe, so each worker thread takes
one from a pool of decoders (loaded once, reused).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from fleetgate.errors import InvalidRequest
from fleetgate.extras import require
from fleetgate.multimodal.audio.decode import TARGET_RATE
from fleetgate.multimodal.audio.vad import to_pcm16

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

    def __init__(self, *, workers: int = 2, pad_s: float = 0.3, **decoder_config: Any) -> None:
        if workers <= 0:
            raise ValueError("workers must be positive")
        self._workers = workers
        self._pad = np.zeros(int(pad_s * TARGET_RATE), dtype=np.float32)
        self._config = {"loglevel": "FATAL", **decoder_config, "samprate": TARGET_RATE}
        self._decoders: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._created = 0
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def warm_up(self) -> None:
        """Load one decoder now (blocking) instead of on the first request."""
        self._decoders.put(self._new_decoder())

    def _new_decoder(self) -> Any:
        pocketsphinx = require("pocketsphinx", extra="audio", purpose="speech recognition")
        with self._lock:
            self._created += 1
        return pocketsphinx.Decoder(**self._config)

    def _take_decoder(self) -> Any:
        try:
            return self._decoders.get_nowait()
        except queue.Empty:
            return self._new_decoder()

    def _decode(self, samples: Samples) -> str:
        decoder = self._take_decoder()
        try:
            audio = np.concatenate([self._pad, samples, self._pad])
            # A whisper of deterministic dither keeps the feature normalisation away from log(0).
            rng = np.random.default_rng(len(samples))
            audio = audio + rng.normal(0.0, 1e-3, audio.size).astype(np.float32)
            decoder.start_utt()
            decoder.process_raw(to_pcm16(audio), full_utt=True)
            decoder.end_utt()
            hyp = decoder.hyp()
            return str(hyp.hypstr) if hyp is not None else ""
        finally:
            self._decoders.put(decoder)

    async def transcribe_segments(
        self, segments: Sequence[Samples], *, language: str | None = None, prompt: str | None = None
    ) -> list[str]:
        """Transcribe ``segments`` in parallel on the worker threads."""
        if language is not None and language.lower() not in self.LANGUAGES:
            raise InvalidRequest(
                f"language {language!r} is not supported by the embedded recogniser (English only)",
                param="language",
            )
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix="asr")
        loop = asyncio.get_running_loop()
        jobs = [loop.run_in_executor(self._executor, self._decode, seg) for seg in segments]
        return list(await asyncio.gather(*jobs))

    def close(self) -> None:
        """Stop the worker threads (blocking)."""
        if self._executor is not None:
            executor, self._executor = self._executor, None
            executor.shutdown(wait=True)

    async def aclose(self) -> None:
        """Stop the worker threads."""
        await asyncio.to_thread(self.close)
