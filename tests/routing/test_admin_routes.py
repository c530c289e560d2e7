"""The routing admin API refuses query values it cannot use (400, never 500)."""

from __future__ import annotations

import pytest

from tests.conftest import AUTH, GatewayFactory
from tests.fakes import FakeUpstream


@pytest.mark.parametrize("query", ["limit=nan", "limit=-inf", "limit=1e400", "since=nan",
                                   "since=inf", "limit=x"])  # fmt: skip
async def test_decisions_with_a_non_finite_number_is_400(
    gateway: GatewayFactory, upstream: FakeUpstream, query: str
) -> None:
    # int(float("nan")) and int(float("-inf")) raised inside the handler: 500.
    client = await gateway({"models": [{"alias": "chat", "strategy": "kv-aware", "deployments": [
        {"model": "m", "api_base": upstream.url}]}]})  # fmt: skip
    resp = await client.get(f"/admin/routing/decisions?{query}", headers=AUTH)
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"]["param"] == query.split("=")[0]
