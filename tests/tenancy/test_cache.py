"""Keys live in memory: zero database queries per request, revocation seen everywhere < 1 s."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from tests.tenancy.support import REDIS_URL, running_gateway

TIMER_QUERIES = ("SELECT fg_shared_versions.kind", "SELECT fg_batches.id \nFROM fg_batches")


async def test_no_database_query_on_the_request_path(
    db_url: str, upstream: str, tmp_path: Path, redis_prefix: str
) -> None:
    # Redis carries limits and change notices, so only the shared-state poller reads the store;
    # the batch writer is slowed down so that any statement seen comes from the requests.
    async with running_gateway(
        upstream, tmp_path, db_url, REDIS_URL, redis_prefix=redis_prefix, spend_flush_interval_s=60
    ) as gw:
        _, _, key = await gw.team_and_key("quiet", rpm=1000, tpm=1_000_000,
                                          team_fields={"max_budget_usd": 5.0})  # fmt: skip
        assert (await gw.chat(key))[0] == 200  # caches warm
        # The key's creation is announced on Redis and reloads the cache in the background
        # (within a second): let that settle so only the request path is measured.
        await asyncio.sleep(1.5)
        queries: list[str] = []

        def count(*args: Any) -> None:
            statement = str(args[2])
            # the shared-state poller's version query and the batch worker's look for batches
            # to take run on timers, not per request
            if not statement.startswith(TIMER_QUERIES):
                queries.append(statement)

        engine = gw.tenancy.db.engine.sync_engine
        event.listen(engine, "before_cursor_execute", count)
        try:
            for _ in range(20):
                status, headers, _ = await gw.chat(key)
                assert status == 200 and headers["x-ratelimit-limit-requests"] == "1000"
        finally:
            event.remove(engine, "before_cursor_execute", count)
        assert queries == []
        await gw.tenancy.writer.flush()  # the records still arrive, in one batch, off the path
        _, report = await gw.admin("GET", "/admin/spend?group_by=key")
        assert report["data"][0]["requests"] == 21


@pytest.mark.parametrize("feed", ["redis", "poll"])
async def test_revoked_key_is_refused_on_every_replica_within_a_second(
    feed: str, db_url: str, upstream: str, tmp_path: Path, redis_prefix: str
) -> None:
    redis = REDIS_URL if feed == "redis" else None
    async with AsyncExitStack() as stack:
        replicas = [
            await stack.enter_async_context(
                running_gateway(
                    upstream, tmp_path / f"r{i}", db_url, redis, redis_prefix=redis_prefix
                )
            )
            for i in range(3)
        ]
        _, key_id, key = await replicas[0].team_and_key("revocable")
        await asyncio.sleep(1.0)
        for r in replicas:
            assert (await r.chat(key))[0] == 200
        status, _ = await replicas[1].admin("DELETE", f"/admin/keys/{key_id}")
        assert status == 200
        revoked_at = time.monotonic()
        pending = set(range(3))
        while pending and time.monotonic() - revoked_at < 1.0:
            for i in list(pending):
                if (await replicas[i].chat(key))[0] == 401:
                    pending.discard(i)
            await asyncio.sleep(0.02)
        assert not pending, f"replicas {pending} still accept the revoked key after 1 s"
