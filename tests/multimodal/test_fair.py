"""`FairShare`: one key's backlog at the shared speech workers never stands between another key
and a worker, and a key may keep only so many requests waiting."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import numpy as np
import pytest
import soundfile as sf
from tests.conftest import MASTER, GatewayFactory, one_alias
from tests.fakes import FakeUpstream

from fleetgate.api.state import GATEWAY
from fleetgate.errors import RateLimited
from fleetgate.multimodal.audio.limits import AudioLimits
from fleetgate.multimodal.audio.prepare import PreparedAudio
from fleetgate.multimodal.audio.vad import VadConfig
from fleetgate.multimodal.fair import FairShare
from fleetgate.multimodal.ports import MULTIMODAL
from fleetgate.multimodal.speech.tts import SynthesizedAudio


async def until(condition: Callable[[], bool]) -> None:
    """Wait (bounded) until ``condition`` holds: the other tasks have got where they wait."""
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.005)


async def test_turns_go_round_robin_between_keys_not_first_come_first_served() -> None:
    share = FairShare("test", capacity=1)
    order: list[str] = []
    gates: dict[str, asyncio.Event] = {}

    async def job(owner: str, name: str) -> None:
        async with share.turn(owner):
            order.append(name)
            gates[name] = asyncio.Event()
            await gates[name].wait()

    tasks = [asyncio.create_task(job("a", f"a{i}")) for i in range(1, 5)]
    await until(lambda: order == ["a1"] and share.waiting("a") == 3)
    tasks.append(asyncio.create_task(job("b", "b1")))
    await until(lambda: share.waiting("b") == 1)
    for name in ("a1", "a2", "b1", "a3", "a4"):
        await until(lambda name=name: name in gates)  # type: ignore[misc]
        gates[name].set()
    await asyncio.gather(*tasks)
    assert order == ["a1", "a2", "b1", "a3", "a4"]  # b waited for one turn of a, not three


async def test_a_key_waiting_for_too_many_turns_gets_429_and_others_still_queue() -> None:
    share = FairShare("transcription", capacity=1, max_waiting=2)
    release = asyncio.Event()

    async def job(owner: str) -> None:
        async with share.turn(owner):
            await release.wait()

    held = [asyncio.create_task(job("a")) for _ in range(3)]
    await until(lambda: share.busy == 1 and share.waiting("a") == 2)
    with pytest.raises(RateLimited) as info:
        await job("a")
    assert info.value.code == "worker_share_exceeded" and info.value.status == 429
    other = asyncio.create_task(job("b"))
    await until(lambda: share.waiting("b") == 1)
    release.set()
    await asyncio.gather(*held, other)
    assert share.busy == 0 and share.waiting("a") == share.waiting("b") == 0


async def test_a_caller_that_leaves_while_waiting_gives_up_its_place() -> None:
    share = FairShare("test", capacity=1)
    release = asyncio.Event()

    async def job(owner: str) -> None:
        async with share.turn(owner):
            await release.wait()

    first = asyncio.create_task(job("a"))
    await until(lambda: share.busy == 1)
    leaving = asyncio.create_task(job("b"))
    await until(lambda: share.waiting("b") == 1)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert share.waiting("b") == 0
    release.set()
    await first
    async with asyncio.timeout(5):
        await job("c")  # the turn came back
    assert share.busy == 0


class OneWorker:
    """Stands in for the speech workers: one at a time, first come first served, each upload
    held until the test lets it go (its bytes name it)."""

    def __init__(self) -> None:
        self._worker = asyncio.Semaphore(1)
        self.started: list[str] = []
        self.queued = 0
        self.release: dict[str, asyncio.Event] = {}

    async def prepare(self, data: bytes, limits: AudioLimits, vad: VadConfig) -> PreparedAudio:
        name = data[-8:].decode().strip()
        self.release.setdefault(name, asyncio.Event())
        self.queued += 1
        async with self._worker:
            self.queued -= 1
            self.started.append(name)
            await self.release[name].wait()
        return PreparedAudio(16_000, ())

    async def transcribe_segments(self, segments: Any, **kwargs: Any) -> list[str]:
        return []

    async def aclose(self) -> None:
        pass


def named_wav(name: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.zeros(1600, np.float32), 16_000, format="WAV", subtype="PCM_16")
    return buf.getvalue() + name.ljust(8).encode()  # after the data chunk: not audio


async def _keys(client: Any) -> tuple[str, str]:
    master = {"Authorization": f"Bearer {MASTER}"}
    team = await (await client.post("/admin/teams", json={"name": "t"}, headers=master)).json()
    keys = []
    for _ in range(2):
        resp = await client.post("/admin/keys", json={"team": team["id"]}, headers=master)
        assert resp.status == 201, await resp.text()
        keys.append((await resp.json())["key"])
    return keys[0], keys[1]


async def test_one_key_s_backlog_of_transcriptions_does_not_hold_up_another_key(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    config = one_alias(upstream)
    config["multimodal"] = {"asr": {"workers": 1, "max_waiting_per_key": 2}}
    client = await gateway(config)
    key_a, key_b = await _keys(client)
    runtime = client.server.app[GATEWAY].core.ports.require(MULTIMODAL)
    worker = OneWorker()
    runtime.transcriber.backend = runtime.transcriber.preparer = worker

    def transcribe(key: str, name: str) -> Awaitable[Any]:
        async def post() -> tuple[int, Any]:
            form = aiohttp.FormData()
            form.add_field("model", "whisper-1")
            form.add_field("file", named_wav(name), filename=f"{name}.wav")
            headers = {"Authorization": f"Bearer {key}"}
            resp = await client.post("/v1/audio/transcriptions", data=form, headers=headers)
            return resp.status, await resp.json()

        return asyncio.create_task(post())

    def arrived() -> int:  # uploads at the worker or waiting for a turn
        share = getattr(runtime.transcriber, "share", None)
        return len(worker.release) + (share.queued if share is not None else 0)

    a = []
    for n in (1, 2, 3):
        a.append(transcribe(key_a, f"a{n}"))
        await until(lambda n=n: worker.started == ["a1"] and arrived() == n)  # type: ignore[misc]
    async with asyncio.timeout(10):
        status, body = await transcribe(key_a, "a4")
    assert status == 429 and body["error"]["code"] == "worker_share_exceeded", body
    b = transcribe(key_b, "b1")
    await until(lambda: arrived() == 4)
    for name in ("a1", "a2"):
        await until(lambda name=name: worker.started[-1:] == [name])  # type: ignore[misc]
        worker.release[name].set()
    await until(lambda: len(worker.started) == 3)
    assert worker.started == ["a1", "a2", "b1"]  # not behind the rest of a's backlog
    worker.release["b1"].set()
    assert (await b)[0] == 200
    await until(lambda: "a3" in worker.release and worker.started[-1:] == ["a3"])
    worker.release["a3"].set()
    assert [(await t)[0] for t in a] == [200, 200, 200]


async def test_speech_for_each_request_waits_for_its_key_s_turn(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream))
    runtime = client.server.app[GATEWAY].core.ports.require(MULTIMODAL)
    spoken: list[str] = []

    class Voice:
        async def synthesize(
            self, text: str, *, voice: str = "alloy", speed: float = 1.0
        ) -> SynthesizedAudio:
            assert runtime.speech_share.busy == 1  # inside a turn
            spoken.append(text)
            return SynthesizedAudio(b"\x00\x00" * 240, 24_000)

        async def aclose(self) -> None:
            pass

    runtime._synthesizer = Voice()
    body = {"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"}
    resp = await client.post(
        "/v1/audio/speech", json=body, headers={"Authorization": f"Bearer {MASTER}"}
    )
    assert resp.status == 200 and len(await resp.read()) == 480
    assert spoken == ["Hello there."] and runtime.speech_share.busy == 0
