"""The gateway starts without its database: ready says what is missing, the admin API answers
503, and keys load as soon as the database answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tenancy.support import (
    MASTER,
    TcpProxy,
    create_pg_database,
    drop_pg_database,
    running_gateway,
    wait_for,
)

pytestmark = pytest.mark.postgres


async def test_starts_during_a_database_outage_and_loads_keys_when_it_returns(
    upstream: str, tmp_path: Path
) -> None:
    url = await create_pg_database()
    proxy = TcpProxy(5432)
    await proxy.start()
    via_proxy = url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    try:
        async with running_gateway(upstream, tmp_path / "a", via_proxy) as gw:
            _, _, key = await gw.team_and_key("a")
            assert (await gw.chat(key))[0] == 200
        await proxy.cut()
        async with running_gateway(upstream, tmp_path / "b", via_proxy) as gw:
            async with gw.session.get(gw.url + "/health/ready") as resp:
                assert resp.status == 503
                assert (await resp.json())["missing"] == ["tenancy: database", "canary: database"]
            status, body = await gw.admin("GET", "/admin/teams")
            assert status == 503 and body["error"]["code"] == "store_unavailable"
            assert (await gw.chat(key))[0] == 401  # keys not loaded yet
            assert (await gw.chat(MASTER))[0] == 200  # the master key needs no database
            await proxy.restore()

            async def ready() -> bool:
                async with gw.session.get(gw.url + "/health/ready") as resp:
                    return resp.status == 200

            await wait_for(ready, timeout=15)
            assert (await gw.chat(key))[0] == 200
            assert (await gw.admin("GET", "/admin/teams"))[0] == 200
    finally:
        await proxy.close()
        await drop_pg_database(url)


async def test_admin_api_is_503_while_the_database_is_down(upstream: str, tmp_path: Path) -> None:
    url = await create_pg_database()
    proxy = TcpProxy(5432)
    await proxy.start()
    via_proxy = url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    try:
        async with running_gateway(upstream, tmp_path, via_proxy) as gw:
            _, _, key = await gw.team_and_key("a")
            await proxy.cut()
            for path in ("/admin/teams", "/admin/keys", "/admin/spend", "/admin/audit"):
                status, body = await gw.admin("GET", path)
                assert status == 503, (path, body)
            assert (await gw.chat(key))[0] == 200  # keys are in memory: requests still served
            await proxy.restore()
    finally:
        await proxy.close()
        await drop_pg_database(url)
