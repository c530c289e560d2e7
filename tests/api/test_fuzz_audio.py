"""Fuzzing the audio routes: whatever upload or speech request a caller sends, with any key or
none, the answer is 2xx/4xx (an OpenAI error object), never a 5xx and never a hang.

Uploads are built from real audio (short WAV and FLAC files), WAV headers that lie about their
rate, channels, sample size and length, truncated and bit-flipped files, and plain garbage; the
form fields around them are fuzzed too.
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.fuzz_support import (
    RawRequest,
    assert_answer,
    authorization,
    hostile_text,
    hostile_value,
    send,
)
from tests.conftest import MASTER, GatewayFactory, one_alias
from tests.fakes import FakeUpstream

BOUNDARY = "fuzz-boundary"


@dataclass
class Fuzzed:
    port: int
    keys: dict[str, str]  # role -> key


@pytest.fixture
async def fuzzed(gateway: GatewayFactory, upstream: FakeUpstream) -> Fuzzed:
    """A gateway with tenancy and the embedded speech engines; a team admin key, a user key
    that may use anything and one limited to the chat alias."""
    client = await gateway(one_alias(upstream))
    master = {"Authorization": f"Bearer {MASTER}"}
    team = await (await client.post("/admin/teams", json={"name": "t"}, headers=master)).json()
    keys = {"master": MASTER}
    for role, body in {
        "team_admin": {"role": "team_admin"},
        "user": {},
        "chat_only": {"aliases": ["tiny"]},
    }.items():
        resp = await client.post("/admin/keys", json={"team": team["id"], **body}, headers=master)
        assert resp.status == 201, await resp.text()
        keys[role] = (await resp.json())["key"]
    port = client.server.port
    assert port is not None
    return Fuzzed(port, keys)


def _sound(seconds: float, rate: int, channels: int, fmt: str, subtype: str) -> bytes:
    buf = io.BytesIO()
    noise = np.random.default_rng(0).normal(0, 0.05, (max(1, int(seconds * rate)), channels))
    sf.write(buf, noise.astype(np.float32), rate, format=fmt, subtype=subtype)
    return buf.getvalue()


@st.composite
def real_audio(draw: st.DrawFn) -> bytes:
    fmt, subtype = draw(st.sampled_from([
        ("WAV", "PCM_16"), ("WAV", "FLOAT"), ("WAV", "PCM_U8"), ("FLAC", "PCM_16"),
        ("OGG", "VORBIS"),
    ]))  # fmt: skip
    rate = draw(st.sampled_from([8000, 16000, 22050, 44100, 48000]))
    return _sound(draw(st.sampled_from([0.0, 0.01, 0.2])), rate, draw(st.integers(1, 3)), fmt,
                  subtype)  # fmt: skip


@st.composite
def lying_wav(draw: st.DrawFn) -> bytes:
    """A WAV header whose fields say anything, followed by a few real bytes."""
    channels = draw(st.sampled_from([0, 1, 2, 8, 255, 65535]))
    rate = draw(st.sampled_from([0, 1, 3, 8000, 16000, 192000, 2**31 - 1, 2**32 - 1]))
    bits = draw(st.sampled_from([0, 1, 8, 16, 24, 32, 64, 65535]))
    fmt_code = draw(st.sampled_from([1, 3, 0, 2, 0xFFFE]))
    payload = draw(st.binary(max_size=512))
    data_len = draw(st.sampled_from([len(payload), 0, 2**31, 2**32 - 1]))
    block = (channels * bits) // 8 & 0xFFFF
    fmt_chunk = struct.pack("<HHIIHH", fmt_code, channels, rate, (rate * block) & 0xFFFFFFFF,
                            block, bits)  # fmt: skip
    body = b"WAVEfmt " + struct.pack("<I", 16) + fmt_chunk + b"data"
    body += struct.pack("<I", data_len) + payload
    return b"RIFF" + struct.pack("<I", len(body) & 0xFFFFFFFF) + body


@st.composite
def damaged(draw: st.DrawFn, inner: st.SearchStrategy[bytes]) -> bytes:
    data = bytearray(draw(inner))
    if data and draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    for _ in range(draw(st.integers(0, 4)) if data else 0):
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    return bytes(data)


audio_file = st.one_of(
    real_audio(), lying_wav(), damaged(real_audio()), damaged(lying_wav()),
    st.binary(max_size=128), st.sampled_from([b"", b"RIFF", b"fLaC", b"OggS", b"ID3\x04"]),
)  # fmt: skip


def _part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"


FIELDS = {
    "file": [""],  # the upload itself (drawn apart)
    "model": ["whisper-1", "tiny", "", "x" * 300],
    "response_format": ["json", "text", "verbose_json", "srt", "vtt", "xml", ""],
    "language": ["en", "", "xx", "en-US-and-more"],
    "prompt": ["names: Ada", ""],
    "temperature": ["0", "nan", "-1"],
    "timestamp_granularities[]": ["word", "segment"],
}


def _mutated(draw: st.DrawFn, choices: dict[str, list[Any]], hostile: Any) -> dict[str, Any]:
    """The first (valid) choice of every field, then a few fields dropped or replaced by another
    choice or a hostile value."""
    out = {name: values[0] for name, values in choices.items()}
    for name in draw(st.lists(st.sampled_from(sorted(choices)), max_size=3)):
        pick = draw(st.integers(0, 3))
        if pick == 0:
            out.pop(name, None)
        else:
            out[name] = draw(st.sampled_from(choices[name]) if pick < 3 else hostile)
    return out


@st.composite
def transcription(draw: st.DrawFn, keys: dict[str, str]) -> RawRequest:
    fields = _mutated(draw, FIELDS, hostile_text)
    parts = [_part(name, value.encode()) for name, value in fields.items() if name != "file"]
    if "file" in fields:
        audio = draw(st.one_of(real_audio(), audio_file))
        filename = draw(st.sampled_from(["a.wav", "", "é", "../../x"]))
        parts.insert(draw(st.integers(0, len(parts))), _part("file", audio, filename))
    if draw(st.integers(0, 5)) == 0:
        parts.append(_part(draw(hostile_text), draw(st.binary(max_size=32))))
    body = b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()
    content_type = draw(st.sampled_from([f"multipart/form-data; boundary={BOUNDARY}".encode()])
                        | st.sampled_from([b"multipart/form-data; boundary=other",
                                           b"application/json"]))  # fmt: skip
    headers = [*draw(authorization(keys)), (b"Content-Type", content_type)]
    return RawRequest("POST", b"/v1/audio/transcriptions", headers, body)


SPEECH: dict[str, list[Any]] = {
    "model": ["tts-1", "tiny", "", "x" * 300],
    "input": ["Hello.", "", " ", "x" * 5000, "a\x00b", "🙂"],
    "voice": ["alloy", "nova", "en-us", ""],
    "response_format": ["wav", "pcm", "mp3", "flac", "opus", "aac", ""],
    "speed": [1, 0.25, 4.0, 0, 5, -1, 1e308, True, "1"],
}


@st.composite
def speech(draw: st.DrawFn, keys: dict[str, str]) -> RawRequest:
    body: Any = _mutated(draw, SPEECH, hostile_value)
    if draw(st.integers(0, 8)) == 0:
        body = draw(hostile_value)
    raw = json.dumps(body, allow_nan=False).encode()
    headers = [*draw(authorization(keys)), (b"Content-Type", b"application/json")]
    return RawRequest("POST", b"/v1/audio/speech", headers, raw)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_no_5xx_from_any_transcription_upload(fuzzed: Fuzzed, data: st.DataObject) -> None:
    request = data.draw(transcription(fuzzed.keys))
    assert_answer(request, await send(fuzzed.port, request))


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
async def test_no_5xx_from_any_speech_request(fuzzed: Fuzzed, data: st.DataObject) -> None:
    request = data.draw(speech(fuzzed.keys))
    assert_answer(request, await send(fuzzed.port, request))
