"""`BatchStore`: files, batches, their leases and their per-line results in the database.

File bytes live in ``fg_files`` with their metadata rather than in the data directory: every
replica behind a load balancer (each with its own data directory) reads the same input file,
and a replica that takes over a batch after another died finds everything it needs in the one
place that is already shared and backed up. Files are bounded by ``batches.max_file_bytes``.

Every read and change is scoped to an owner (the key's team, or the key without a team): a
file or batch of another owner is "not found" (404), never "forbidden".

A line counts as done once its row is in ``fg_batch_results`` (unique per ``(batch, line)``
and per ``(batch, custom_id)``); writing it is idempotent, so a line replayed after a crash
is recorded once. Counts are read from those rows, so they cannot drift from the files.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, or_, select, text, update

from fleetgate.batches.tables import batch_results, batches, files
from fleetgate.errors import Conflict, NotFound, RateLimited
from fleetgate.store.database import Database
from fleetgate.store.rows import now_ms, take_lease
from fleetgate.timespans import DAY_MS

__all__ = ["ACTIVE", "BatchStore", "Counts", "FileMeta"]

ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")  # count toward the limit


@dataclass(frozen=True, slots=True)
class FileMeta:
    id: str
    owner: str
    purpose: str
    filename: str
    bytes: int
    created_ms: int

    def to_wire(self) -> dict[str, Any]:
        """OpenAI's file object."""
        return {
            "id": self.id, "object": "file", "bytes": self.bytes,
            "created_at": self.created_ms // 1000, "filename": self.filename,
            "purpose": self.purpose, "status": "processed", "status_details": None,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Counts:
    completed: int
    failed: int


_FILE_META = (files.c.id, files.c.owner, files.c.purpose, files.c.filename, files.c.bytes,
              files.c.created_ms)  # fmt: skip


class BatchStore:
    def __init__(self, db: Database, clock: Callable[[], int] = now_ms) -> None:
        self.db = db
        self.clock = clock
        # The per-team limit's count and insert are one step per team: on PostgreSQL a
        # transaction-scoped advisory lock (every replica), on SQLite (one process owns the
        # file) this lock.
        self._creating = asyncio.Lock()

    # ------------------------------------------------------------------ files

    async def add_file(self, owner: str, purpose: str, filename: str, content: bytes) -> FileMeta:
        meta = FileMeta(f"file-{os.urandom(12).hex()}", owner, purpose, filename[:255],
                        len(content), self.clock())  # fmt: skip
        async with self.db.engine.begin() as conn:
            await conn.execute(
                insert(files).values(
                    id=meta.id, owner=owner, purpose=purpose, filename=meta.filename,
                    bytes=meta.bytes, content=content, created_ms=meta.created_ms,
                )
            )  # fmt: skip
        return meta

    async def file(self, file_id: str, owner: str) -> FileMeta:
        async with self.db.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(*_FILE_META).where(files.c.id == file_id, files.c.owner == owner)
                )
            ).first()
        if row is None:
            raise NotFound(f"No such file: '{file_id}'.", param="file_id")
        return FileMeta(*row)

    async def files(self, owner: str, limit: int) -> list[FileMeta]:
        query = (
            select(*_FILE_META)
            .where(files.c.owner == owner)
            .order_by(files.c.created_ms.desc(), files.c.id)
            .limit(limit)
        )
        async with self.db.engine.connect() as conn:
            return [FileMeta(*row) for row in await conn.execute(query)]

    async def content(self, file_id: str, owner: str) -> bytes:
        async with self.db.engine.connect() as conn:
            value = await conn.scalar(
                select(files.c.content).where(files.c.id == file_id, files.c.owner == owner)
            )
        if value is None:
            raise NotFound(f"No such file: '{file_id}'.", param="file_id")
        return bytes(value)

    async def delete_file(self, file_id: str, owner: str) -> None:
        async with self.db.engine.begin() as conn:
            gone = await conn.execute(
                delete(files).where(files.c.id == file_id, files.c.owner == owner)
            )
        if gone.rowcount != 1:
            raise NotFound(f"No such file: '{file_id}'.", param="file_id")

    # ------------------------------------------------------------------ batches

    async def create(
        self,
        *,
        owner: str,
        key_id: str,
        endpoint: str,
        input_file_id: str,
        total: int,
        meta: dict[str, str] | None,
        max_active: int,
        principal: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A new batch, in progress at once (its file was read when it was created); 429 when
        ``owner`` already has ``max_active`` batches that have not ended. ``principal``: what
        its creator was allowed (`fleetgate.batches.grant.Grant.to_json`)."""
        now = self.clock()
        batch_id = f"batch_{os.urandom(12).hex()}"
        row = {
            "id": batch_id, "owner": owner, "key_id": key_id,
            "endpoint": endpoint, "input_file_id": input_file_id, "completion_window": "24h",
            "status": "in_progress", "total": total, "meta": meta, "created_ms": now,
            "in_progress_ms": now, "expires_ms": now + DAY_MS, "lease_until_ms": 0,
            "principal": principal,
        }  # fmt: skip
        async with self._creating, self.db.engine.begin() as conn:
            if self.db.dialect == "postgresql":  # held until the commit: one team at a time
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(hashtext('fg_batches'), hashtext(:owner))"),
                    {"owner": owner},
                )
            active = await conn.scalar(
                select(func.count())
                .select_from(batches)
                .where(batches.c.owner == owner, batches.c.status.in_(ACTIVE))
            )
            if int(active or 0) >= max_active:
                raise RateLimited(
                    f"This team has {active} batches in progress; at most {max_active} may "
                    "run at once.",
                    code="too_many_batches",
                    retry_after=60.0,
                )
            await conn.execute(insert(batches).values(**row))
        return await self.batch(batch_id, owner)

    async def batch(self, batch_id: str, owner: str | None) -> dict[str, Any]:
        """The batch's row (``owner`` None: any owner, for the replica driving it)."""
        query = select(batches).where(batches.c.id == batch_id)
        if owner is not None:
            query = query.where(batches.c.owner == owner)
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        if row is None:
            raise NotFound(f"No such batch: '{batch_id}'.", param="batch_id")
        return dict(row)

    async def batches(self, owner: str, after: str | None, limit: int) -> list[dict[str, Any]]:
        """Newest first; ``after``: the id of the last batch of the previous page."""
        query = select(batches).where(batches.c.owner == owner)
        if after is not None:
            last = await self.batch(after, owner)
            query = query.where(
                or_(
                    batches.c.created_ms < last["created_ms"],
                    (batches.c.created_ms == last["created_ms"]) & (batches.c.id > after),
                )
            )
        query = query.order_by(batches.c.created_ms.desc(), batches.c.id).limit(limit)
        async with self.db.engine.connect() as conn:
            return [dict(row) for row in (await conn.execute(query)).mappings()]

    async def counts(self, batch_id: str) -> Counts:
        query = (
            select(batch_results.c.ok, func.count())
            .where(batch_results.c.batch_id == batch_id)
            .group_by(batch_results.c.ok)
        )
        async with self.db.engine.connect() as conn:
            by_ok = {bool(ok): int(n) for ok, n in await conn.execute(query)}
        return Counts(by_ok.get(True, 0), by_ok.get(False, 0))

    async def cancel(self, batch_id: str, owner: str) -> None:
        """Mark the batch ``cancelling``; its driver stops and finalizes it as ``cancelled``."""
        async with self.db.engine.begin() as conn:
            moved = await conn.execute(
                update(batches)
                .where(batches.c.id == batch_id, batches.c.owner == owner)
                .where(batches.c.status.in_(("validating", "in_progress")))
                .values(status="cancelling", cancelling_ms=self.clock())
            )
        if moved.rowcount != 1:
            row = await self.batch(batch_id, owner)  # 404 for another owner's
            if row["status"] != "cancelling":
                raise Conflict(f"Cannot cancel a batch with status '{row['status']}'.")

    # ------------------------------------------------------------------ driving

    async def runnable(self) -> list[str]:
        """Batches that need a driver and whose lease is free (or expired)."""
        now = self.clock()
        query = (
            select(batches.c.id)
            .where(batches.c.status.in_(("in_progress", "cancelling")))
            .where(batches.c.lease_until_ms < now)
            .order_by(batches.c.created_ms)
        )
        async with self.db.engine.connect() as conn:
            return [row[0] for row in await conn.execute(query)]

    async def lease(self, batch_id: str, owner: str, lease_s: float) -> bool:
        """Take or renew the lease of driving the batch; True when held."""
        now = self.clock()
        which = (batches.c.id == batch_id, batches.c.status.in_(("in_progress", "cancelling")))
        async with self.db.engine.begin() as conn:
            held = await conn.execute(
                take_lease(batches, owner, now, lease_s, *which, owner_column="lease_owner")
            )
        return held.rowcount == 1

    async def release(self, batch_id: str, owner: str) -> None:
        """Give the lease up (a replica stopping): another replica may take it at once."""
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(batches)
                .where(batches.c.id == batch_id, batches.c.lease_owner == owner)
                .values(lease_until_ms=0)
            )

    async def note_attempts(self, batch_id: str, owner: str, attempts: dict[int, int]) -> None:
        """How often each line not yet recorded was sent (written before a send, while
        ``owner`` holds the lease): the next driver knows which lines its predecessors sent
        without ever recording them."""
        value = {str(line): n for line, n in attempts.items()}
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(batches)
                .where(batches.c.id == batch_id, batches.c.lease_owner == owner)
                .values(line_attempts=value)
            )

    async def done_lines(self, batch_id: str) -> set[int]:
        query = select(batch_results.c.line).where(batch_results.c.batch_id == batch_id)
        async with self.db.engine.connect() as conn:
            return {int(row[0]) for row in await conn.execute(query)}

    async def record(
        self, batch_id: str, line: int, custom_id: str | None, ok: bool, record: str
    ) -> bool:
        """The line's result (idempotent: False when it was already recorded)."""
        row = {"batch_id": batch_id, "line": line, "custom_id": custom_id, "ok": ok,
               "record": record, "created_ms": self.clock()}  # fmt: skip
        return await self.db.insert_ignore(batch_results, [row]) == 1

    async def finish(
        self,
        batch_id: str,
        owner: str,
        status: str,
        extra: list[str],
        errors: list[dict[str, Any]] | None = None,
    ) -> bool:
        """Write the output and error files from the results (plus ``extra`` error lines, for
        lines that never ran) and end the batch as ``status`` (with batch-level ``errors``,
        OpenAI's ``errors.data``), only while ``owner`` holds its lease; False when it no
        longer does."""
        now = self.clock()
        query = (
            select(batch_results.c.ok, batch_results.c.record)
            .where(batch_results.c.batch_id == batch_id)
            .order_by(batch_results.c.line)
        )
        async with self.db.engine.begin() as conn:
            held = await conn.execute(
                update(batches)
                .where(batches.c.id == batch_id, batches.c.lease_owner == owner)
                .where(batches.c.status.in_(("in_progress", "cancelling")))
                .values(status="finalizing", finalizing_ms=now)
            )
            if held.rowcount != 1:
                return False
            out: list[str] = []
            err: list[str] = []
            for ok, record in await conn.execute(query):
                (out if ok else err).append(record)
            err.extend(extra)
            owner_of = await conn.scalar(select(batches.c.owner).where(batches.c.id == batch_id))
            ids: dict[str, str | None] = {"output_file_id": None, "error_file_id": None}
            for column, lines in (("output_file_id", out), ("error_file_id", err)):
                if not lines:
                    continue
                data = ("\n".join(lines) + "\n").encode()
                file_id = f"file-{os.urandom(12).hex()}"
                name = f"{batch_id}_{'output' if column == 'output_file_id' else 'error'}.jsonl"
                await conn.execute(
                    insert(files).values(
                        id=file_id, owner=owner_of, purpose="batch_output", filename=name,
                        bytes=len(data), content=data, created_ms=now,
                    )
                )  # fmt: skip
                ids[column] = file_id
            await conn.execute(
                update(batches)
                .where(batches.c.id == batch_id)
                .values(status=status, lease_owner=None, lease_until_ms=0,
                        line_attempts=None, **{f"{status}_ms": now}, **ids,
                        **({"errors": {"object": "list", "data": errors}} if errors else {}))
            )  # fmt: skip
        return True
