"""Decode WAV, FLAC, OGG/Vorbis/Opus and MP3 to 16 kHz mono float32, within `AudioLimits`.

libsndfile (through ``soundfile``) reads all four here: libsndfile >= 1.1 has MP3 support built
in. Both it and scipy come with the ``audio`` extra and are imported on first use: without
them, audio routes answer a :class:`MissingExtra` naming the extra (16 kHz audio needs no
scipy). The header (rate, channels, declared frames) is checked before any sample is decoded, and
the samples are then read in blocks and mixed down as they come, counting against the limits,
so a small file that declares hours of 8-channel 192 kHz audio costs a header parse, and one
that lies in its header is stopped at the limit. Resampling is polyphase
(``scipy.signal.resample_poly``). CPU work on hostile bytes: the gateway runs it in a worker
process (`fleetgate.multimodal.audio.worker`).
"""

from __future__ import annotations

import io
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, Field

from fleetgate.errors import InvalidRequest
from fleetgate.extras import require

__all__ = ["TARGET_RATE", "AudioLimits", "decode_audio", "resample"]

TARGET_RATE = 16_000
Samples = npt.NDArray[np.float32]
_BLOCK_FRAMES = 65_536


class AudioLimits(BaseModel, frozen=True):
    """Bounds on one audio input (see `fleetgate.multimodal.budgets.InputBudget`)."""

    max_bytes: int = Field(default=25 * 1024 * 1024, gt=0)
    max_seconds: float = Field(default=600.0, gt=0)
    max_samples: int = Field(default=57_600_000, gt=0)  # frames x channels
    max_rate: int = Field(default=192_000, gt=0)
    max_channels: int = Field(default=8, gt=0)


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


def _check_header(f: Any, limits: AudioLimits, param: str | None) -> None:
    rate, channels = int(f.samplerate), int(f.channels)
    if not 0 < rate <= limits.max_rate:
        raise InvalidRequest(
            f"audio sample rate {rate} Hz is outside 1-{limits.max_rate} Hz", param=param
        )
    if not 0 < channels <= limits.max_channels:
        raise InvalidRequest(
            f"audio has {channels} channels, more than {limits.max_channels}", param=param
        )
    _check_length(int(f.frames), rate, channels, limits, param)


def _check_length(
    frames: int, rate: int, channels: int, limits: AudioLimits, param: str | None
) -> None:
    if frames > limits.max_seconds * rate:
        raise InvalidRequest(f"audio is longer than {limits.max_seconds:g} seconds", param=param)
    if frames * channels > limits.max_samples:
        raise InvalidRequest(
            f"audio decodes to more than {limits.max_samples} samples "
            f"({frames} frames x {channels} channels)",
            param=param,
            code="audio_too_large",
        )


def _read_mono(f: Any, limits: AudioLimits, param: str | None) -> Samples:
    """Decode in blocks, mixing down as it goes: memory is the mono result, never frames x
    channels, and a header that understates the length is caught at the limit."""
    rate, channels = int(f.samplerate), int(f.channels)
    blocks: list[Samples] = []
    frames = 0
    while True:
        block = f.read(_BLOCK_FRAMES, dtype="float32", always_2d=True)
        if block.shape[0] == 0:
            break
        frames += block.shape[0]
        _check_length(frames, rate, channels, limits, param)
        blocks.append(block.mean(axis=1, dtype=np.float32))
    return np.concatenate(blocks) if blocks else np.zeros(0, np.float32)


def decode_audio(
    data: bytes, *, limits: AudioLimits | None = None, param: str | None = "file"
) -> Samples:
    """Mono float32 samples at 16 kHz; raises :class:`InvalidRequest` for unreadable audio or
    audio past ``limits``."""
    limits = limits or AudioLimits()
    sf = require("soundfile", extra="audio", purpose="decoding audio")
    if len(data) > limits.max_bytes:
        raise InvalidRequest(
            f"audio is larger than {limits.max_bytes} bytes", param=param, code="audio_too_large"
        )
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            _check_header(f, limits, param)
            rate = int(f.samplerate)
            mono = _read_mono(f, limits, param)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise InvalidRequest(
            f"audio could not be decoded (WAV, FLAC, OGG or MP3 expected): {exc}", param=param
        ) from exc
    if mono.size == 0:
        raise InvalidRequest("audio has no samples", param=param)
    return resample(mono, rate)
