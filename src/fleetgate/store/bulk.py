"""`BulkInsert`: many rows into several tables in one transaction, from one worker thread.

The record writer's path to the store. Each implementation owns a connection of its own and is
used only from the one thread that calls it, so neither encoding a batch nor its round trips
wait for turns on the gateway's event loop (under load that wait is what starved the writer):

- SQLite: the standard library driver; per table one ``INSERT ... SELECT ... FROM
  json_each(?) ON CONFLICT DO NOTHING`` (the rows as one JSON array) inside ``BEGIN IMMEDIATE``.
- PostgreSQL: asyncpg on a private event loop; one statement per batch, each table's rows sent
  as column arrays and ``unnest``-ed into ``INSERT ... ON CONFLICT DO NOTHING`` (data-modifying
  CTEs: a batch is one round trip and one transaction whatever its size).

A table that declares an `fleetgate.store.after_insert.AfterInsert` (tenancy's spend rows:
their rollup) has it run over the rows the batch really added, in the same transaction.

Every value is first clamped to its column (`fleetgate.store.fields`). What the store still
refuses for the data itself (a missing required value, a value of the wrong type) raises
`fleetgate.errors.RecordRefused`; any other failure (connection lost, lock timeout) is raised
as it is, and the same rows can be retried. Inserts are idempotent on the primary key.

Example (in a worker thread)::

    bulk = db.bulk_insert([spend, spend_tags])
    new_spend, new_tags = bulk.insert([spend_rows, tag_rows])
    bulk.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import asyncpg  # type: ignore[import-untyped]
import orjson
from sqlalchemy import Table

from fleetgate.errors import RecordRefused
from fleetgate.store.after_insert import AfterInsert, after_insert_of
from fleetgate.store.fields import RowShape

__all__ = ["BulkInsert", "PostgresBulkInsert", "SqliteBulkInsert"]

Rows = Sequence[Sequence[Mapping[str, Any]]]


class BulkInsert(Protocol):
    """Inserts ``rows[i]`` into ``tables[i]`` for every i, all or nothing; returns how many
    rows of each table were new. Blocking: call it from one worker thread only."""

    def insert(self, rows: Rows) -> list[int]: ...

    def close(self) -> None: ...


def _values(shapes: Sequence[RowShape], rows: Rows, fit: bool) -> list[list[list[Any]]]:
    """Each table's rows as lists of values: as they are (``fit=False``; the statement clamps
    what it can) or clamped in Python (``fit=True``: also NUL characters, near types)."""
    try:
        return [
            [shape.fit(row) if fit else shape.raw(row) for row in table_rows]
            for shape, table_rows in zip(shapes, rows, strict=True)
        ]
    except (TypeError, ValueError, AttributeError) as exc:  # not a row, or not JSON
        raise RecordRefused(f"a row cannot be encoded: {exc}") from exc


def _insert_fitting(
    insert: Callable[[list[list[list[Any]]], bool], list[int]],
    shapes: Sequence[RowShape],
    rows: Rows,
) -> list[int]:
    """Insert the rows as they are; when the store refuses them, once more clamped in Python
    (`RecordRefused` if it refuses those too). ``insert(values, fitted)``."""
    try:
        return insert(_values(shapes, rows, fit=False), False)
    except RecordRefused:
        return insert(_values(shapes, rows, fit=True), True)


class SqliteBulkInsert:
    """`BulkInsert` into the SQLite file at ``path``.

    Each table's rows go in as one JSON array bound to one parameter and unpacked by SQLite
    (``json_each``): one statement step per table, so the driver drops the GIL once per batch
    rather than once per row, and the gateway's event loop thread is not made to hand it back
    thousands of times a second."""

    def __init__(self, path: str, tables: Sequence[Table], *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self.shapes = [RowShape(t) for t in tables]
        self._follow = [after_insert_of(t) for t in tables]
        self._sql = [
            f"INSERT INTO {s.table.name} ({', '.join(s.names)}) SELECT "
            + ", ".join(
                c.select_sql(f"json_extract(value, '$[{i}]')", "sqlite")
                for i, c in enumerate(s.columns)
            )
            # WHERE true: SQLite's parser needs it before an upsert clause after a SELECT
            + " FROM json_each(?) WHERE true ON CONFLICT DO NOTHING"
            + (f" RETURNING {_first_key(s.table)}" if follow is not None else "")
            for s, follow in zip(self.shapes, self._follow, strict=True)
        ]
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_s, isolation_level=None,
                check_same_thread=False,
            )  # fmt: skip
            conn.execute("PRAGMA synchronous=NORMAL")
            self._conn = conn
        return self._conn

    def insert(self, rows: Rows) -> list[int]:
        return _insert_fitting(self._insert, self.shapes, rows)

    def _insert(self, values: list[list[list[Any]]], fitted: bool) -> list[int]:
        try:
            arrays = [orjson.dumps(vals).decode() if vals else None for vals in values]
        except TypeError as exc:  # a value of no JSON type, left by the clamp for the store
            raise RecordRefused(f"a row cannot be encoded: {exc}") from exc
        if not fitted and any(a is not None and "\\u0000" in a for a in arrays):
            # SQLite's JSON functions cut a string at a NUL: clamp in Python, which replaces it
            raise RecordRefused("a NUL character in a value")
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            counts = self._insert_tables(conn, arrays)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            # Locked, busy, full disk, I/O: OperationalError, worth a retry. The rest is
            # about the rows themselves (a constraint; a batch's cost summing past 64 bits).
            if isinstance(exc, sqlite3.OperationalError) and "integer overflow" not in str(exc):
                raise
            raise RecordRefused(f"{type(exc).__name__}: {exc}") from exc
        return counts

    def _insert_tables(self, conn: sqlite3.Connection, arrays: list[str | None]) -> list[int]:
        """Each table's rows, then what the tables run after their new rows; the counts."""
        # ON CONFLICT DO NOTHING skips a known primary key only; OR IGNORE would also
        # drop a row that breaks NOT NULL, silently.
        counts: list[int] = []
        added: list[tuple[AfterInsert, list[Any]]] = []
        for sql, array, follow in zip(self._sql, arrays, self._follow, strict=True):
            if array is None:
                counts.append(0)
            elif follow is not None:
                keys = [r[0] for r in conn.execute(sql, (array,)).fetchall()]
                counts.append(len(keys))
                if keys:
                    added.append((follow, keys))
            else:
                counts.append(conn.execute(sql, (array,)).rowcount)
        for follow, keys in added:
            conn.execute(follow.sqlite, {"ids": orjson.dumps(keys).decode()})
        return counts

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PostgresBulkInsert:
    """`BulkInsert` into PostgreSQL at ``dsn`` (a ``postgresql://`` URL for asyncpg)."""

    def __init__(
        self,
        dsn: str,
        tables: Sequence[Table],
        *,
        connect_timeout_s: float = 3.0,
        command_timeout_s: float = 15.0,
    ) -> None:
        self.dsn = dsn
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self.shapes = [RowShape(t) for t in tables]
        self._sql = _unnest_statement(self.shapes)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: asyncpg.Connection | None = None

    def insert(self, rows: Rows) -> list[int]:
        return _insert_fitting(self._insert, self.shapes, rows)

    def _insert(self, values: list[list[list[Any]]], fitted: bool) -> list[int]:
        args: list[list[Any]] = []
        for shape, vals in zip(self.shapes, values, strict=True):
            columns = list(zip(*vals, strict=True)) if vals else [() for _ in shape.columns]
            args.extend(list(c) for c in columns)
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        try:
            record = self._loop.run_until_complete(self._execute(args))
        except (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError) as exc:
            raise RecordRefused(f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            self._drop()  # its state is unknown: the next batch connects afresh
            raise
        return [int(record[i]) for i in range(len(self.shapes))]

    async def _execute(self, args: list[list[Any]]) -> Any:
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(
                self.dsn, timeout=self.connect_timeout_s, command_timeout=self.command_timeout_s
            )
        return await self._conn.fetchrow(self._sql, *args)

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None

    def close(self) -> None:
        if self._conn is not None and self._loop is not None:
            try:
                self._loop.run_until_complete(self._conn.close(timeout=2))
            except Exception:  # already gone: nothing to close politely
                self._conn.terminate()
            self._conn = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None


def _first_key(table: Table) -> str:
    return str(next(iter(table.primary_key.columns)).name)


def _unnest_statement(shapes: Sequence[RowShape]) -> str:
    """``WITH t0 AS (INSERT ... SELECT substr(c0, 1, 100), ... FROM unnest($1::text[], ...)
    AS u(c0, ...) ON CONFLICT DO NOTHING RETURNING 1), ... SELECT (SELECT count(*) FROM t0),
    ...``: every table in one statement, values clamped by the server; for each table that
    declares an `AfterInsert`, one more CTE over the new rows (tenancy's spend: the rollup)."""
    ctes: list[str] = []
    n = 0
    tables = [s.table.name for s in shapes]
    follows = [
        (t, f)
        for t, f in zip(tables, map(after_insert_of, (s.table for s in shapes)), strict=True)
        if f is not None
    ]
    returned = {t for t, _ in follows} | {r for _, f in follows for r in f.reads}
    for i, shape in enumerate(shapes):
        arrays, names = [], []
        for j, col in enumerate(shape.columns):
            n += 1
            arrays.append(f"${n}::{col.array_type}[]")
            names.append(f"c{j}")
        select = ", ".join(c.select_sql(f"c{j}", "postgresql") for j, c in enumerate(shape.columns))
        ctes.append(
            f"t{i} AS (INSERT INTO {shape.table.name} ({', '.join(shape.names)}) "
            f"SELECT {select} FROM unnest({', '.join(arrays)}) AS u({', '.join(names)}) "
            "ON CONFLICT DO NOTHING RETURNING " + ("*)" if shape.table.name in returned else "1)")
        )
    for k, (table, follow) in enumerate(follows):
        sources = {t: (f"t{tables.index(t)}" if t in tables else t) for t in (table, *follow.reads)}
        ctes.append(f"a{k} AS ({follow.postgresql(sources)})")
    counts = ", ".join(f"(SELECT count(*) FROM t{i})" for i in range(len(shapes)))
    return f"WITH {', '.join(ctes)} SELECT {counts}"
