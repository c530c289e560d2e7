"""Where audit verdicts go: the store (through the batched record writer) or a JSONL file.

``StoreAuditLog`` hands each :class:`~fleetgate.safety.audit.AuditRecord` to a writer with
``submit(kind, row)`` (the tenancy ``RecordWriter``: spooled at once, written in batches, so a
verdict is never lost and never blocks) as kind ``"safety"`` into ``fg_safety_audit``.
``JsonlAuditLog`` appends one JSON line per record, for gateways without a store (tenancy off).
Both answer :meth:`recent` for the admin API::

    log = StoreAuditLog(tenancy.writer, tenancy.db)
    audit = AuditQueue([], sink=log.write, ...)
    rows = await log.recent(limit=50, flagged=True)
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import select

from fleetgate.safety.audit import AuditRecord
from fleetgate.store.database import Database
from fleetgate.tenancy.tables import safety_audit

__all__ = ["AuditLog", "JsonlAuditLog", "RecordSubmitter", "StoreAuditLog", "audit_row"]


def audit_row(record: AuditRecord) -> dict[str, Any]:
    """The ``fg_safety_audit`` row of a record (JSON-serialisable, so it can be spooled)."""
    item = record.item
    return {
        "id": item.request_id or os.urandom(12).hex(),
        "request_id": item.request_id,
        "created_ms": int(item.created_at * 1000),
        "key_id": item.key_id,
        "team_id": item.team,
        "alias": item.alias,
        "flagged": record.flagged,
        "categories": record.categories,
        "verdicts": [v.to_dict() for v in record.verdicts],
        "failed": record.failed,
    }  # fmt: skip


class RecordSubmitter(Protocol):
    """The part of ``fleetgate.tenancy.writer.RecordWriter`` the audit log needs."""

    def submit(self, kind: str, row: dict[str, Any]) -> None: ...


class AuditLog(Protocol):
    """An audit sink that can also list what it holds."""

    def write(self, record: AuditRecord) -> None | Any: ...

    async def recent(
        self, *, limit: int = 100, key_id: str | None = None, flagged: bool | None = None
    ) -> list[dict[str, Any]]: ...


def _matches(row: dict[str, Any], key_id: str | None, flagged: bool | None) -> bool:
    if key_id is not None and row.get("key_id") != key_id:
        return False
    return flagged is None or bool(row.get("flagged")) == flagged


class StoreAuditLog:
    """Verdicts into ``fg_safety_audit`` through the record writer's spool and batches."""

    def __init__(self, writer: RecordSubmitter, db: Database) -> None:
        self.writer = writer
        self.db = db

    def write(self, record: AuditRecord) -> None:
        self.writer.submit("safety", audit_row(record))

    async def recent(
        self, *, limit: int = 100, key_id: str | None = None, flagged: bool | None = None
    ) -> list[dict[str, Any]]:
        """The newest rows first (what the writer has stored so far)."""
        query = select(safety_audit).order_by(safety_audit.c.created_ms.desc()).limit(limit)
        if key_id is not None:
            query = query.where(safety_audit.c.key_id == key_id)
        if flagged is not None:
            query = query.where(safety_audit.c.flagged == flagged)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [{str(k): v for k, v in r.items()} for r in rows]


class JsonlAuditLog:
    """One JSON line per record in ``path`` (appended in a worker thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _append(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    async def write(self, record: AuditRecord) -> None:
        line = json.dumps(audit_row(record), ensure_ascii=False)
        await asyncio.to_thread(self._append, line)

    def _read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text("utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash
        return out

    async def recent(
        self, *, limit: int = 100, key_id: str | None = None, flagged: bool | None = None
    ) -> list[dict[str, Any]]:
        rows = [r for r in await asyncio.to_thread(self._read) if _matches(r, key_id, flagged)]
        rows.sort(key=lambda r: r.get("created_ms", 0), reverse=True)
        return rows[:limit]
