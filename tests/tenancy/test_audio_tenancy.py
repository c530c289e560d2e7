"""The audio routes pass the tenancy stage like chat: allowed models, limits, spend and audit."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import soundfile as sf
from sqlalchemy import select

from fleetgate.tenancy.tables import request_audit, spend
from tests.multimodal.audio.conftest import SENTENCES, speak_to_wav
from tests.tenancy.support import Gateway, running_gateway, wait_for


async def _speech(gw: Gateway, key: str, model: str = "tts-1") -> tuple[int, dict[str, str]]:
    body = {"model": model, "input": "please open the door", "voice": "alloy",
            "response_format": "wav"}  # fmt: skip
    async with gw.session.post(
        gw.url + "/v1/audio/speech", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as resp:
        await resp.read()
        return resp.status, {k.lower(): v for k, v in resp.headers.items()}


async def _transcribe(gw: Gateway, key: str, audio: bytes, **fields: str) -> aiohttp.ClientResponse:
    form = aiohttp.FormData()
    form.add_field("file", audio, filename="a.wav", content_type="audio/wav")
    for name, value in {"model": "whisper-1", **fields}.items():
        form.add_field(name, value)
    resp = await gw.session.post(
        gw.url + "/v1/audio/transcriptions", data=form, headers={"Authorization": f"Bearer {key}"}
    )
    await resp.read()
    return resp


async def _spend_rows(gw: Gateway, key_id: str, expected: int) -> list[Any]:
    """The key's spend rows once ``expected`` of them are written."""

    async def rows() -> list[Any]:
        async with gw.tenancy.db.engine.connect() as conn:
            return list((await conn.execute(select(spend).where(spend.c.key_id == key_id))).all())

    async def written() -> bool:
        return len(await rows()) == expected

    await wait_for(written, timeout=10)
    return await rows()


async def test_speech_counts_against_the_key_limits_and_is_billed_and_audited(
    upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(upstream, tmp_path, None) as gw:
        _, key_id, key = await gw.team_and_key("voice", rpm=2, aliases=["tiny", "tts-1"])
        first, headers = await _speech(gw, key)
        assert first == 200
        assert headers["x-ratelimit-remaining-requests"] == "1"
        assert headers["x-request-id"]
        assert (await _speech(gw, key))[0] == 200
        refused, headers = await _speech(gw, key)
        assert refused == 429 and "retry-after" in headers
        # the audio requests and the chat route share the key's RPM
        status, _, body = await gw.chat(key)
        assert status == 429, body

        rows = await _spend_rows(gw, key_id, 2)
        await gw.tenancy.writer.flush()  # the refusals' audit rows may come a flush later
        async with gw.tenancy.db.engine.connect() as conn:
            audit = (
                await conn.execute(
                    select(request_audit.c.alias, request_audit.c.decision).where(
                        request_audit.c.key_id == key_id
                    )
                )
            ).all()
        assert {(r.alias, r.deployment, r.status) for r in rows} == {("tts-1", "tts:espeak", 200)}
        assert all(r.input_tokens > 0 and r.cost_nusd == 0 for r in rows)
        assert sorted(audit) == sorted(
            [("tts-1", "allowed"), ("tts-1", "allowed"), ("tts-1", "refused_requests"),
             ("tiny", "refused_requests")]
        )  # fmt: skip


async def test_a_key_without_the_audio_model_is_refused(upstream: str, tmp_path: Path) -> None:
    async with running_gateway(upstream, tmp_path, None) as gw:
        _, _, key = await gw.team_and_key("text-only", aliases=["tiny"])
        status, _ = await _speech(gw, key)
        assert status == 404
        resp = await _transcribe(gw, key, b"RIFF....")
        assert resp.status == 404
        assert (await resp.json())["error"]["code"] == "model_not_found"


async def test_a_model_name_longer_than_the_store_holds_is_refused_with_a_400(
    upstream: str, tmp_path: Path
) -> None:
    """The audio routes skip the alias table: a 300-character model name reached the spend
    writer, and on PostgreSQL its row blocked every tenant's spend and audit."""
    async with running_gateway(upstream, tmp_path, None) as gw:
        _, _, key = await gw.team_and_key("long")
        assert (await _speech(gw, key, model="m" * 300))[0] == 400
        resp = await _transcribe(gw, key, b"RIFF....", model="w" * 300)
        assert resp.status == 400
        assert (await resp.json())["error"]["param"] == "model"
        assert (await _speech(gw, key, model="m" * 200))[0] == 200


@pytest.fixture(scope="module")
def wav() -> bytes:
    return speak_to_wav(SENTENCES[:1], 0.3)


async def test_a_transcription_is_billed_with_its_transcript_tokens(
    upstream: str, tmp_path: Path, wav: bytes
) -> None:
    async with running_gateway(upstream, tmp_path, None) as gw:
        _, key_id, key = await gw.team_and_key("ears", rpm=10)
        resp = await _transcribe(gw, key, wav, response_format="text")
        assert resp.status == 200, await resp.text()
        assert resp.headers["x-ratelimit-remaining-requests"] == "9"
        assert (await resp.text()).strip()
        (row,) = await _spend_rows(gw, key_id, 1)
        assert (row.alias, row.deployment) == ("whisper-1", "asr:pocketsphinx")
        assert row.output_tokens > 0


async def test_audio_is_billed_by_minute_and_by_character(
    upstream: str, tmp_path: Path, wav: bytes
) -> None:
    prices = {"asr": {"price_per_minute_usd": 0.006}, "tts": {"price_per_mchars_usd": 15.0}}
    async with running_gateway(upstream, tmp_path, None, multimodal=prices) as gw:
        _, key_id, key = await gw.team_and_key("priced")
        assert (await _speech(gw, key))[0] == 200
        assert (await _transcribe(gw, key, wav)).status == 200
        rows = {r.deployment: r for r in await _spend_rows(gw, key_id, 2)}
    # "please open the door": 20 characters at $15 per million
    assert rows["tts:espeak"].cost_nusd == 300_000
    info = sf.info(io.BytesIO(wav))
    seconds = info.frames / info.samplerate
    expected = round(Decimal("0.006") * Decimal(repr(seconds)) / 60 * 10**9)
    # the transcript's duration is in whole milliseconds: 1 ms of audio is 100 nano-USD here
    assert abs(rows["asr:pocketsphinx"].cost_nusd - expected) <= 100


async def test_a_key_over_its_rpm_is_refused_before_its_upload_is_read(
    upstream: str, tmp_path: Path, wav: bytes
) -> None:
    # The file is over the size limit: reading it first would answer 413, not 429.
    async with running_gateway(
        upstream, tmp_path, None, multimodal={"asr": {"max_bytes": 4096}}
    ) as gw:
        _, _, key = await gw.team_and_key("ears", rpm=1)
        assert (await _speech(gw, key))[0] == 200
        form = aiohttp.FormData()
        form.add_field("model", "whisper-1")
        form.add_field("file", wav, filename="a.wav", content_type="audio/wav")
        async with gw.session.post(
            gw.url + "/v1/audio/transcriptions",
            data=form,
            headers={"Authorization": f"Bearer {key}"},
        ) as resp:
            assert resp.status == 429, await resp.text()
            assert "retry-after" in {k.lower() for k in resp.headers}
