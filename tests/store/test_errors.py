"""A database that is away answers 503 ``store_unavailable`` on every route that needs it, and
the gateway keeps serving what does not (`fleetgate.store.errors`, the API's error middleware)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from aiohttp import FormData
from sqlalchemy.exc import DBAPIError

from fleetgate.store.errors import is_unreachable
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream
from tests.tenancy.support import PG_ADMIN_DSN, pg_database


class _DriverError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


def _wrapped(sqlstate: str) -> DBAPIError:
    """A driver error as SQLAlchemy raises it (``DBAPIError``, the driver's in ``orig``)."""
    return DBAPIError("SELECT 1", None, _DriverError(sqlstate))


@pytest.mark.parametrize("sqlstate", ["55000", "57P01", "57P03", "08006", "08001", "53300"])
def test_a_database_refusing_or_dropping_connections_is_unreachable(sqlstate: str) -> None:
    assert is_unreachable(_wrapped(sqlstate))
    assert is_unreachable(_DriverError(sqlstate))  # asyncpg's own, unwrapped
    try:
        raise RuntimeError("the store failed") from _wrapped(sqlstate)
    except RuntimeError as exc:
        assert is_unreachable(exc)  # a cause that is unreachable counts


@pytest.mark.parametrize("sqlstate", ["22021", "23505", "22001", "42P01"])
def test_a_database_refusing_data_is_not_unreachable(sqlstate: str) -> None:
    assert not is_unreachable(_wrapped(sqlstate))


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as up:
        yield up


@pytest.fixture
async def throwaway_pg() -> AsyncIterator[str]:
    async with pg_database() as url:
        try:
            yield url
        finally:
            await _allow_connections(url, True)


async def _allow_connections(url: str, allow: bool) -> None:
    """``ALTER DATABASE ... ALLOW_CONNECTIONS``; refusing also ends the open connections (a
    reconnect then gets SQLSTATE 55000, "database is not currently accepting connections")."""
    name = url.rsplit("/", 1)[1]
    conn = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allow).lower()}')
        if not allow:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
            )
    finally:
        await conn.close()


CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
BATCH_LINE = (
    b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": '
    b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}}\n'
)


@pytest.mark.postgres
async def test_a_database_refusing_connections_is_503_on_admin_and_file_routes(
    gateway: GatewayFactory, fake: FakeUpstream, throwaway_pg: str
) -> None:
    client = await gateway(one_alias(fake), database_url=throwaway_pg)
    resp = await client.post("/admin/teams", json={"name": "t"}, headers=AUTH)
    team = (await resp.json())["id"]
    resp = await client.post("/admin/keys", json={"team": team}, headers=AUTH)
    user = {"Authorization": f"Bearer {(await resp.json())['key']}"}
    form = FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", BATCH_LINE, filename="in.jsonl")
    resp = await client.post("/v1/files", data=form, headers=user)
    assert resp.status == 200, await resp.text()
    file_id = (await resp.json())["id"]

    await _allow_connections(throwaway_pg, False)
    needs_store: list[tuple[str, str, dict[str, str], Any]] = [
        ("GET", "/admin/teams", AUTH, None),
        ("POST", "/admin/teams", AUTH, {"name": "u"}),
        ("GET", f"/admin/teams/{team}", AUTH, None),
        ("GET", "/admin/keys", AUTH, None),
        ("GET", "/admin/spend", AUTH, None),
        ("GET", "/admin/audit", AUTH, None),
        ("GET", "/v1/files", user, None),
        ("GET", f"/v1/files/{file_id}", user, None),
        ("GET", f"/v1/files/{file_id}/content", user, None),
        ("DELETE", f"/v1/files/{file_id}", user, None),
        ("GET", "/v1/batches", user, None),
        ("POST", "/v1/batches", user, {"input_file_id": file_id, "completion_window": "24h",
                                       "endpoint": "/v1/chat/completions"}),
    ]  # fmt: skip
    for method, path, headers, body in needs_store:
        resp = await client.request(method, path, json=body, headers=headers)
        error = (await resp.json())["error"]
        assert (resp.status, error["code"]) == (503, "store_unavailable"), (method, path, error)
        assert error["type"] == "service_unavailable"
        assert "asyncpg" not in error["message"]  # the cause stays in the log

    # what does not need the store goes on: the key cache authenticates, the upstream answers
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=user)
    assert resp.status == 200, await resp.text()
    assert (await client.get("/health/live")).status == 200

    await _allow_connections(throwaway_pg, True)
    resp = await client.get("/admin/teams", headers=AUTH)
    assert resp.status == 200, await resp.text()
