"""The header judgement made before any decoder runs (`fleetgate.multimodal.audio.probe`), and
the block-by-block resampler the decoder uses (`fleetgate.multimodal.audio.resample`)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf
from tests.multimodal.audio.conftest import declared_flac

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.audio.limits import AudioLimits
from fleetgate.multimodal.audio.prepare import PreparedAudio
from fleetgate.multimodal.audio.probe import judge_audio, probe_audio
from fleetgate.multimodal.audio.resample import StreamResampler, resample
from fleetgate.multimodal.audio.transcribe import Transcriber
from fleetgate.multimodal.audio.vad import VadConfig


def written(fmt: str, subtype: str, rate: int, channels: int, seconds: float) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, np.repeat(tone[:, None], channels, axis=1), rate, format=fmt, subtype=subtype)
    return buf.getvalue()


WRITABLE = [
    ("WAV", "PCM_16", 22_050, 2),
    ("WAV", "PCM_U8", 8_000, 1),
    ("WAV", "PCM_24", 48_000, 2),
    ("WAV", "FLOAT", 44_100, 1),
    ("WAV", "DOUBLE", 16_000, 2),
    ("WAV", "ULAW", 8_000, 1),
    ("WAV", "ALAW", 8_000, 2),
    ("WAV", "IMA_ADPCM", 22_050, 2),
    ("WAV", "MS_ADPCM", 22_050, 1),
    ("WAV", "GSM610", 8_000, 1),
    ("WAV", "G721_32", 8_000, 1),
    ("WAVEX", "PCM_16", 96_000, 6),
    ("RF64", "PCM_16", 22_050, 2),
    ("FLAC", "PCM_16", 192_000, 8),
    ("FLAC", "PCM_24", 44_100, 1),
    ("OGG", "VORBIS", 44_100, 2),
    ("OGG", "VORBIS", 11_025, 1),
    ("OGG", "OPUS", 48_000, 2),
    ("OGG", "OPUS", 16_000, 1),
    ("OGG", "OPUS", 8_000, 2),
    ("MP3", "MPEG_LAYER_III", 44_100, 2),
    ("MP3", "MPEG_LAYER_III", 22_050, 1),
    ("MP3", "MPEG_LAYER_III", 8_000, 2),
]


@pytest.mark.parametrize(("fmt", "subtype", "rate", "channels"), WRITABLE)
def test_the_header_says_what_libsndfile_will_decode(
    fmt: str, subtype: str, rate: int, channels: int
) -> None:
    data = written(fmt, subtype, rate, channels, 2.5)
    declared = probe_audio(data)
    with sf.SoundFile(io.BytesIO(data)) as f:
        assert (declared.rate, declared.channels) == (f.samplerate, f.channels)
        assert declared.frames is not None
        # ADPCM, GSM and MP3 count whole blocks or frames (MP3 with the encoder's padding).
        assert abs(declared.frames - f.frames) <= 2 * 1152


def test_an_id3_tag_before_the_audio_is_skipped() -> None:
    mp3 = written("MP3", "MPEG_LAYER_III", 44_100, 2, 1.0)
    body = b"TIT2" + (9).to_bytes(4, "big") + b"\x00\x00\x03a title"
    tag = b"ID3\x04\x00\x00" + bytes([0, 0, 0, len(body)]) + body
    assert probe_audio(tag + mp3) == probe_audio(mp3)


@pytest.mark.parametrize(
    "data",
    [
        written("AIFF", "PCM_16", 16_000, 1, 0.5),
        written("W64", "PCM_16", 16_000, 1, 0.5),
        written("AU", "PCM_16", 16_000, 1, 0.5),
        b"",
        b"RIFF\x00\x00\x00\x00WAVE",
        b"fLaC\x00\x00",
        b"OggS" + bytes(30),
        b"\xff\xfb" + bytes(2),
        b"plain text, not audio at all",
    ],
    ids=[
        "aiff",
        "w64",
        "au",
        "empty",
        "riff-no-chunks",
        "flac-cut",
        "ogg-unknown",
        "mpeg-bad",
        "text",
    ],
)
def test_other_containers_and_broken_headers_are_a_400(data: bytes) -> None:
    with pytest.raises(InvalidRequest, match=r"could not be decoded \(WAV, FLAC, OGG or MP3"):
        probe_audio(data, param="messages[0].content[1].input_audio")


class NeverDecodes:
    """An `AudioPreparer` that records every file it was asked to decode."""

    def __init__(self) -> None:
        self.asked = 0

    async def prepare(self, data: bytes, limits: AudioLimits, vad: VadConfig) -> PreparedAudio:
        self.asked += 1
        return PreparedAudio(0, ())

    async def aclose(self) -> None:
        pass


class NoSpeech:
    async def transcribe_segments(self, segments: object, **kwargs: object) -> list[str]:
        return []

    async def aclose(self) -> None:
        pass


TOO_MUCH = [
    ("8ch-192k-flac", declared_flac(192_000, 8, 60), AudioLimits(), "audio_too_large"),
    ("long-wav", written("WAV", "PCM_16", 16_000, 1, 3), AudioLimits(max_seconds=2), None),
    ("adpcm-wav", written("WAV", "IMA_ADPCM", 16_000, 1, 3), AudioLimits(max_seconds=2), None),
    ("8ch-wav", written("WAV", "PCM_16", 16_000, 8, 0.2), AudioLimits(max_channels=2), None),
    ("fast-wav", written("WAV", "PCM_16", 96_000, 1, 0.2), AudioLimits(max_rate=48_000), None),
    ("long-flac", written("FLAC", "PCM_16", 8_000, 1, 3), AudioLimits(max_seconds=2), None),
    ("long-vorbis", written("OGG", "VORBIS", 8_000, 1, 3), AudioLimits(max_seconds=2), None),
    ("long-opus", written("OGG", "OPUS", 16_000, 1, 3), AudioLimits(max_seconds=2), None),
    ("long-mp3", written("MP3", "MPEG_LAYER_III", 8_000, 1, 3), AudioLimits(max_seconds=2), None),
    (
        "big-mp3",
        written("MP3", "MPEG_LAYER_III", 48_000, 2, 3),
        AudioLimits(max_samples=10**5),
        "audio_too_large",
    ),
    (
        "large-file",
        written("WAV", "PCM_16", 16_000, 1, 1),
        AudioLimits(max_bytes=1000),
        "audio_too_large",
    ),
    ("aiff", written("AIFF", "PCM_16", 16_000, 1, 0.5), AudioLimits(), None),
]


@pytest.mark.parametrize(
    ("data", "limits", "code"), [t[1:] for t in TOO_MUCH], ids=[t[0] for t in TOO_MUCH]
)
async def test_audio_past_the_limits_is_refused_before_any_worker_decodes_it(
    data: bytes, limits: AudioLimits, code: str | None
) -> None:
    preparer = NeverDecodes()
    transcriber = Transcriber(NoSpeech(), limits=limits, preparer=preparer)
    param = "messages[0].content[0].input_audio"
    with pytest.raises(InvalidRequest) as info:
        await transcriber.transcribe(data, param=param)
    assert (info.value.param, info.value.code) == (param, code)
    assert preparer.asked == 0
    # Within the limits, the same kind of file goes on to the decoder.
    await transcriber.transcribe(written("WAV", "PCM_16", 8_000, 1, 0.01))
    assert preparer.asked == 1


def test_judge_returns_the_declared_stream_within_the_limits() -> None:
    declared = judge_audio(written("FLAC", "PCM_16", 44_100, 2, 1.0), AudioLimits())
    assert (declared.container, declared.rate, declared.channels) == ("flac", 44_100, 2)
    assert declared.frames == 44_100


@pytest.mark.parametrize("rate", [8_000, 11_025, 22_050, 44_100, 48_000, 96_000, 192_000, 7_919])
def test_block_by_block_resampling_gives_the_whole_signal_s_samples(rate: int) -> None:
    signal = np.random.default_rng(rate).normal(0, 0.2, rate * 3 + 1234).astype(np.float32)
    whole = resample(signal, rate)
    resampler = StreamResampler(rate)
    sizes = np.random.default_rng(1).integers(1, 70_000, 200)
    pieces, pos = [], 0
    for size in sizes:
        pieces.append(resampler.push(signal[pos : pos + size]))
        pos += int(size)
        if pos >= len(signal):
            break
    pieces.append(resampler.finish())
    streamed = np.concatenate(pieces)
    assert len(streamed) == len(whole)
    assert np.max(np.abs(streamed - whole)) < 1e-5
