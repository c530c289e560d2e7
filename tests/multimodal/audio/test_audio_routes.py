"""``/v1/audio/speech`` and ``/v1/audio/transcriptions`` through the gateway, and
``input_audio`` parts in chat."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import signal
from typing import Any

import aiohttp
import numpy as np
import pytest
import soundfile as sf
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream
from tests.multimodal.audio.conftest import declared_flac

from fleetgate.api.state import GATEWAY
from fleetgate.multimodal.audio.asr import PocketsphinxTranscriber
from fleetgate.multimodal.ports import MULTIMODAL
from fleetgate.multimodal.runtime import MultimodalRuntime

# Same tolerance as the library round trip (tests/multimodal/audio/test_audio_roundtrip.py).
WER_TOLERANCE = 0.35


def word_error_rate(reference: str, hypothesis: str) -> float:
    ref, hyp = reference.split(), hypothesis.split()
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, start=1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))


def _config(up: FakeUpstream) -> dict[str, Any]:
    cfg = one_alias(up)
    cfg["tenancy"] = {"enabled": False}
    return cfg


def _form(audio: bytes, **fields: str) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("file", audio, filename="speech.wav", content_type="audio/wav")
    for name, value in fields.items():
        form.add_field(name, value)
    return form


async def test_speech_round_trip_through_the_routes(
    gateway: GatewayFactory, upstream: FakeUpstream, sentences: list[str]
) -> None:
    client = await gateway(_config(upstream))
    pieces: list[np.ndarray] = []
    rate = 0
    for sentence in sentences:
        resp = await client.post(
            "/v1/audio/speech",
            json={"model": "tts-1", "input": sentence, "voice": "alloy", "response_format": "flac"},
            headers=AUTH,
        )
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"] == "audio/flac"
        samples, rate = sf.read(io.BytesIO(await resp.read()), dtype="float32")
        pieces += [samples, np.zeros(int(0.8 * rate), np.float32)]
    buf = io.BytesIO()
    sf.write(buf, np.concatenate(pieces), rate, format="WAV", subtype="PCM_16")
    resp = await client.post(
        "/v1/audio/transcriptions",
        data=_form(buf.getvalue(), model="whisper-1", response_format="verbose_json"),
        headers=AUTH,
    )
    assert resp.status == 200, await resp.text()
    doc = await resp.json()
    assert word_error_rate(" ".join(sentences), doc["text"].lower()) <= WER_TOLERANCE, doc["text"]
    assert len(doc["segments"]) == len(sentences)
    srt = await client.post(
        "/v1/audio/transcriptions",
        data=_form(buf.getvalue(), model="whisper-1", response_format="srt"),
        headers=AUTH,
    )
    text = await srt.text()
    assert text.startswith("1\n00:00:0") and f"\n{len(sentences)}\n" in text


@pytest.mark.parametrize("fmt", ["wav", "pcm", "mp3"])
async def test_speech_formats_stream_playable_audio(
    gateway: GatewayFactory, upstream: FakeUpstream, fmt: str
) -> None:
    client = await gateway(_config(upstream))
    resp = await client.post(
        "/v1/audio/speech",
        json={
            "model": "tts-1",
            "input": "Hello there. How are you today?",
            "voice": "nova",
            "response_format": fmt,
        },  # fmt: skip
        headers=AUTH,
    )
    assert resp.status == 200
    assert resp.headers.get("Transfer-Encoding") == "chunked"  # streamed, not buffered
    data = await resp.read()
    if fmt == "pcm":
        seconds = len(data) / 2 / 24_000
    else:
        # A streamed WAV has an "unknown length" header; read it as raw PCM after 44 bytes.
        if fmt == "wav":
            seconds = (len(data) - 44) / 2 / 22_050
        else:
            samples, rate = sf.read(io.BytesIO(data), dtype="float32")
            seconds = len(samples) / rate
    assert 1.0 < seconds < 6.0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "tts-1", "voice": "alloy"}, "input"),
        ({"model": "tts-1", "input": "hi", "voice": "robot"}, "voice"),
        (
            {"model": "tts-1", "input": "hi", "voice": "alloy", "response_format": "aac"},
            "response_format",
        ),  # fmt: skip
        ({"model": "tts-1", "input": "hi", "voice": "alloy", "speed": 9}, "speed"),
        ({"input": "hi", "voice": "alloy"}, "model"),
    ],
)
async def test_speech_bad_input_is_an_openai_400(
    gateway: GatewayFactory, upstream: FakeUpstream, body: dict[str, Any], param: str
) -> None:
    client = await gateway(_config(upstream))
    resp = await client.post("/v1/audio/speech", json=body, headers=AUTH)
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error"


async def test_transcription_bad_input_and_auth(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    no_auth = await client.post("/v1/audio/transcriptions", data=_form(b"RIFF", model="w"))
    assert no_auth.status == 401
    garbage = await client.post(
        "/v1/audio/transcriptions", data=_form(b"not audio at all", model="w"), headers=AUTH
    )
    assert garbage.status == 400
    bad_fmt = await client.post(
        "/v1/audio/transcriptions",
        data=_form(b"RIFF", model="w", response_format="xml"),
        headers=AUTH,
    )
    assert (await bad_fmt.json())["error"]["param"] == "response_format"
    no_file = aiohttp.FormData()
    no_file.add_field("model", "w")
    missing = await client.post("/v1/audio/transcriptions", data=no_file, headers=AUTH)
    assert (await missing.json())["error"]["param"] == "file"


async def test_input_audio_in_chat_is_transcribed_into_the_prompt(
    gateway: GatewayFactory, upstream: FakeUpstream, spoken_wav: bytes
) -> None:
    client = await gateway(_config(upstream))
    data = base64.b64encode(spoken_wav).decode()
    part = {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
    body = {"model": "tiny", "messages": [{"role": "user", "content": [part]}]}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 200, await resp.text()
    sent = upstream.seen[0].body["messages"][0]["content"]
    assert sent[0]["type"] == "text"
    assert "open the door" in sent[0]["text"].lower()
    assert "input_audio" not in str(upstream.seen[0].body)


async def test_a_small_flac_declaring_8_channels_at_192_khz_is_refused_not_decoded(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    flac = declared_flac(192_000, 8, 60)  # ~93 KB declaring 92 million samples
    resp = await client.post(
        "/v1/audio/transcriptions", data=_form(flac, model="whisper-1"), headers=AUTH
    )
    assert resp.status == 400, await resp.text()
    err = (await resp.json())["error"]
    assert (err["param"], err["code"]) == ("file", "audio_too_large")
    backend = _runtime(client).transcriber.backend
    assert isinstance(backend, PocketsphinxTranscriber)
    assert backend.workers.pids() == []  # judged by its header: no worker started, no decoding


async def test_an_input_audio_part_past_the_limits_is_refused_from_its_header(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(_config(upstream))
    data = base64.b64encode(declared_flac(192_000, 8, 60)).decode()
    part = {"type": "input_audio", "input_audio": {"data": data, "format": "flac"}}
    text = {"type": "text", "text": "what is said here?"}
    body = {"model": "tiny", "messages": [{"role": "user", "content": [text, part]}]}
    resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert resp.status == 400, await resp.text()
    err = (await resp.json())["error"]
    assert err["param"] == "messages[0].content[1].input_audio"
    assert err["code"] == "audio_too_large" and err["type"] == "invalid_request_error"
    backend = _runtime(client).transcriber.backend
    assert isinstance(backend, PocketsphinxTranscriber) and backend.workers.pids() == []
    assert upstream.seen == []


async def test_killed_recogniser_workers_are_replaced_and_the_next_upload_is_transcribed(
    gateway: GatewayFactory, upstream: FakeUpstream, spoken_wav: bytes
) -> None:
    client = await gateway(_config(upstream))
    first = await client.post(
        "/v1/audio/transcriptions", data=_form(spoken_wav, model="whisper-1"), headers=AUTH
    )
    assert first.status == 200
    backend = _runtime(client).transcriber.backend
    assert isinstance(backend, PocketsphinxTranscriber)
    killed = backend.workers.pids()
    assert killed  # the recogniser runs outside the gateway's process
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    while set(backend.workers.pids()) & set(killed):  # until the kills have landed
        await asyncio.sleep(0.01)
    again = await client.post(
        "/v1/audio/transcriptions", data=_form(spoken_wav, model="whisper-1"), headers=AUTH
    )
    assert again.status == 200, await again.text()
    assert (await again.json())["text"] == (await first.json())["text"]
    assert not set(backend.workers.pids()) & set(killed)


def _runtime(client: Any) -> MultimodalRuntime:
    runtime = client.server.app[GATEWAY].core.ports.require(MULTIMODAL)
    assert runtime is not None
    return runtime
