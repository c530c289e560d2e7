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

__all__ = ["Segment", "Spool", "encode"]

log = logging.getLogger("fleetgate.tenancy.spool")


def encode(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bytes]:
    """``records`` as spool lines. Never raises: a record JSON cannot hold (a value nested too
    deep, a key that is not a string, an object of no JSON type) is stored as close as JSON
    allows, each such value replaced by a note; the records returned are what was encoded."""
    try:
        return records, b"".join(orjson.dumps(r) + b"\n" for r in records)
    except TypeError:  # orjson.JSONEncodeError
        pass
    fixed = [orjson.loads(_lenient(r)) for r in records]
    return fixed, b"".join(orjson.dumps(r) + b"\n" for r in fixed)


def _lenient(value: Any, depth: int = 0) -> bytes:
    """``value`` as JSON, field by field down to the row's fields (record, row, field)."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        if isinstance(value, dict) and depth < 2:
            return b"{" + b",".join(
                orjson.dumps(str(k)) + b":" + _lenient(v, depth + 1) for k, v in value.items()
            ) + b"}"  # fmt: skip
        return orjson.dumps(f"<not stored: {exc}>")


@dataclass(eq=False)
class Segment:
    """One spool file. ``pending`` holds, in memory, the records not yet written; ``None``
    means the segment is file-backed: its records are read back from the file (memory is kept
    for a bounded number of records, the spool holds the rest). ``done`` records of the
    segment are written (or set aside); ``broken``: a write failed part-way, append no more."""

    path: Path
    fd: int
    opened: float = field(default_factory=time.monotonic)
    pending: list[dict[str, Any]] | None = field(default_factory=list)
    appended: int = 0
    synced: int = 0  # records known to be on disk (fsync)
    done: int = 0
    broken: bool = False

    def remaining(self) -> int:
        """Records of this segment not yet written."""
        return len(self.pending) if self.pending is not None else self.appended - self.done

    def append(self, records: list[dict[str, Any]], data: bytes) -> None:
        """Append ``records``, encoded as ``data`` (one JSON line each), with one write (a
        request's spend and audit rows go together); in memory too unless file-backed. An
        ``OSError`` (a full disk) leaves the segment ``broken``: it may end in a torn line."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]  # a short write: the rest, or the error
        except OSError:
            self.broken = True
            raise
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

    def open_segment(self, *, in_memory: bool = True) -> Segment:
        """A new segment, locked by this process (``in_memory=False``: file-backed)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._counter += 1
        name = f"seg-{os.getpid()}-{time.time_ns()}-{self._counter}.jsonl"
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return Segment(path, fd, pending=[] if in_memory else None)

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
        """The records of a segment; a torn line (a crash or a full disk mid-write) is
        skipped."""
        records: list[dict[str, Any]] = []
        for line in path.read_bytes().splitlines():
            if not line.strip():
                continue
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                log.warning("spool %s: skipping a torn line", path.name)
        return records
