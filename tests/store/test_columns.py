"""The shared column factories: released migrations call them, so what each returns is pinned
here (name, type, nullability, key, foreign key) on SQLite and PostgreSQL; an edit that would
change an old revision's schema fails here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, MetaData, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateTable

from fleetgate.store import columns


def _ddl(*cols: Column[Any], dialect: Any) -> list[str]:
    """The column lines of a CREATE TABLE holding ``cols`` (and fg_teams, for foreign keys)."""
    md = MetaData()
    Table("fg_teams", md, columns.string_id())
    table = Table("t", md, *cols)
    text = str(CreateTable(table).compile(dialect=dialect))
    return [line.strip().rstrip(",") for line in text.splitlines()[2:] if line.strip(" ()")]


PINNED: list[tuple[str, Callable[[], list[Column[Any]]], list[str]]] = [
    ("string_id", lambda: [columns.string_id()], ["id VARCHAR(40) NOT NULL", "PRIMARY KEY (id)"]),
    (
        "string_id(64)",
        lambda: [columns.string_id(64)],
        ["id VARCHAR(64) NOT NULL", "PRIMARY KEY (id)"],
    ),
    (
        "request_id",
        lambda: [columns.request_id()],
        ["request_id VARCHAR(100) NOT NULL", "PRIMARY KEY (request_id)"],
    ),
    ("created_ms", lambda: [columns.created_ms()], ["created_ms BIGINT NOT NULL"]),
    ("updated_ms", lambda: [columns.updated_ms()], ["updated_ms BIGINT NOT NULL"]),
    ("owner", lambda: [columns.owner()], ["owner VARCHAR(64) NOT NULL"]),
    ("moments_ms", lambda: columns.moments_ms("a_ms", "b_ms"), ["a_ms BIGINT", "b_ms BIGINT"]),
    ("team_id", lambda: [columns.team_id()], ["team_id VARCHAR(40)"]),
    (
        "team_id required, references",
        lambda: [columns.team_id(required=True, references_teams=True)],
        ["team_id VARCHAR(40) NOT NULL", "FOREIGN KEY(team_id) REFERENCES fg_teams (id)"],
    ),
    ("key_id", lambda: [columns.key_id()], ["key_id VARCHAR(40)"]),
    ("key_id required", lambda: [columns.key_id(required=True)], ["key_id VARCHAR(40) NOT NULL"]),
    (
        "request_scope required",
        lambda: columns.request_scope(required=True),
        [
            "created_ms BIGINT NOT NULL",
            "key_id VARCHAR(40) NOT NULL",
            "team_id VARCHAR(40)",
            "alias VARCHAR(200) NOT NULL",
        ],
    ),
    (
        "request_scope",
        lambda: columns.request_scope(required=False),
        [
            "created_ms BIGINT NOT NULL",
            "key_id VARCHAR(40)",
            "team_id VARCHAR(40)",
            "alias VARCHAR(200)",
        ],
    ),
    (
        "limits",
        columns.limits,
        [
            "rpm INTEGER",
            "tpm INTEGER",
            "max_parallel INTEGER",
            "max_budget_nusd BIGINT",
            "budget_period VARCHAR(16)",
        ],
    ),
    (
        "token_counts",
        columns.token_counts,
        [
            "input_tokens INTEGER NOT NULL",
            "output_tokens INTEGER NOT NULL",
            "cached_tokens INTEGER NOT NULL",
        ],
    ),
    (
        "token_counts(BigInteger)",
        lambda: columns.token_counts(BigInteger),
        [
            "input_tokens BIGINT NOT NULL",
            "output_tokens BIGINT NOT NULL",
            "cached_tokens BIGINT NOT NULL",
        ],
    ),
    (
        "team_document_key",
        columns.team_document_key,
        [
            "team VARCHAR(128) NOT NULL",
            "doc_id VARCHAR(200) NOT NULL",
            "PRIMARY KEY (team, doc_id)",
        ],
    ),
]


DIALECTS: list[Any] = [sqlite.dialect(), postgresql.dialect()]  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("dialect", DIALECTS, ids=["sqlite", "pg"])
@pytest.mark.parametrize(("name", "make", "expected"), PINNED, ids=[p[0] for p in PINNED])
def test_a_factory_makes_the_columns_the_released_migrations_created(
    name: str, make: Callable[[], list[Column[Any]]], expected: list[str], dialect: Any
) -> None:
    assert _ddl(*make(), dialect=dialect) == expected, name


def test_each_call_makes_new_columns() -> None:
    """Two tables can use the same factory (a Column belongs to one table)."""
    md = MetaData()
    a = Table("a", md, columns.created_ms(), *columns.limits())
    b = Table("b", md, columns.created_ms(), *columns.limits())
    assert a.c.created_ms is not b.c.created_ms
    assert [c.name for c in a.c] == [c.name for c in b.c]
