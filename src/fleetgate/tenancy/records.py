"""`RecordSink`: spooled records into the store, in batches, from the record writer's thread.

A record is ``{"kind": "spend" | "audit" | "safety", "row": {...}}``; a spend row also yields
one ``fg_spend_tags`` row per tag. Each batch is one transaction (`fleetgate.store.bulk`).
When the store refuses a batch for its data (`fleetgate.errors.RecordRefused`), the batch is
split in halves and each half written on its own, down to the single record the store refuses:
that record goes to the dead-letter file and every other one is written. A batch with k such
records costs about 2·k·log2(batch) extra transactions, never a stall. Any other error (the
store is away) stops the run; what was handled so far is reported, the rest is retried later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.errors import RecordRefused
from fleetgate.store.bulk import BulkInsert
from fleetgate.tenancy.deadletters import DeadLetters
from fleetgate.tenancy.journal import Spool
from fleetgate.tenancy.tables import request_audit, safety_audit, spend, spend_tags

__all__ = ["TABLES", "Progress", "RecordSink", "rows_by_table"]

TABLES = (spend, spend_tags, request_audit, safety_audit)
_INDEX = {"spend": 0, "audit": 2, "safety": 3}


def rows_by_table(records: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The rows of ``records`` for each of `TABLES`; `RecordRefused` for one that is not a
    record of a known kind."""
    rows: list[list[dict[str, Any]]] = [[] for _ in TABLES]
    for record in records:
        kind = record.get("kind") if isinstance(record, dict) else None
        row = record.get("row") if isinstance(record, dict) else None
        if kind not in _INDEX or not isinstance(row, dict):
            raise RecordRefused(f"not a spend, audit or safety record: kind {kind!r}")
        rows[_INDEX[kind]].append(row)
        tags = row.get("tags") if kind == "spend" else None
        if isinstance(tags, dict):
            rid = row.get("request_id")
            rows[1].extend({"request_id": rid, "tag": f"{k}={v}"} for k, v in tags.items())
    return rows


@dataclass(slots=True)
class Progress:
    """What a run did: ``handled`` leading records are in the store or set aside, ``new`` of
    them were spend rows the store did not have, ``refused`` went to the dead-letter file;
    ``error``: what stopped the run early (retry from ``handled``)."""

    handled: int = 0
    new: int = 0
    refused: int = 0
    error: Exception | None = None


class RecordSink:
    """Every method blocks: call them from the writer's one thread."""

    def __init__(self, open_bulk: Callable[[], BulkInsert], dead_letters: DeadLetters) -> None:
        self._open_bulk = open_bulk
        self.dead_letters = dead_letters
        self._bulk: BulkInsert | None = None

    def write(self, records: Sequence[dict[str, Any]], batch_size: int) -> Progress:
        """Write ``records`` in order, ``batch_size`` to a transaction."""
        progress = Progress()
        for start in range(0, len(records), max(1, batch_size)):
            batch = records[start : start + batch_size]
            try:
                new, refused = self._write_checked(batch)
            except Exception as exc:  # the store is away (or the dead-letter file is)
                progress.error = exc
                return progress
            progress.handled += len(batch)
            progress.new += new
            progress.refused += refused
        return progress

    def write_file(self, path: Path, skip: int, batch_size: int) -> tuple[Progress, int]:
        """Write the records of a spool segment after its first ``skip``; also returns how
        many records the file holds."""
        records = Spool.read(path)
        return self.write(records[skip:], batch_size), len(records)

    def _write_checked(self, batch: Sequence[dict[str, Any]]) -> tuple[int, int]:
        try:
            return self._insert(batch), 0
        except RecordRefused as exc:
            if len(batch) == 1:
                self.dead_letters.add(batch[0], str(exc))
                return 0, 1
        mid = len(batch) // 2
        new_a, refused_a = self._write_checked(batch[:mid])
        new_b, refused_b = self._write_checked(batch[mid:])
        return new_a + new_b, refused_a + refused_b

    def _insert(self, batch: Sequence[dict[str, Any]]) -> int:
        rows = rows_by_table(batch)
        if self._bulk is None:
            self._bulk = self._open_bulk()
        return self._bulk.insert(rows)[0]

    def close(self) -> None:
        if self._bulk is not None:
            self._bulk.close()
            self._bulk = None
