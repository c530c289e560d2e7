"""The safety admin API refuses values no stored row can hold (400, never 500)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream
from tests.safety.gwtools import gateway_config
from tests.tenancy.support import pg_database


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with pg_database() as url:
        yield url


@pytest.mark.postgres
async def test_audit_filtered_by_a_key_id_with_a_nul_is_400(
    gateway: GatewayFactory, upstream: FakeUpstream, pg_url: str
) -> None:
    # PostgreSQL refuses a NUL in a compared string: the listing was a 500.
    safety = {"checks": {"words": {"type": "words"}}, "policies": {"default": {"input": ["words"]}}}
    client = await gateway(gateway_config(upstream.url, safety), database_url=pg_url)
    resp = await client.get("/admin/safety/audit?key_id=key%00", headers=AUTH)
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"]["param"] == "key_id"
    resp = await client.get("/admin/safety/audit?key_id=key_1", headers=AUTH)
    assert resp.status == 200 and (await resp.json())["data"] == []
