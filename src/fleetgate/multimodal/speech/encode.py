"""Encode synthesised PCM as wav, pcm, flac, mp3 or opus.

``pcm`` follows OpenAI: raw 16-bit little-endian mono at 24 kHz (resampled here). flac, mp3 and
opus (in Ogg) come from libsndfile (MP3 through its LAME support, libsndfile >= 1.1). ``aac`` is
not available in this build and is refused.
"""

from __future__ import annotations

import io
import struct
from typing import Literal, get_args

import numpy as np

from fleetgate.errors import InvalidRequest
from fleetgate.extras import require
from fleetgate.multimodal.audio.decode import resample
from fleetgate.multimodal.speech.tts import SynthesizedAudio

__all__ = [
    "CONTENT_TYPES",
    "PCM_RATE",
    "AudioFormat",
    "AudioStreamEncoder",
    "encode_audio",
    "mp3_frames",
]

AudioFormat = Literal["wav", "pcm", "flac", "mp3", "opus"]
FORMATS: tuple[str, ...] = get_args(AudioFormat)
PCM_RATE = 24_000
CONTENT_TYPES: dict[str, str] = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
}
_SF: dict[str, tuple[str, str]] = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "opus": ("OGG", "OPUS"),
}


def _check(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InvalidRequest(
            f"response_format must be one of {', '.join(FORMATS)}", param="response_format"
        )


def _as_rate(audio: SynthesizedAudio, rate: int) -> SynthesizedAudio:
    if not audio.pcm:
        return SynthesizedAudio(b"", rate)
    if audio.sample_rate == rate:
        return audio
    out = resample(audio.samples(), audio.sample_rate, rate)
    return SynthesizedAudio((np.clip(out, -1, 1) * 32767).astype("<i2").tobytes(), rate)


def encode_audio(audio: SynthesizedAudio, fmt: str) -> bytes:
    """The whole of ``audio`` as a file in ``fmt`` (CPU work for flac/mp3/opus)."""
    _check(fmt)
    if fmt == "pcm":
        return _as_rate(audio, PCM_RATE).pcm
    if fmt == "opus":
        audio = _as_rate(audio, 48_000)
    container, subtype = _SF[fmt]
    sf = require("soundfile", extra="audio", purpose=f"encoding {fmt} audio")
    buf = io.BytesIO()
    samples = np.frombuffer(audio.pcm, dtype="<i2")
    sf.write(buf, samples, audio.sample_rate, format=container, subtype=subtype)
    return buf.getvalue()


def _streaming_wav_header(rate: int) -> bytes:
    # Sizes of 0xFFFFFFFF mean "unknown length"; players read until the stream ends.
    return (
        b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        + b"data" + struct.pack("<I", 0xFFFFFFFF)
    )  # fmt: skip


_MP3_BITRATES = {
    3: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),  # MPEG-1
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),  # MPEG-2
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def _mp3_frame_length(header: bytes) -> int | None:
    """Bytes of the Layer III frame starting with ``header`` (4 bytes), or None."""
    if len(header) < 4 or header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version, layer = (header[1] >> 3) & 3, (header[1] >> 1) & 3
    bitrate_i, rate_i, padding = header[2] >> 4, (header[2] >> 2) & 3, (header[2] >> 1) & 1
    if layer != 1 or version == 1 or rate_i == 3 or bitrate_i in (0, 15):
        return None
    bitrate = _MP3_BITRATES[3 if version == 3 else 2][bitrate_i] * 1000
    rate = _MP3_RATES[version][rate_i]
    return (144 if version == 3 else 72) * bitrate // rate + padding


def mp3_frames(data: bytes) -> bytes:
    """``data`` (an MP3 file) without its ID3 tags and leading Xing/Info frame: bare frames
    that can be concatenated into one stream."""
    start = 0
    if data[:3] == b"ID3" and len(data) >= 10:
        size = (data[6] << 21) | (data[7] << 14) | (data[8] << 7) | data[9]
        start = 10 + size + (10 if data[5] & 0x10 else 0)
    length = _mp3_frame_length(data[start : start + 4])
    if length and (
        b"Xing" in data[start : start + length] or b"Info" in data[start : start + length]
    ):
        start += length
    end = len(data) - 128 if data[-128:-125] == b"TAG" else len(data)
    return data[start:end]


class AudioStreamEncoder:
    """Encodes audio phrase by phrase for a streamed response.

    ``pcm`` and ``wav`` stream raw samples (wav after a header of unknown length); ``mp3``
    encodes each phrase as its own run of frames; ``flac`` and ``opus`` are buffered and
    written at :meth:`finish`.
    """

    def __init__(self, fmt: str) -> None:
        _check(fmt)
        self.format = fmt
        self.content_type = CONTENT_TYPES[fmt]
        self._header_sent = False
        self._held: list[SynthesizedAudio] = []

    def encode(self, audio: SynthesizedAudio) -> bytes:
        """Bytes to send now for ``audio``."""
        if self.format in ("flac", "opus"):
            self._held.append(audio)
            return b""
        if self.format == "mp3":
            # Bare MPEG frames: a per-phrase ID3 tag or Xing/Info frame in mid-stream makes
            # decoders stop after the first phrase.
            return mp3_frames(encode_audio(audio, "mp3")) if audio.pcm else b""
        if self.format == "pcm":
            return encode_audio(audio, "pcm")
        prefix = b""
        if not self._header_sent:
            self._header_sent = True
            prefix = _streaming_wav_header(audio.sample_rate)
        return prefix + audio.pcm

    def finish(self) -> bytes:
        """Bytes to send at the end of the stream."""
        if self.format in ("flac", "opus") and self._held:
            rate = self._held[0].sample_rate
            pcm = b"".join(_as_rate(a, rate).pcm for a in self._held)
            self._held = []
            return encode_audio(SynthesizedAudio(pcm, rate), self.format)
        return b""
