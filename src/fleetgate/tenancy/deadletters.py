"""`DeadLetters`: the records the store refused, set aside so that the rest keep flowing.

One JSON line per record in ``<data dir>/spend-dead-letters.jsonl``: when (``at_ms``), which
process, the record's ``kind`` and ``row`` as they were queued, and the store's ``error``.
Lines are appended (and synced) by the record writer's thread before the record leaves the
spool, so a record is never in neither place. A crash between the two can repeat a line;
`DeadLetters.recent` lists each record once. Several processes may share the file (appends of
one line are atomic). Operators read it with ``GET /admin/spend/dead-letters``, fix the cause,
and may feed the rows back through the spool by hand.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

import orjson

__all__ = ["DeadLetters"]

_MAX_ERROR = 2000
_REMEMBERED = 10_000  # records this process already set aside (a retried batch repeats them)


class DeadLetters:
    """The dead-letter file. `add` blocks (the writer's thread); `recent` too (run it in a
    worker thread from the event loop)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def add(self, record: dict[str, Any], error: str) -> bool:
        """Append ``record`` with ``error`` unless this process set it aside already; durable
        on return (an ``OSError`` means it is not: keep the record where it was)."""
        row = record.get("row")
        key = hashlib.blake2b(orjson.dumps(record, default=repr), digest_size=16).digest()
        if key in self._seen:
            return False
        entry = {
            "at_ms": int(time.time() * 1000),
            "pid": os.getpid(),
            "kind": record.get("kind"),
            "error": error[:_MAX_ERROR],
            "row": row,
        }
        line = orjson.dumps(entry, default=repr) + b"\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._seen[key] = None
        if len(self._seen) > _REMEMBERED:
            self._seen.popitem(last=False)
        return True

    def count(self) -> int:
        """Lines in the file."""
        try:
            with self.path.open("rb") as fh:
                return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
        except FileNotFoundError:
            return 0

    def recent(self, limit: int = 100) -> tuple[list[dict[str, Any]], int]:
        """The newest ``limit`` records set aside, newest first (each once), and how many
        lines the file holds."""
        newest: deque[bytes] = deque(maxlen=max(0, limit) * 2 + 16)
        total = 0
        try:
            with self.path.open("rb") as fh:
                for line in fh:
                    if line.strip():
                        total += 1
                        newest.append(line)
        except FileNotFoundError:
            return [], 0
        entries: list[dict[str, Any]] = []
        seen: set[tuple[Any, ...]] = set()
        for line in reversed(newest):
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line torn by a crash
            if not isinstance(entry, dict):
                continue
            row = entry.get("row")
            ident = row.get("id") or row.get("request_id") if isinstance(row, dict) else None
            key = (entry.get("kind"), ident) if ident else (line,)
            if key in seen:
                continue
            seen.add(key)
            entries.append(entry)
            if len(entries) >= limit:
                break
        return entries, total
