import asyncio
import base64
from collections.abc import AsyncIterator

import pytest

from fleetgate.multimodal.speech.streamer import SpeechStreamer
from fleetgate.multimodal.speech.tts import SynthesizedAudio


class SlowFirstSynth:
    """Earlier phrases take longer, so completion order is the reverse of phrase order."""

    def __init__(self) -> None:
        self.active = 0
        self.max_active = 0
        self.calls: list[str] = []

    async def synthesize(
        self, text: str, *, voice: str = "alloy", speed: float = 1.0
    ) -> SynthesizedAudio:
        self.calls.append(text)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        await asyncio.sleep(0.08 / len(self.calls))
        self.active -= 1
        return SynthesizedAudio(text.encode().ljust(48, b"\0")[:48], 24000)

    async def aclose(self) -> None:
        pass


async def deltas(text: str, gate: asyncio.Event | None = None) -> AsyncIterator[str]:
    for i in range(0, len(text), 5):
        if gate is not None and i >= len(text) // 2:
            await gate.wait()
        yield text[i : i + 5]
        await asyncio.sleep(0)


TEXT = "First phrase here. Second one comes, third is next; and the last words."


async def test_audio_comes_in_phrase_order_while_synthesised_concurrently() -> None:
    synth = SlowFirstSynth()
    streamer = SpeechStreamer(synth, max_concurrency=4)
    pieces = [p async for p in streamer.stream(deltas(TEXT))]
    assert [p.transcript for p in pieces] == synth.calls
    assert " ".join(p.transcript for p in pieces) == TEXT
    assert [p.index for p in pieces] == list(range(len(pieces)))
    assert synth.max_active > 1
    assert all(p.audio.pcm.startswith(p.transcript.encode()[:20]) for p in pieces)


async def test_first_audio_arrives_before_text_is_complete() -> None:
    gate = asyncio.Event()
    streamer = SpeechStreamer(SlowFirstSynth())
    stream = streamer.stream(deltas(TEXT, gate))
    first = await asyncio.wait_for(anext(stream), 2)  # the second half of the text is held back
    assert first.transcript == "First phrase here."
    gate.set()
    rest = [p async for p in stream]
    assert rest and rest[-1].transcript.endswith("last words.")


async def test_chat_delta_shape_and_push_api() -> None:
    streamer = SpeechStreamer(SlowFirstSynth(), audio_id="audio_1")
    streamer.feed("Hello there, my friend. ")
    streamer.finish()
    with pytest.raises(RuntimeError):
        streamer.feed("more")
    pieces = [p async for p in streamer]
    delta = pieces[0].to_chat_delta("pcm")
    assert set(delta) == {"id", "data", "transcript"} and delta["id"] == "audio_1"
    assert len(base64.b64decode(delta["data"])) == 48  # 24 kHz pcm passes through unchanged
    assert streamer.ready() == []
    await streamer.aclose()


async def test_aclose_cancels_pending_synthesis() -> None:
    started = asyncio.Event()

    class Hang:
        async def synthesize(
            self, text: str, *, voice: str = "alloy", speed: float = 1.0
        ) -> SynthesizedAudio:
            started.set()
            await asyncio.sleep(30)
            raise AssertionError("not cancelled")

        async def aclose(self) -> None:
            pass

    streamer = SpeechStreamer(Hang())
    streamer.feed("A phrase that is long enough. ")
    await started.wait()
    await asyncio.wait_for(streamer.aclose(), 1)


async def test_streamer_with_embedded_espeak_yields_real_audio_in_order() -> None:
    from fleetgate.multimodal.speech.espeak import EspeakSynthesizer

    streamer = SpeechStreamer(EspeakSynthesizer())
    text = "The build is green. Deploying to staging now, then production."
    pieces = [p async for p in streamer.stream(deltas(text))]
    assert " ".join(p.transcript for p in pieces) == text
    assert len(pieces) >= 3
    assert all(p.audio.sample_rate == 22050 and p.audio.duration > 0.3 for p in pieces)
