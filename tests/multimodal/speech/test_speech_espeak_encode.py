import io

import numpy as np
import pytest
import soundfile as sf

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.speech.encode import AudioStreamEncoder, encode_audio
from fleetgate.multimodal.speech.espeak import EspeakSynthesizer
from fleetgate.multimodal.speech.tts import SynthesizedAudio


@pytest.fixture(scope="module")
def hello() -> SynthesizedAudio:
    import asyncio

    return asyncio.run(EspeakSynthesizer().synthesize("Hello world, this is a test."))


def test_espeak_from_the_wheel_speaks_22050_hz(hello: SynthesizedAudio) -> None:
    assert hello.sample_rate == 22050
    assert 1.0 < hello.duration < 4.0
    assert np.abs(hello.samples()).max() > 0.1


async def test_voices_speed_and_errors() -> None:
    tts = EspeakSynthesizer()
    slow = await tts.synthesize("one two three four", voice="onyx", speed=0.5)
    fast = await tts.synthesize("one two three four", voice="onyx", speed=2.0)
    assert slow.duration > 1.5 * fast.duration
    with pytest.raises(InvalidRequest) as info:
        await tts.synthesize("hi", voice="no-such-voice")
    assert info.value.param == "voice"
    with pytest.raises(InvalidRequest):
        await tts.synthesize("hi", voice="../../etc")
    with pytest.raises(InvalidRequest):
        await tts.synthesize("hi", speed=9)
    chinese = await tts.synthesize("你好，今天天气很好。", voice="cmn")
    assert chinese.duration > 0.5


@pytest.mark.parametrize(
    ("fmt", "sf_format"), [("wav", "WAV"), ("flac", "FLAC"), ("mp3", "MP3"), ("opus", "OGG")]
)
def test_file_encoders_round_trip(hello: SynthesizedAudio, fmt: str, sf_format: str) -> None:
    data = encode_audio(hello, fmt)
    info = sf.info(io.BytesIO(data))
    assert info.format == sf_format
    assert abs(info.duration - hello.duration) < 0.1


def test_pcm_is_24k_and_unknown_formats_refused(hello: SynthesizedAudio) -> None:
    pcm = encode_audio(hello, "pcm")
    assert abs(len(pcm) / 2 / 24000 - hello.duration) < 0.01
    with pytest.raises(InvalidRequest) as info:
        encode_audio(hello, "aac")
    assert info.value.param == "response_format"


def test_stream_encoder_wav_and_flac(hello: SynthesizedAudio) -> None:
    wav = AudioStreamEncoder("wav")
    body = wav.encode(hello) + wav.encode(hello) + wav.finish()
    assert body[:4] == b"RIFF" and body.count(b"RIFF") == 1
    assert len(body) == 44 + 2 * len(hello.pcm)
    flac = AudioStreamEncoder("flac")
    assert flac.encode(hello) == b"" and flac.encode(hello) == b""
    samples, rate = sf.read(io.BytesIO(flac.finish()))
    assert rate == 22050 and len(samples) == len(hello.pcm)
