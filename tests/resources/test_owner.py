"""`Resources`: one owner, closed once, every part closed even when one fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.app import MIGRATIONS
from fleetgate.resources import Databases, OutboundHttp, RedisConnections, Resources


async def test_aclose_closes_every_part(tmp_path: Path) -> None:
    resources = Resources(migrations=MIGRATIONS)
    session = resources.http.session()
    db = resources.databases.get(None, tmp_path)
    await resources.databases.migrate(db)
    lean = resources.redis.commands("redis://127.0.0.1:6379/0")
    resources.redis.client("redis://127.0.0.1:6379/0")
    await resources.aclose()
    assert session.closed
    assert resources.databases.urls() == [] and resources.redis.urls() == []
    assert lean._conn is None
    await resources.aclose()  # idempotent


async def test_one_failing_part_does_not_keep_the_others_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class BrokenRedis(RedisConnections):
        async def aclose(self) -> None:
            raise RuntimeError("boom")

    http, dbs = OutboundHttp(), Databases(MIGRATIONS)
    resources = Resources(redis=BrokenRedis(), databases=dbs, http=http)
    session = http.session()
    dbs.get(None, tmp_path)
    await resources.aclose()
    assert session.closed and dbs.urls() == []
    assert "closing the shared redis failed" in caplog.text


def test_parts_can_be_handed_in() -> None:
    http = OutboundHttp()
    assert Resources(http=http, migrations=MIGRATIONS).http is http
