"""espeak-ng runs in supervised worker processes: initialised once, at worker start, so the
first requests of a fresh gateway speak; a worker killed mid-request costs that request (503)
and the gateway answers the next one."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream
from tests.multimodal.speech.slow_engine import STALL_MARK_ENV

from fleetgate.api.state import GATEWAY
from fleetgate.multimodal.ports import MULTIMODAL
from fleetgate.multimodal.runtime import MultimodalRuntime
from fleetgate.multimodal.speech import espeak
from fleetgate.multimodal.speech.espeak import OPENAI_VOICES, EspeakSynthesizer


async def test_every_openai_voice_speaks() -> None:
    tts = EspeakSynthesizer()
    try:
        for voice in OPENAI_VOICES:
            audio = await tts.synthesize("Hello there.", voice=voice)
            assert audio.duration > 0.3, voice
    finally:
        await tts.aclose()


async def test_a_fresh_synthesizer_speaks_concurrent_first_phrases() -> None:
    # The first phrases of a fresh gateway arrive together; the engine used to be initialised
    # by whichever thread came first (400 "voice is not available", or a crash).
    tts = EspeakSynthesizer(workers=2)
    try:
        phrases = [f"Phrase number {i} of the reply." for i in range(8)]
        voices = list(OPENAI_VOICES)
        pieces = await asyncio.gather(
            *(tts.synthesize(p, voice=voices[i]) for i, p in enumerate(phrases))
        )
        assert all(p.duration > 0.5 for p in pieces)
        assert len(tts.workers.pids()) == 2
        assert os.getpid() not in tts.workers.pids()
    finally:
        await tts.aclose()


def _config(up: FakeUpstream) -> dict[str, Any]:
    cfg = one_alias(up)
    cfg["tenancy"] = {"enabled": False}
    return cfg


def _speech(text: str) -> dict[str, Any]:
    return {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm"}


async def test_a_speech_worker_killed_mid_request_costs_that_request_and_the_next_is_answered(
    gateway: GatewayFactory, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(espeak, "ENGINE", "tests.multimodal.speech.slow_engine:SlowEngine")
    client = await gateway(_config(upstream))
    slow = asyncio.create_task(
        client.post("/v1/audio/speech", json=_speech("Say this slowly."), headers=AUTH)
    )
    synthesizer = _runtime(client).synthesizer
    assert isinstance(synthesizer, EspeakSynthesizer)
    for _ in range(1000):
        if synthesizer.workers.in_flight and synthesizer.workers.pids():
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # inside the engine's speak() now
    (pid,) = synthesizer.workers.pids()
    os.kill(pid, signal.SIGKILL)

    resp = await asyncio.wait_for(slow, 20)
    assert resp.status == 503
    err = (await resp.json())["error"]
    assert (err["type"], err["code"]) == ("service_unavailable", "native_worker_crashed")

    after = await client.post("/v1/audio/speech", json=_speech("Hello again."), headers=AUTH)
    assert after.status == 200
    assert len(await after.read()) > 24_000  # over half a second of 24 kHz pcm16
    assert synthesizer.workers.pids() and pid not in synthesizer.workers.pids()


async def test_a_worker_lost_after_the_first_phrase_cuts_the_stream_instead_of_hanging(
    gateway: GatewayFactory,
    upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    engine = "tests.multimodal.speech.slow_engine:StallsAfterFirstPhrase"
    monkeypatch.setattr(espeak, "ENGINE", engine)
    mark = tmp_path / "stalled"
    monkeypatch.setenv(STALL_MARK_ENV, str(mark))  # one stall, in one worker, its pid in it
    client = await gateway(_config(upstream))
    text = "Hello there, this is the first phrase. And this is the second one."
    resp = await client.post("/v1/audio/speech", json=_speech(text), headers=AUTH)
    assert resp.status == 200
    assert len(await resp.content.readany()) > 1000  # the first phrase arrived
    synthesizer = _runtime(client).synthesizer
    assert isinstance(synthesizer, EspeakSynthesizer)
    # the worker stalled on the second phrase (any of the pool's workers: killing another
    # left the stalled one to hold the next request for its whole minute, 60 s of a CI run)
    for _ in range(2000):
        if mark.exists() and mark.read_text():
            break
        await asyncio.sleep(0.01)
    stalled = int(mark.read_text())
    assert stalled in synthesizer.workers.pids() and synthesizer.workers.in_flight
    os.kill(stalled, signal.SIGKILL)
    with pytest.raises(aiohttp.ClientPayloadError):
        await asyncio.wait_for(resp.read(), 20)  # an incomplete body, not a short file
    after = await client.post("/v1/audio/speech", json=_speech("Hello again."), headers=AUTH)
    assert after.status == 200 and len(await after.read()) > 24_000


def _runtime(client: Any) -> MultimodalRuntime:
    runtime = client.server.app[GATEWAY].core.ports.require(MULTIMODAL)
    assert runtime is not None
    return runtime
