"""Decode WAV, FLAC, OGG/Vorbis/Opus and MP3 to 16 kHz mono float32.

libsndfile (through ``soundfile``) reads all four here: libsndfile >= 1.1 has MP3 support built
in. Resampling is polyphase (``scipy.signal.resample_poly``). Both come with the ``audio`` extra
and are imported on first use: without them, audio routes answer a :class:`MissingExtra` naming
the extra (16 kHz audio needs no scipy). CPU work: call from a worker.
"""

from __future__ import annotations

import io
from fractions import Fraction

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, Field

from fleetgate.errors import InvalidRequest
from fleetgate.extras import require

__all__ = ["TARGET_RATE", "AudioLimits", "decode_audio", "resample"]

TARGET_RATE = 16_000
Samples = npt.NDArray[np.float32]


class AudioLimits(BaseModel):
    """Bounds on uploaded audio."""

    max_bytes: int = Field(default=25 * 1024 * 1024, gt=0)
    max_seconds: float = Field(default=600.0, gt=0)


def resample(samples: Samples, rate: int, target: int = TARGET_RATE) -> Samples:
    """``samples`` at ``rate`` resampled to ``target`` Hz."""
    if rate == target:
        return samples.astype(np.float32, copy=False)
    # Imported here: scipy.signal takes half a second to import, most processes never resample
    # (the gateway imports this module at start-up for its audio routes), and scipy is optional.
    signal = require("scipy.signal", extra="audio", purpose="resampling audio")
    ratio = Fraction(target, rate).limit_denominator(1000)
    out = signal.resample_poly(samples, ratio.numerator, ratio.denominator)
    return np.asarray(out, dtype=np.float32)


def decode_audio(
    data: bytes, *, limits: AudioLimits | None = None, param: str | None = "file"
) -> Samples:
    """Mono float32 samples at 16 kHz; raises :class:`InvalidRequest` for unreadable audio."""
    limits = limits or AudioLimits()
    sf = require("soundfile", extra="audio", purpose="decoding audio")
    if len(data) > limits.max_bytes:
        raise InvalidRequest(f"audio is larger than {limits.max_bytes} bytes", param=param)
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            rate = int(f.samplerate)
            if f.frames > limits.max_seconds * rate:
                raise InvalidRequest(
                    f"audio is longer than {limits.max_seconds:g} seconds", param=param
                )
            frames = f.read(dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        raise InvalidRequest(
            f"audio could not be decoded (WAV, FLAC, OGG or MP3 expected): {exc}", param=param
        ) from exc
    mono: Samples = frames.mean(axis=1, dtype=np.float32)
    if mono.size == 0:
        raise InvalidRequest("audio has no samples", param=param)
    return resample(mono, rate)
