"""Judge an audio file by its header before anything decodes it.

`judge_audio` reads the container's header in pure Python (`fleetgate.multimodal.audio.containers`)
and refuses, with a 400, a file past ``limits`` in bytes, sample rate, channels or declared
length, or one in a container other than WAV, FLAC, Ogg (Vorbis, Opus) and MP3. The gateway
calls it on every upload and ``input_audio`` part before the bytes go to a worker process, so a
small file declaring hours of 8-channel 192 kHz audio costs a header parse, never a worker start
or a decode; the worker calls it again before libsndfile opens the file, and then counts the
samples it decodes (a header can understate the length).
"""

from __future__ import annotations

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.audio.containers import DeclaredAudio, Malformed, flac, mp3, ogg, wav
from fleetgate.multimodal.audio.limits import AudioLimits, check_stream

__all__ = ["EXPECTED", "DeclaredAudio", "judge_audio", "probe_audio"]

EXPECTED = "WAV, FLAC, OGG or MP3 expected"
_MAX_ID3_TAGS = 4


def _skip_id3(data: bytes) -> int:
    """Where the audio starts after any ID3v2 tags (libsndfile skips them too)."""
    pos = 0
    for _ in range(_MAX_ID3_TAGS):
        head = data[pos : pos + 10]
        if len(head) < 10 or not head.startswith(b"ID3"):
            break
        size = 0
        for byte in head[6:10]:  # "syncsafe": seven bits a byte
            size = (size << 7) | (byte & 0x7F)
        pos += 10 + size + (10 if head[5] & 0x10 else 0)
    return pos


def _parse(data: bytes) -> DeclaredAudio:
    start = _skip_id3(data)
    head = data[start : start + 12]
    if head[:4] in (b"RIFF", b"RIFX", b"RF64") and head[8:12] == b"WAVE":
        return wav(data, start)
    if head.startswith(b"fLaC"):
        return flac(data, start)
    if head.startswith(b"OggS"):
        return ogg(data, start)
    if len(head) >= 4 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        return mp3(data, start)
    raise Malformed("the container is not one of these")


def probe_audio(data: bytes, *, param: str | None = "file") -> DeclaredAudio:
    """What ``data``'s header declares; :class:`InvalidRequest` when it cannot be read."""
    try:
        return _parse(data)
    except Malformed as exc:
        raise InvalidRequest(
            f"audio could not be decoded ({EXPECTED}): {exc}", param=param
        ) from None


def judge_audio(data: bytes, limits: AudioLimits, *, param: str | None = "file") -> DeclaredAudio:
    """Refuse ``data`` (400) unless its size and its header's rate, channels and length are
    within ``limits``; what the header declares otherwise.

    Example::

        declared = judge_audio(upload, AudioLimits(max_seconds=60))
    """
    limits.check_size(len(data), param)
    declared = probe_audio(data, param=param)
    check_stream(declared.rate, declared.channels, declared.frames, limits, param)
    return declared
