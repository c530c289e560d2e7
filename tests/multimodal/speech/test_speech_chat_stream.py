"""Chat completions with ``modalities: ["text", "audio"]`` against the engine simulator."""

from __future__ import annotations

import base64
from typing import Any

import orjson
from tests.conftest import AUTH, GatewayFactory

from fleetgate.sim import SimConfig, running_sim


def _config(sim_url: str) -> dict[str, Any]:
    deployment = {"provider": "openai", "model": "tiny", "api_base": f"{sim_url}/v1"}
    return {
        "models": [{"alias": "tiny", "deployments": [deployment]}],
        "tenancy": {"enabled": False},
    }


def _events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for line in raw.split(b"\n\n"):
        if line.startswith(b"data: {"):
            out.append(orjson.loads(line[6:]))
    return out


async def test_first_audio_delta_arrives_before_the_text_is_complete(
    gateway: GatewayFactory,
) -> None:
    sim = SimConfig(mode="random", decode_ms_per_step=15.0, output_len=80)
    async with running_sim(sim) as url:
        client = await gateway(_config(url))
        body = {
            "model": "tiny",
            "stream": True,
            "max_tokens": 80,
            "modalities": ["text", "audio"],
            "audio": {"voice": "alloy", "format": "pcm16"},
            "messages": [{"role": "user", "content": "Tell me a story."}],
        }
        resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
        assert resp.status == 200, await resp.text()
        events = _events(await resp.read())
    kinds = []
    spoken, written = [], []
    for event in events:
        delta = event["choices"][0]["delta"] if event["choices"] else {}
        if "audio" in delta:
            kinds.append("audio")
            audio = delta["audio"]
            assert set(audio) == {"id", "data", "transcript"}
            assert len(base64.b64decode(audio["data"])) > 1000  # real pcm16 speech
            spoken.append(audio["transcript"])
        elif delta.get("content"):
            kinds.append("text")
            written.append(delta["content"])
    assert "audio" in kinds and "text" in kinds
    first_audio = kinds.index("audio")
    last_text = len(kinds) - 1 - kinds[::-1].index("text")
    assert first_audio < last_text, kinds  # speech started while text was still streaming
    # Every word written was spoken, in order.
    assert " ".join(spoken).split() == "".join(written).split()
    assert events[-1]["choices"][0]["finish_reason"] is not None


async def test_non_streaming_reply_gets_message_audio(gateway: GatewayFactory) -> None:
    async with running_sim(SimConfig(mode="echo")) as url:
        client = await gateway(_config(url))
        body = {
            "model": "tiny",
            "modalities": ["text", "audio"],
            "audio": {"voice": "nova", "format": "wav"},
            "messages": [{"role": "user", "content": "Good morning, how are you?"}],
        }
        resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
        assert resp.status == 200, await resp.text()
        message = (await resp.json())["choices"][0]["message"]
    wav = base64.b64decode(message["audio"]["data"])
    assert wav[:4] == b"RIFF" and len(wav) > 10_000
    assert message["audio"]["transcript"] == message["content"]
