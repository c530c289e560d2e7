"""A gateway SIGKILLed mid-batch: a new one on the same database finishes it, every line once.

Real processes: ``fleetgate sim`` (slow decode) and ``fleetgate serve`` on a shared PostgreSQL
database; the official openai SDK drives the Files and Batch APIs.
"""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp
import openai
from sqlalchemy import func, select

from fleetgate.app import MIGRATIONS
from fleetgate.batches.tables import batch_results
from fleetgate.store.database import Database
from tests.batches.support import MASTER, chat_line, config, jsonl, records
from tests.procs import serve_process, sim_process

LINES = 200


async def _team_key(url: str) -> str:
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(f"{url}/admin/teams", json={"name": "night"}) as resp:
            team = await resp.json()
        async with session.post(f"{url}/admin/keys", json={"team": team["id"]}) as resp:
            key = await resp.json()
    return str(key["key"])


def _counts(client: openai.OpenAI, batch_id: str) -> tuple[str, int]:
    batch = client.batches.retrieve(batch_id)
    assert batch.request_counts is not None
    return batch.status, batch.request_counts.completed + batch.request_counts.failed


async def _rows(db_url: str, batch_id: str) -> tuple[int, int, dict[int, int]]:
    db = Database.from_url(db_url, Path("."), migrations=MIGRATIONS)
    try:
        async with db.engine.connect() as conn:
            total = await conn.scalar(
                select(func.count()).where(batch_results.c.batch_id == batch_id)
            )
            distinct = await conn.scalar(
                select(func.count(func.distinct(batch_results.c.custom_id))).where(
                    batch_results.c.batch_id == batch_id
                )
            )
            written = await conn.execute(
                select(batch_results.c.line, batch_results.c.created_ms).where(
                    batch_results.c.batch_id == batch_id
                )
            )
            return int(total or 0), int(distinct or 0), {int(a): int(b) for a, b in written}
    finally:
        await db.aclose()


async def test_a_batch_survives_a_sigkilled_gateway(tmp_path: Path, shared_pg_url: str) -> None:
    env = {"FLEETGATE_DATABASE_URL": shared_pg_url}
    with sim_process("--decode-ms-per-step", "15", "--output-len", "8") as sim:
        cfg = config(sim.removesuffix("/v1"), batches={"lease_s": 2.0, "concurrency": 4})
        with serve_process(cfg, tmp_path, master_key=MASTER, env=env) as (url, proc):
            key = await _team_key(url)
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=2)
            data = jsonl([chat_line(f"line-{i}", text=f"item {i}") for i in range(LINES)])
            upload = client.files.create(file=("in.jsonl", data), purpose="batch")
            batch = client.batches.create(
                input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            deadline = time.monotonic() + 30
            while _counts(client, batch.id)[1] < 40 and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.kill()  # SIGKILL: no shutdown, no lease given up
            proc.wait()
            client.close()
        before, _, first_rows = await _rows(shared_pg_url, batch.id)
        assert 40 <= before < LINES, before

        with serve_process(cfg, tmp_path, master_key=MASTER, env=env) as (url, _):
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=2)
            deadline = time.monotonic() + 60
            status, seen = _counts(client, batch.id)
            while status != "completed" and time.monotonic() < deadline:
                time.sleep(0.1)
                status, seen = _counts(client, batch.id)
            assert status == "completed", (status, seen)
            done = client.batches.retrieve(batch.id)
            assert done.request_counts is not None
            assert done.request_counts.completed == LINES and done.error_file_id is None
            assert done.output_file_id is not None
            out = records(client.files.content(done.output_file_id).content)
            client.close()
        ids = [r["custom_id"] for r in out]
        assert len(ids) == LINES and set(ids) == {f"line-{i}" for i in range(LINES)}
        assert all(r["response"]["status_code"] == 200 for r in out)
        total, distinct, rows = await _rows(shared_pg_url, batch.id)
        assert total == distinct == LINES
        # the lines done before the kill were not sent again: their rows are the first ones
        assert all(rows[line] == created for line, created in first_rows.items())
