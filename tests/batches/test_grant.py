"""A JWT's narrowing holds in the batch lane: a line reaches only what the token that created
the batch may reach directly, and the batch stops when the token expires."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.batches.support import Gateway, chat_line, config, records, running_gateway
from tests.batches.test_line_limits import run_batch
from tests.console.idp import LocalIdP, running_idp


@pytest.fixture
async def idp() -> AsyncIterator[LocalIdP]:
    async with running_idp() as provider:
        yield provider


def jwt_config(upstream: str, idp: LocalIdP, **batches: Any) -> dict[str, Any]:
    cfg = config(upstream, batches=batches)
    jwt = {"jwks_url": f"{idp.url}/jwks", "issuer": idp.url, "audience": idp.audience}
    cfg["extensions"] = {"console": {"jwt": jwt}}
    return cfg


async def direct(gw: Gateway, token: str, alias: str) -> tuple[int, Any]:
    body = chat_line("x", alias=alias)["body"]
    async with gw.session.post(
        f"{gw.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {token}"}
    ) as resp:
        return resp.status, await resp.json()


async def test_a_tokens_aliases_narrow_its_batch_lines_as_its_calls(
    upstream: str, tmp_path: Path, idp: LocalIdP
) -> None:
    async with running_gateway(jwt_config(upstream, idp), tmp_path) as gw:
        await gw.team_key("search")
        token = idp.access_token(team="search", sub="svc-batch", aliases=["tiny"])
        assert (await direct(gw, token, "tiny"))[0] == 200
        status, refused = await direct(gw, token, "hidden")
        assert status == 404 and refused["error"]["code"] == "model_not_found"
        client = gw.client(token)
        lines = [chat_line("mine", alias="tiny"), chat_line("secret", alias="hidden")]
        done = await run_batch(client, lines)
        assert done.status == "completed", done
        out = records((await client.files.content(done.output_file_id)).content)
        (error,) = records((await client.files.content(done.error_file_id)).content)
    assert [r["custom_id"] for r in out] == ["mine"]
    assert error["custom_id"] == "secret"
    assert error["response"]["status_code"] == 404
    assert error["response"]["body"]["error"] == refused["error"]  # the direct call's answer


async def test_a_batch_stops_when_the_token_that_made_it_expires(
    slow_upstream: str, tmp_path: Path, idp: LocalIdP
) -> None:
    cfg = jwt_config(slow_upstream, idp, concurrency=1)
    async with running_gateway(cfg, tmp_path) as gw:
        await gw.team_key("search")
        expires = int(time.time()) + 3
        token = idp.sign({"aud": idp.audience, "sub": "svc", "team": "search", "exp": expires})
        client = gw.client(token)
        lines = [chat_line(f"c{i}", text=f"question {i}") for i in range(60)]
        done = await run_batch(client, lines)  # 60 lines of ~0.2 s: past the token's expiry
        assert done.status == "failed", done
        errors = records((await client.files.content(done.error_file_id)).content)
    assert time.time() >= expires
    assert done.errors.data[0].code == "expired_api_key"
    assert 0 < done.request_counts.completed < 60
    assert len(errors) == 60 - done.request_counts.completed
    codes = {(e["error"] or e["response"]["body"]["error"])["code"] for e in errors}
    assert codes == {"expired_api_key"}
