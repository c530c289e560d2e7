from __future__ import annotations

import io
import sys
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from tests.multimodal.audio.conftest import declared_flac

from fleetgate.errors import InvalidRequest, MissingExtra
from fleetgate.multimodal.audio.decode import AudioLimits, decode_audio


def tone(fmt: str, subtype: str | None, rate: int = 44100, seconds: float = 1.0) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    stereo = np.stack([np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 440 * t)], axis=1) * 0.5
    buf = io.BytesIO()
    sf.write(buf, stereo.astype(np.float32), rate, format=fmt, subtype=subtype)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("fmt", "subtype"),
    [("WAV", "PCM_16"), ("FLAC", "PCM_16"), ("OGG", "VORBIS"), ("MP3", "MPEG_LAYER_III")],
)
def test_formats_decode_to_16k_mono(fmt: str, subtype: str) -> None:
    samples = decode_audio(tone(fmt, subtype))
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert abs(len(samples) / 16000 - 1.0) < 0.08  # mp3 adds encoder padding
    spectrum = np.abs(np.fft.rfft(samples[2000:14000]))
    peak_hz = np.argmax(spectrum) * 16000 / 12000
    assert abs(peak_hz - 440) < 5


def test_garbage_and_limits_are_400() -> None:
    with pytest.raises(InvalidRequest, match="could not be decoded") as info:
        decode_audio(b"definitely not audio" * 10)
    assert info.value.param == "file"
    with pytest.raises(InvalidRequest, match="longer than 0.5 seconds"):
        decode_audio(tone("WAV", "PCM_16"), limits=AudioLimits(max_seconds=0.5))
    with pytest.raises(InvalidRequest, match="larger than"):
        decode_audio(tone("WAV", "PCM_16"), limits=AudioLimits(max_bytes=100))


def test_without_scipy_16k_audio_decodes_and_other_rates_name_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.signal", None)
    assert len(decode_audio(tone("WAV", "PCM_16", rate=16000))) == 16000
    with pytest.raises(MissingExtra, match=r"resampling audio needs scipy.*fleetgate\[audio\]"):
        decode_audio(tone("WAV", "PCM_16", rate=44100))


def test_without_soundfile_decoding_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    wav = tone("WAV", "PCM_16", rate=16000)
    monkeypatch.setitem(sys.modules, "soundfile", None)
    with pytest.raises(MissingExtra, match=r"decoding audio needs soundfile.*fleetgate\[audio\]"):
        decode_audio(wav)


def test_a_small_flac_of_8_channels_at_192_khz_is_refused_from_its_header() -> None:
    data = declared_flac(192_000, 8, 60)
    assert len(data) < 120_000  # ~93 KB that would decode to 92 million samples (368 MB)
    with pytest.raises(InvalidRequest) as info:
        decode_audio(data)
    assert info.value.code == "audio_too_large" and info.value.param == "file"
    assert "92160000" in info.value.message or "more than 57600000 samples" in info.value.message


def test_rate_channels_and_samples_are_bounded() -> None:
    with pytest.raises(InvalidRequest, match="sample rate"):
        decode_audio(tone("WAV", "PCM_16", rate=48_000), limits=AudioLimits(max_rate=44_100))
    with pytest.raises(InvalidRequest, match="channels"):
        decode_audio(tone("WAV", "PCM_16"), limits=AudioLimits(max_channels=1))
    with pytest.raises(InvalidRequest, match="samples"):
        decode_audio(tone("WAV", "PCM_16"), limits=AudioLimits(max_samples=44_100))


def test_a_header_that_understates_the_length_is_stopped_while_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    long = tone("WAV", "PCM_16", rate=8_000, seconds=3.0)

    class LyingHeader:
        """A decoder whose header says one frame (a stream of unknown length can) and that
        then decodes three seconds: what the gateway's header check saw was one second."""

        frames = 1
        format = "WAV"

        def __init__(self, file: io.BytesIO) -> None:
            self._real = sf.SoundFile(io.BytesIO(long))
            self.samplerate, self.channels = self._real.samplerate, self._real.channels

        def __enter__(self) -> LyingHeader:
            return self

        def __exit__(self, *exc: object) -> None:
            self._real.close()

        def read(self, frames: int, **kwargs: Any) -> Any:
            return self._real.read(frames, **kwargs)

    lying = ModuleType("soundfile")
    lying.SoundFile = LyingHeader  # type: ignore[attr-defined]
    lying.LibsndfileError = sf.LibsndfileError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "soundfile", lying)
    data = tone("WAV", "PCM_16", rate=8_000, seconds=1.0)
    with pytest.raises(InvalidRequest, match="longer than 2 seconds"):
        decode_audio(data, limits=AudioLimits(max_seconds=2.0))
    with pytest.raises(InvalidRequest, match="samples"):
        decode_audio(data, limits=AudioLimits(max_samples=8_000 * 2 * 2))
    assert len(decode_audio(data)) == 3 * 16_000
