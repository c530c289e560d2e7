"""The Files and Batch APIs driven by the official openai SDK against an in-process gateway."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import openai
import pytest
from sqlalchemy import func, select

from fleetgate.api.state import GATEWAY
from fleetgate.batches.tables import batch_results
from fleetgate.scheduling.ports import SCHEDULER
from fleetgate.tenancy.tables import spend
from tests.batches.support import chat_line, config, finished, jsonl, records, running_gateway


async def test_a_fifty_line_batch_completes_with_every_line_once(
    upstream: str, tmp_path: Path
) -> None:
    # tick_s 60: the batch starts because creating it nudges this replica's worker
    async with running_gateway(config(upstream, batches={"tick_s": 60}), tmp_path) as gw:
        client = gw.client(await gw.team_key("a"))
        data = jsonl([chat_line(f"req-{i}", text=f"question {i}") for i in range(50)])
        upload = await client.files.create(file=("in.jsonl", data), purpose="batch")
        assert upload.bytes == len(data) and upload.purpose == "batch"
        assert (await client.files.content(upload.id)).content == data
        batch = await client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h",
            metadata={"job": "nightly"},
        )  # fmt: skip
        assert batch.request_counts is not None and batch.request_counts.total == 50
        done = await finished(client, batch.id)
        assert done.status == "completed", done  # type: ignore[attr-defined]
        assert done.request_counts.completed == 50 and done.request_counts.failed == 0  # type: ignore[attr-defined]
        assert done.error_file_id is None and done.metadata == {"job": "nightly"}  # type: ignore[attr-defined]
        out = records((await client.files.content(done.output_file_id)).content)  # type: ignore[attr-defined]
        assert sorted(r["custom_id"] for r in out) == sorted(f"req-{i}" for i in range(50))
        for r in out:
            assert r["error"] is None and r["id"].startswith("batch_req_")
            assert r["response"]["status_code"] == 200
            assert r["response"]["request_id"].startswith(batch.id)
            assert r["response"]["body"]["choices"][0]["message"]["content"]
        listed = await client.batches.list(limit=10)
        assert [b.id for b in listed.data] == [batch.id]
        async with gw.db.engine.connect() as conn:
            rows = await conn.scalar(
                select(func.count()).where(batch_results.c.batch_id == batch.id)
            )
            assert rows == 50
            # every line was billed through the normal request path, under its own request id
            for _ in range(50):
                billed = await conn.scalar(
                    select(func.count()).where(spend.c.request_id.like(f"{batch.id}-%"))
                )
                if billed == 50:
                    break
                await asyncio.sleep(0.1)
            assert billed == 50
            # at the deployment's batch_discount (half of 1 and 2 USD per Mtok: 500 and 1000
            # nano-USD a token)
            rows = await conn.execute(
                select(spend.c.input_tokens, spend.c.output_tokens, spend.c.cost_nusd).where(
                    spend.c.request_id.like(f"{batch.id}-%")
                )
            )
            for tokens_in, tokens_out, cost in rows:
                assert tokens_out > 0 and abs(cost - (tokens_in * 500 + tokens_out * 1000)) <= 1


async def test_bad_lines_go_to_the_error_file(upstream: str, tmp_path: Path) -> None:
    async with running_gateway(config(upstream), tmp_path) as gw:
        client = gw.client(await gw.team_key("a", aliases=["tiny"]))
        good = jsonl([chat_line("ok-1"), chat_line("ok-2")])
        bad = (
            b"{not json\n"
            + jsonl([{"method": "POST", "url": "/v1/chat/completions", "body": {}}])
            + jsonl([{**chat_line("wrong-url"), "url": "/v1/embeddings"}])
            + jsonl([chat_line("not-allowed", alias="hidden")])
            + jsonl([{**chat_line("no-messages"), "body": {"model": "tiny"}}])
        )
        upload = await client.files.create(file=("in.jsonl", good + b"\n" + bad), purpose="batch")
        batch = await client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        done = await finished(client, batch.id)
        assert done.status == "completed"  # type: ignore[attr-defined]
        assert done.request_counts.completed == 2 and done.request_counts.failed == 5  # type: ignore[attr-defined]
        out = records((await client.files.content(done.output_file_id)).content)  # type: ignore[attr-defined]
        assert sorted(r["custom_id"] for r in out) == ["ok-1", "ok-2"]
        errors = records((await client.files.content(done.error_file_id)).content)  # type: ignore[attr-defined]
        by_id = {r["custom_id"]: r for r in errors}
        assert len(errors) == 5
        unreadable = [r for r in errors if r["custom_id"] is None]
        assert len(unreadable) == 2 and all(r["error"]["code"] for r in unreadable)
        assert by_id["wrong-url"]["response"] is None
        assert by_id["not-allowed"]["response"]["status_code"] == 404
        assert by_id["not-allowed"]["error"] is None
        assert by_id["no-messages"]["response"]["status_code"] == 400
        assert by_id["no-messages"]["response"]["body"]["error"]["type"]


async def test_cancel_stops_a_running_batch(slow_upstream: str, tmp_path: Path) -> None:
    cfg = config(slow_upstream, batches={"concurrency": 2})
    async with running_gateway(cfg, tmp_path) as gw:
        client = gw.client(await gw.team_key("a"))
        upload = await client.files.create(
            file=("in.jsonl", jsonl([chat_line(f"c-{i}") for i in range(60)])), purpose="batch"
        )
        batch = await client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        for _ in range(100):
            seen = await client.batches.retrieve(batch.id)
            if seen.request_counts is not None and seen.request_counts.completed >= 2:
                break
            await asyncio.sleep(0.05)
        cancelling = await client.batches.cancel(batch.id)
        assert cancelling.status in ("cancelling", "cancelled")
        done = await finished(client, batch.id)
        assert done.status == "cancelled"  # type: ignore[attr-defined]
        completed = done.request_counts.completed  # type: ignore[attr-defined]
        assert 2 <= completed < 60
        out = records((await client.files.content(done.output_file_id)).content)  # type: ignore[attr-defined]
        assert len(out) == completed == len({r["custom_id"] for r in out})
        with pytest.raises(openai.ConflictError):
            await client.batches.cancel(batch.id)


async def test_another_team_gets_404(upstream: str, tmp_path: Path) -> None:
    async with running_gateway(config(upstream), tmp_path) as gw:
        mine = gw.client(await gw.team_key("a"))
        theirs = gw.client(await gw.team_key("b"))
        upload = await mine.files.create(
            file=("in.jsonl", jsonl([chat_line("x")])), purpose="batch"
        )
        batch = await mine.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        for call in (
            theirs.files.retrieve(upload.id),
            theirs.files.content(upload.id),
            theirs.files.delete(upload.id),
            theirs.batches.retrieve(batch.id),
            theirs.batches.cancel(batch.id),
            theirs.batches.create(
                input_file_id=upload.id, endpoint="/v1/chat/completions",
                completion_window="24h",
            ),
        ):  # fmt: skip
            with pytest.raises(openai.NotFoundError):
                await call
        assert (await theirs.batches.list()).data == []
        assert (await mine.batches.retrieve(batch.id)).id == batch.id
        deleted = await mine.files.delete(upload.id)
        assert deleted.deleted
        with pytest.raises(openai.NotFoundError):
            await mine.files.retrieve(upload.id)


async def test_bad_input_is_a_4xx(upstream: str, tmp_path: Path) -> None:
    cfg = config(upstream, batches={"max_file_bytes": 4096, "max_in_progress_per_team": 1,
                                    "max_lines": 5})  # fmt: skip
    async with running_gateway(cfg, tmp_path) as gw:
        client = gw.client(await gw.team_key("a"))
        with pytest.raises(openai.BadRequestError):
            await client.files.create(
                file=("in.jsonl", jsonl([chat_line("a")])), purpose="fine-tune"
            )
        with pytest.raises(openai.APIStatusError) as too_big:
            await client.files.create(file=("in.jsonl", b"x" * 5000), purpose="batch")
        assert too_big.value.status_code == 413
        with pytest.raises(openai.BadRequestError):
            await client.files.create(file=("in.jsonl", b"\xff\xfe"), purpose="batch")
        with pytest.raises(openai.AuthenticationError):
            await gw.client("sk-nope").files.list()

        async def create(data: bytes, **fields: str) -> object:
            upload = await client.files.create(file=("in.jsonl", data), purpose="batch")
            args = {"input_file_id": upload.id, "endpoint": "/v1/chat/completions",
                    "completion_window": "24h", **fields}  # fmt: skip
            return await client.batches.create(**args)  # type: ignore[arg-type]

        line = jsonl([chat_line("a")])
        with pytest.raises(openai.BadRequestError):
            await create(line, endpoint="/v1/images")
        with pytest.raises(openai.BadRequestError):
            await create(line, completion_window="1h")
        with pytest.raises(openai.BadRequestError):
            await create(jsonl([chat_line("same"), chat_line("same")]))
        with pytest.raises(openai.BadRequestError):
            await create(jsonl([chat_line(f"n{i}") for i in range(6)]))
        with pytest.raises(openai.BadRequestError):
            await create(b"\n\n  \n")
        with pytest.raises(openai.NotFoundError):
            await client.batches.create(
                input_file_id="file-missing", endpoint="/v1/chat/completions",
                completion_window="24h",
            )  # fmt: skip
        first = await create(line)
        with pytest.raises(openai.RateLimitError):
            await create(line)  # one batch in progress at most
        await finished(client, first.id)  # type: ignore[attr-defined]
        await create(line)  # the first one ended: room again
        async with gw.session.post(
            f"{gw.url}/v1/batches", data=b"[]",
            headers={"Authorization": f"Bearer {client.api_key}"},
        ) as resp:  # fmt: skip
            assert resp.status == 400
            assert (await resp.json())["error"]["type"] == "invalid_request_error"


async def test_lines_run_only_on_idle_capacity(upstream: str, tmp_path: Path) -> None:
    async with running_gateway(config(upstream, max_num_seqs=1), tmp_path) as gw:
        scheduler = gw.app[GATEWAY].core.ports.require(SCHEDULER)
        assert scheduler is not None
        pool = scheduler.pool("tiny")
        assert pool is not None
        pool.take("interactive-team")  # an admitted request holds the pool's only slot
        assert not scheduler.idle("tiny")
        client = gw.client(await gw.team_key("a"))
        upload = await client.files.create(
            file=("in.jsonl", jsonl([chat_line(f"i-{i}") for i in range(5)])), purpose="batch"
        )
        batch = await client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        await asyncio.sleep(1.0)
        waiting = await client.batches.retrieve(batch.id)
        assert waiting.status == "in_progress"
        assert waiting.request_counts is not None and waiting.request_counts.completed == 0
        assert pool.queue.size == 0  # the lane waits outside the queue: it never takes a turn
        pool.give_back("interactive-team")
        done = await finished(client, batch.id)
        assert done.request_counts.completed == 5  # type: ignore[attr-defined]


async def test_an_upload_may_send_the_file_before_its_purpose(
    upstream: str, tmp_path: Path
) -> None:
    async with running_gateway(config(upstream), tmp_path) as gw:
        key = await gw.team_key("a")
        form = aiohttp.FormData()
        form.add_field("file", jsonl([chat_line("a")]), filename="curl.jsonl")
        form.add_field("purpose", "batch")  # curl -F file=@x -F purpose=batch sends this order
        headers = {"Authorization": f"Bearer {key}"}
        async with gw.session.post(f"{gw.url}/v1/files", data=form, headers=headers) as resp:
            body = await resp.json()
            assert resp.status == 200, body
        assert body["filename"] == "curl.jsonl" and body["purpose"] == "batch"
        form = aiohttp.FormData()
        form.add_field("file", b"{}\n", filename="x.jsonl")
        async with gw.session.post(f"{gw.url}/v1/files", data=form, headers=headers) as resp:
            assert resp.status == 400  # no purpose at all
            assert (await resp.json())["error"]["param"] == "purpose"
