from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator

import numpy as np
import pytest
import soundfile as sf

from fleetgate.multimodal.audio.asr import PocketsphinxTranscriber
from fleetgate.multimodal.audio.transcribe import Transcriber, Transcript
from fleetgate.multimodal.speech.espeak import EspeakSynthesizer

# Sentences inside the vocabulary pocketsphinx's small US-English model recognises reliably on
# espeak-ng's synthetic voice (see the report: harder sentences score far worse).
SENTENCES = [
    "please open the door",
    "i would like a cup of coffee",
    "call my mother tomorrow morning",
    "send a message to john",
]


def speak_to_wav(sentences: list[str], gap_s: float) -> bytes:
    async def run() -> bytes:
        tts = EspeakSynthesizer()
        parts: list[np.ndarray] = []
        rate = 22050
        for sentence in sentences:
            audio = await tts.synthesize(sentence, voice="alloy")
            rate = audio.sample_rate
            parts += [audio.samples(), np.zeros(int(gap_s * rate), np.float32)]
        await tts.aclose()
        buf = io.BytesIO()
        sf.write(buf, np.concatenate(parts), rate, format="WAV", subtype="PCM_16")
        return buf.getvalue()

    return asyncio.run(run())


def declared_flac(rate: int, channels: int, seconds: int) -> bytes:
    """Silence: FLAC stores it in a few bytes a block, so the file is tiny for its length."""
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", rate, channels, format="FLAC", subtype="PCM_16") as f:
        block = np.zeros((rate, channels), np.int16)
        for _ in range(seconds):
            f.write(block)
    return buf.getvalue()


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return list(SENTENCES)


@pytest.fixture(scope="module")
def spoken_wav() -> bytes:
    """SENTENCES spoken by espeak-ng with 0.8 s of silence after each."""
    return speak_to_wav(SENTENCES, 0.8)


@pytest.fixture(scope="module")
def sphinx() -> Iterator[PocketsphinxTranscriber]:
    asr = PocketsphinxTranscriber(workers=2)
    asr.warm_up()
    yield asr
    asr.close()


@pytest.fixture(scope="module")
def spoken_transcript(spoken_wav: bytes, sphinx: PocketsphinxTranscriber) -> Transcript:
    """The pipeline's transcript of ``spoken_wav`` (computed once: recognition is slow)."""
    return asyncio.run(Transcriber(sphinx).transcribe(spoken_wav))
