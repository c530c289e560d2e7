import io
import sys

import numpy as np
import pytest
import soundfile as sf

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
