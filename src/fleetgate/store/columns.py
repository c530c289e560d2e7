"""The columns many tables share, made in one place: the table definitions
(``<feature>/tables.py``) and the Alembic revisions that create those tables both call these.

A revision's schema never changes once released, so what a factory returns is fixed: a table
that wants another shape gets its own ``Column`` (or a new factory), never an edit here
(``tests/store/test_columns.py`` pins the DDL). Each call returns new ``Column`` objects, as a
column belongs to one table. Python-side defaults (``default=``) are not part of the schema and
stay with the tables that use them.

Example::

    Table("fg_spend", metadata, request_id(), *request_scope(required=True), ...)
    op.create_table("fg_teams", string_id(), ..., *limits(), ..., created_ms())
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, ForeignKey, Integer, String

__all__ = [
    "created_ms",
    "key_id",
    "limits",
    "moments_ms",
    "owner",
    "request_id",
    "request_scope",
    "string_id",
    "team_document_key",
    "team_id",
    "token_counts",
    "updated_ms",
]

_ID = 40  # a team, user, key, file or batch id: "team-<hex>", "batch_<hex>", ...


def string_id(length: int = _ID) -> Column[Any]:
    """The primary key ``id``, a string of at most ``length`` characters."""
    return Column("id", String(length), primary_key=True)


def request_id() -> Column[Any]:
    """The primary key ``request_id`` (one row per request: a replay never duplicates it)."""
    return Column("request_id", String(100), primary_key=True)


def created_ms() -> Column[Any]:
    """When the row was made, in milliseconds since the epoch."""
    return Column("created_ms", BigInteger, nullable=False)


def updated_ms() -> Column[Any]:
    """When the row last changed, in milliseconds since the epoch."""
    return Column("updated_ms", BigInteger, nullable=False)


def moments_ms(*names: str) -> list[Column[Any]]:
    """One optional millisecond time per name (``completed_ms``: ``None`` until it happens)."""
    return [Column(name, BigInteger) for name in names]


def owner() -> Column[Any]:
    """``owner``: whose a stored object is, the key's team or, for a key without one, the key."""
    return Column("owner", String(64), nullable=False)


def team_id(*, required: bool = False, references_teams: bool = False) -> Column[Any]:
    """``team_id``; ``references_teams``: a foreign key to ``fg_teams.id``."""
    refs = (ForeignKey("fg_teams.id"),) if references_teams else ()
    return Column("team_id", String(_ID), *refs, nullable=not required)


def key_id(*, required: bool = False) -> Column[Any]:
    """``key_id``: the virtual key a row belongs to."""
    return Column("key_id", String(_ID), nullable=not required)


def request_scope(*, required: bool) -> list[Column[Any]]:
    """Who asked what, when: ``created_ms``, ``key_id``, ``team_id`` (never required: the master
    key has none) and ``alias``; ``required``: the key and the alias are ``NOT NULL``."""
    alias = Column("alias", String(200), nullable=not required)
    return [created_ms(), key_id(required=required), team_id(), alias]


def limits() -> list[Column[Any]]:
    """A team's or a key's limits, each ``None`` for none: requests and tokens per minute,
    requests in flight, the budget (nano-USD) and its period."""
    return [
        Column("rpm", Integer),
        Column("tpm", Integer),
        Column("max_parallel", Integer),
        Column("max_budget_nusd", BigInteger),
        Column("budget_period", String(16)),
    ]


def token_counts(kind: type[Integer] = Integer) -> list[Column[Any]]:
    """``input_tokens``, ``output_tokens`` and ``cached_tokens`` (prompt tokens read from a
    prompt cache), each ``NOT NULL``; ``kind`` is ``BigInteger`` for sums."""
    names = ("input_tokens", "output_tokens", "cached_tokens")
    return [Column(name, kind, nullable=False) for name in names]


def team_document_key() -> list[Column[Any]]:
    """The primary key of a team's document: ``team`` and ``doc_id``."""
    return [
        Column("team", String(128), primary_key=True),
        Column("doc_id", String(200), primary_key=True),
    ]
