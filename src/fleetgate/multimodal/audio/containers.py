"""Header parsers for the four containers the gateway accepts: WAV (RIFF, RIFX, RF64), FLAC,
Ogg (Vorbis, Opus) and MP3.

Each reads a few dozen bytes at fixed places (plus, for Ogg, the last page's granule position,
found by a bounded search from the end) and returns what the file declares: sample rate,
channels and, when the header says, its length in frames. Nothing here decodes a sample; each
walk is bounded, so a hostile file costs microseconds. A header that cannot be read raises
:class:`Malformed` with the reason.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal

__all__ = ["Container", "DeclaredAudio", "Malformed", "flac", "mp3", "ogg", "wav"]

Container = Literal["wav", "flac", "ogg", "mp3"]

_MAX_CHUNKS = 64  # RIFF chunks walked before the audio data
_MAX_OGG_PAGE = 27 + 255 + 255 * 255
_OPUS_RATES = (8_000, 12_000, 16_000, 24_000, 48_000)

# WAV encodings libsndfile decodes, by format tag: bytes per frame from ``blockAlign``...
_WAV_LINEAR = {0x0001, 0x0003, 0x0006, 0x0007}  # PCM, IEEE float, A-law, mu-law
# ...or ``samplesPerBlock`` frames in each block of ``blockAlign`` bytes.
_WAV_BLOCKED = {0x0002: None, 0x0011: None, 0x0031: 320}  # MS ADPCM, IMA ADPCM, GSM 6.10
_WAV_G721 = 0x0040  # 4 bits a sample
_WAV_EXTENSIBLE = 0xFFFE


class Malformed(ValueError):
    """The header cannot be read (the message says why)."""


@dataclass(frozen=True, slots=True)
class DeclaredAudio:
    """What a file's header says: ``frames`` is None when the header does not give a length."""

    container: Container
    rate: int
    channels: int
    frames: int | None


def _unpack(fmt: str, data: bytes, offset: int) -> tuple[int, ...]:
    try:
        return struct.unpack_from(fmt, data, offset)
    except struct.error:
        raise Malformed("the header is truncated") from None


def _wav_frames(fmt: bytes, endian: str, data_bytes: int) -> tuple[int, int, int]:
    """(rate, channels, frames) from a ``fmt `` chunk body and the data chunk's size."""
    tag, channels, rate, _, block_align, bits = _unpack(endian + "HHIIHH", fmt, 0)
    extension = fmt[18:]  # after cbSize
    if tag == _WAV_EXTENSIBLE:
        tag = _unpack(endian + "H", extension, 6)[0]  # the first bytes of the sub-format GUID
    if channels == 0:
        raise Malformed("WAV header declares no channels")
    if tag in _WAV_LINEAR:
        align = block_align or channels * ((bits + 7) // 8)
        if align == 0:
            raise Malformed("WAV header declares frames of 0 bytes")
        return rate, channels, data_bytes // align
    if tag in _WAV_BLOCKED:
        fixed = _WAV_BLOCKED[tag]
        per_block = fixed or (_unpack(endian + "H", extension, 0)[0] if len(extension) >= 2 else 0)
        if block_align == 0 or per_block == 0:
            raise Malformed("WAV ADPCM header declares no block size")
        return rate, channels, -(-data_bytes // block_align) * per_block
    if tag == _WAV_G721:
        return rate, channels, data_bytes * 2 // channels
    raise Malformed(f"WAV encoding 0x{tag:04x} is not supported")


def wav(data: bytes, start: int) -> DeclaredAudio:
    """A RIFF/RIFX/RF64 WAVE file starting at ``start``: the ``fmt `` chunk and the length of
    the ``data`` chunk (at most the bytes present: PCM cannot decode to more)."""
    magic = data[start : start + 4]
    endian = ">" if magic == b"RIFX" else "<"
    pos, fmt, ds64_size = start + 12, b"", 0
    for _ in range(_MAX_CHUNKS):
        if pos + 8 > len(data):
            break
        chunk, size = data[pos : pos + 4], _unpack(endian + "I", data, pos + 4)[0]
        body = pos + 8
        if chunk == b"ds64":
            ds64_size = _unpack("<Q", data, body + 8)[0]
        elif chunk == b"fmt ":
            fmt = data[body : body + min(size, 64)]
        elif chunk == b"data":
            if not fmt:
                raise Malformed("WAV data comes before its fmt chunk")
            if magic == b"RF64" and size == 0xFFFFFFFF:
                size = ds64_size
            rate, channels, frames = _wav_frames(fmt, endian, min(size, len(data) - body))
            return DeclaredAudio("wav", rate, channels, frames)
        pos = body + size + (size & 1)
    raise Malformed("WAV file has no fmt and data chunks within its first 64 chunks")


def flac(data: bytes, start: int) -> DeclaredAudio:
    """A native FLAC stream starting at ``start``: its STREAMINFO block."""
    (kind,) = _unpack(">B", data, start + 4)
    if kind & 0x7F != 0:
        raise Malformed("FLAC stream does not start with STREAMINFO")
    info = data[start + 8 : start + 8 + 34]
    if len(info) < 34:
        raise Malformed("the header is truncated")
    rate = (info[10] << 12) | (info[11] << 4) | (info[12] >> 4)
    channels = ((info[12] >> 1) & 0x07) + 1
    total = ((info[13] & 0x0F) << 32) | int.from_bytes(info[14:18], "big")
    return DeclaredAudio("flac", rate, channels, total or None)


def _last_granule(data: bytes, serial: int) -> int | None:
    """The granule position of the stream's last page that completes a packet, searched for in
    the tail where the last page must start."""
    floor = max(0, len(data) - 2 * _MAX_OGG_PAGE)
    end = len(data)
    for _ in range(256):
        at = data.rfind(b"OggS", floor, end)
        if at < 0 or at + 27 > len(data):
            return None
        granule, page_serial = _unpack("<qI", data, at + 6)
        if page_serial == serial and granule >= 0:
            return int(granule)
        end = at
    return None


def ogg(data: bytes, start: int) -> DeclaredAudio:
    """An Ogg Vorbis or Opus stream starting at ``start``: the identification header of its
    first page and the granule position of its last."""
    serial, segments = _unpack("<IxxxxxxxxB", data, start + 14)
    packet = data[start + 27 + segments : start + 27 + segments + 19]
    granule = _last_granule(data, serial)
    if packet.startswith(b"\x01vorbis"):
        channels, rate = _unpack("<BI", packet, 11)
        return DeclaredAudio("ogg", rate, channels, granule)
    if packet.startswith(b"OpusHead"):
        channels, pre_skip, input_rate = _unpack("<BHI", packet, 9)
        # libsndfile decodes at the Opus rate at or above the one the encoder was given.
        rate = next((r for r in _OPUS_RATES if r >= input_rate), 48_000) if input_rate else 48_000
        frames = None if granule is None else max(0, granule - pre_skip) * rate // 48_000
        return DeclaredAudio("ogg", rate, channels, frames)
    raise Malformed("Ogg stream is neither Vorbis nor Opus")


_MP3_RATES = {3: (44_100, 48_000, 32_000), 2: (22_050, 24_000, 16_000), 0: (11_025, 12_000, 8_000)}
_MP3_KBPS = {  # (MPEG-1?, layer) -> bitrates by index
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_KBPS[(False, 3)] = _MP3_KBPS[(False, 2)]


def _mp3_vbr_frames(data: bytes, pos: int, mpeg1: bool, mono: bool) -> int | None:
    """The frame count of a Xing/Info or VBRI header in the first frame, if there is one."""
    side = (17 if mono else 32) if mpeg1 else (9 if mono else 17)
    xing = pos + 4 + side
    if data[xing : xing + 4] in (b"Xing", b"Info"):
        flags, count = _unpack(">II", data, xing + 4)
        return int(count) if flags & 1 else None
    if data[pos + 36 : pos + 40] == b"VBRI":
        return int(_unpack(">I", data, pos + 36 + 14)[0])
    return None


def mp3(data: bytes, start: int) -> DeclaredAudio:
    """An MPEG audio stream whose first frame starts at ``start``: rate and channels from the
    frame header, the length from a Xing/VBRI header or, for constant bit rate, the size."""
    b1, b2, b3 = data[start + 1], data[start + 2], data[start + 3]
    version, layer_bits = (b1 >> 3) & 0x03, (b1 >> 1) & 0x03
    rate_index, kbps_index = (b2 >> 2) & 0x03, b2 >> 4
    if version == 1 or layer_bits == 0 or rate_index == 3 or kbps_index == 15:
        raise Malformed("MPEG frame header is invalid")
    if kbps_index == 0:
        raise Malformed("free-format MPEG audio is not supported")
    mpeg1, layer = version == 3, 4 - layer_bits
    rate = _MP3_RATES[version][rate_index]
    mono = b3 >> 6 == 3
    per_frame = 384 if layer == 1 else (1152 if mpeg1 or layer == 2 else 576)
    count = _mp3_vbr_frames(data, start, mpeg1, mono)
    kbps = _MP3_KBPS[(mpeg1, layer)][kbps_index]
    if count is None:  # constant bit rate: the frames that fit in the bytes
        frame_bytes = per_frame // 8 * kbps * 1000 // rate
        count = (len(data) - start) // max(1, frame_bytes)
    frames = None if count is None else count * per_frame
    return DeclaredAudio("mp3", rate, 1 if mono else 2, frames)
