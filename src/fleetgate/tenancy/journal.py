"""The spool: append-only JSON-lines segments that make every record durable before its
response leaves, so neither a database outage nor a SIGKILL loses one.

A writer appends to its own segment, holding an exclusive ``flock`` on it while the process
lives. A segment whose lock can be taken belongs to nobody (its process died, or it was closed
with records the database never got): it is replayed, then deleted. Replays are idempotent on
the request id, so a segment replayed twice still counts each record once.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

__all__ = ["Segment", "Spool"]

log = logging.getLogger("fleetgate.tenancy.spool")


@dataclass(eq=False)
class Segment:
    """One spool file. ``pending`` holds records not yet in the database; ``None`` means the
    file itself must be replayed (the in-memory copy was dropped to bound memory)."""

    path: Path
    fd: int
    opened: float = field(default_factory=time.monotonic)
    pending: list[dict[str, Any]] | None = field(default_factory=list)
    appended: int = 0
    synced: int = 0  # records known to be on disk (fsync)

    def append(self, *records: dict[str, Any]) -> None:
        """Append records with one write (a request's spend and audit rows go together)."""
        os.write(self.fd, b"".join(orjson.dumps(r) + b"\n" for r in records))
        self.appended += len(records)
        if self.pending is not None:
            self.pending.extend(records)

    def sync(self) -> None:
        """fsync what was appended (blocking: call from a worker thread on the request path)."""
        count = self.appended
        if self.fd >= 0 and count > self.synced:
            os.fsync(self.fd)
            self.synced = count

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # releases the flock
            self.fd = -1


class Spool:
    """Segment files under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._counter = 0

    def open_segment(self) -> Segment:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._counter += 1
        name = f"seg-{os.getpid()}-{time.time_ns()}-{self._counter}.jsonl"
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return Segment(path, fd)

    def orphans(self, exclude: set[Path]) -> Iterator[tuple[Path, int]]:
        """Segments nobody holds, each yielded locked (close the fd when done)."""
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob("seg-*.jsonl")):
            if path in exclude:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            yield path, fd

    @staticmethod
    def read(path: Path) -> list[dict[str, Any]]:
        """The records of a segment; a torn last line (crash mid-write) is skipped."""
        records: list[dict[str, Any]] = []
        for line in path.read_bytes().splitlines():
            if not line.strip():
                continue
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                log.warning("spool %s: skipping a torn line", path.name)
        return records
