"""Decode WAV, FLAC, OGG/Vorbis/Opus and MP3 to 16 kHz mono float32, within `AudioLimits`.

libsndfile (through ``soundfile``) reads all four here: libsndfile >= 1.1 has MP3 support built
in. Both it and scipy come with the ``audio`` extra and are imported on first use: without
them, audio routes answer a :class:`MissingExtra` naming the extra (16 kHz audio needs no
scipy). Before libsndfile sees the bytes, `fleetgate.multimodal.audio.probe.judge_audio` reads
the header in pure Python and refuses a file past the limits (the gateway has already done so
before sending it here); libsndfile must then find the same container. The samples are read
in blocks, mixed down and resampled as they come (`StreamResampler`), counting against the
limits: memory is the 16 kHz result, never the source rate x channels, and a file that lies
in its header is stopped at the limit. CPU work on hostile bytes: the gateway runs it in a
worker process (`fleetgate.multimodal.audio.worker`).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetgate.errors import InvalidRequest
from fleetgate.extras import require
from fleetgate.multimodal.audio.limits import AudioLimits, check_length, check_stream
from fleetgate.multimodal.audio.probe import EXPECTED, DeclaredAudio, judge_audio
from fleetgate.multimodal.audio.resample import TARGET_RATE, StreamResampler, resample

__all__ = ["TARGET_RATE", "AudioLimits", "decode_audio", "resample"]

Samples = npt.NDArray[np.float32]
_BLOCK_FRAMES = 65_536
# libsndfile's major formats for each container the probe knows.
_FORMATS = {"wav": {"WAV", "WAVEX", "RF64"}, "flac": {"FLAC"}, "ogg": {"OGG"}, "mp3": {"MP3"}}


def _check_opened(f: Any, declared: DeclaredAudio, limits: AudioLimits, param: str | None) -> None:
    if f.format not in _FORMATS[declared.container]:
        raise InvalidRequest(
            f"audio could not be decoded ({EXPECTED}): its header says {declared.container} "
            f"but it reads as {f.format}",
            param=param,
        )
    check_stream(int(f.samplerate), int(f.channels), int(f.frames), limits, param)


def _read_16k(f: Any, limits: AudioLimits, param: str | None) -> Samples:
    """Decode in blocks, mixing down and resampling as it goes: memory is the 16 kHz result,
    and a header that understates the length is caught at the limit."""
    rate, channels = int(f.samplerate), int(f.channels)
    resampler = StreamResampler(rate)
    out: list[Samples] = []
    frames = 0
    while True:
        block = f.read(_BLOCK_FRAMES, dtype="float32", always_2d=True)
        if block.shape[0] == 0:
            break
        frames += block.shape[0]
        check_length(frames, rate, channels, limits, param)
        out.append(resampler.push(block.mean(axis=1, dtype=np.float32)))
    if frames == 0:
        raise InvalidRequest("audio has no samples", param=param)
    out.append(resampler.finish())
    return np.concatenate(out)


def decode_audio(
    data: bytes, *, limits: AudioLimits | None = None, param: str | None = "file"
) -> Samples:
    """Mono float32 samples at 16 kHz; raises :class:`InvalidRequest` for unreadable audio or
    audio past ``limits``."""
    limits = limits or AudioLimits()
    sf = require("soundfile", extra="audio", purpose="decoding audio")
    declared = judge_audio(data, limits, param=param)
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            _check_opened(f, declared, limits, param)
            return _read_16k(f, limits, param)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise InvalidRequest(
            f"audio could not be decoded ({EXPECTED}): {exc}", param=param
        ) from exc
