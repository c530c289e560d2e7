"""What runs inside an audio worker process (`fleetgate.multimodal.native`): decoding and
segmenting uploaded audio, and the embedded pocketsphinx recogniser.

Both parse bytes a caller chose with native code (libsndfile, webrtcvad, pocketsphinx), so the
gateway never runs them itself. Arguments and results are builtins: float32 samples travel as
bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetgate.extras import require
from fleetgate.multimodal.audio.decode import TARGET_RATE, AudioLimits, decode_audio
from fleetgate.multimodal.audio.vad import VadConfig, segment_speech, to_pcm16

__all__ = ["AudioWorker"]


class AudioWorker:
    """The handler of an audio worker. With ``recogniser`` the pocketsphinx decoder (model
    files and all) is loaded here, once, when the worker starts."""

    def __init__(
        self,
        *,
        recogniser: bool = False,
        pad_s: float = 0.3,
        decoder_config: dict[str, Any] | None = None,
    ) -> None:
        self._pad = np.zeros(int(pad_s * TARGET_RATE), dtype=np.float32)
        self._decoder: Any = None
        if recogniser:
            pocketsphinx = require("pocketsphinx", extra="audio", purpose="speech recognition")
            config = {"loglevel": "FATAL", **(decoder_config or {}), "samprate": TARGET_RATE}
            self._decoder = pocketsphinx.Decoder(**config)

    def prepare(
        self, data: bytes, limits: dict[str, Any], vad: dict[str, Any]
    ) -> tuple[int, list[tuple[float, float, bytes]]]:
        """Decode ``data`` to 16 kHz mono and cut it into speech segments: the number of
        samples and ``(start, end, float32 bytes)`` per segment."""
        samples = decode_audio(data, limits=AudioLimits(**limits))
        segments = segment_speech(samples, VadConfig(**vad))
        return len(samples), [(s.start, s.end, s.samples.tobytes()) for s in segments]

    def recognise(self, samples: bytes) -> str:
        """The pocketsphinx hypothesis for 16 kHz float32 ``samples``."""
        if self._decoder is None:
            raise RuntimeError("this audio worker has no recogniser")
        segment = np.frombuffer(samples, dtype=np.float32)
        audio = np.concatenate([self._pad, segment, self._pad])
        # A whisper of deterministic dither keeps the feature normalisation away from log(0).
        rng = np.random.default_rng(len(segment))
        audio = audio + rng.normal(0.0, 1e-3, audio.size).astype(np.float32)
        self._decoder.start_utt()
        self._decoder.process_raw(to_pcm16(audio), full_utt=True)
        self._decoder.end_utt()
        hyp = self._decoder.hyp()
        return str(hyp.hypstr) if hyp is not None else ""
