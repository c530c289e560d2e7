"""Reads from tenancy's store for the LiteLLM management routes: keys, teams, spend.

A key is named as LiteLLM clients name it: the key itself (``sk-...``), the hex sha256 of the
key (LiteLLM's "token", what ``/spend/logs`` rows carry as ``api_key``) or fleetgate's key id.
Every read is one bounded statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.tenancy.model import hash_key
from fleetgate.tenancy.spend_query import spend_query
from fleetgate.tenancy.tables import api_keys, spend, spend_rollup, teams, users
from fleetgate.timespans import DAY_MS

__all__ = [
    "DayRow", "KeyRef", "SpendFilter", "day_rows", "key_row", "key_spend", "keys_of_team",
    "spend_rows", "team_row", "team_spend", "user_names",
]  # fmt: skip

_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class KeyRef:
    """How a request named a key: by its stored hash or by its id."""

    key_hash: str | None = None
    key_id: str | None = None

    @classmethod
    def parse(cls, ref: str) -> KeyRef:
        if _HASH.fullmatch(ref):
            return cls(key_hash=ref)
        if ref.startswith("sk-"):
            return cls(key_hash=hash_key(ref))
        return cls(key_id=ref)

    def where(self) -> Any:
        if self.key_hash is not None:
            return api_keys.c.key_hash == self.key_hash
        return api_keys.c.id == self.key_id


async def key_row(conn: AsyncConnection, ref: KeyRef) -> Any | None:
    """The stored key ``ref`` names, or None."""
    if "\x00" in (ref.key_id or ""):
        return None
    return (await conn.execute(select(api_keys).where(ref.where()))).first()


async def team_row(conn: AsyncConnection, ref: str) -> Any | None:
    """The team of id or name ``ref``, or None."""
    if "\x00" in ref:
        return None
    query = select(teams).where((teams.c.id == ref) | (teams.c.name == ref))
    return (await conn.execute(query)).first()


async def keys_of_team(conn: AsyncConnection, team_id: str, limit: int) -> list[Any]:
    query = (
        select(api_keys)
        .where(api_keys.c.team_id == team_id)
        .order_by(api_keys.c.created_ms)
        .limit(limit)
    )
    return list((await conn.execute(query)).all())


async def key_spend(conn: AsyncConnection, key_id: str, team_id: str | None, since: int) -> int:
    """Nano-USD spent by ``key_id`` since ``since`` (ms), read from the spend rollup."""
    rows = (await conn.execute(spend_query(["key"], since or None, None, team_id))).all()
    return sum(int(r.cost) for r in rows if r.key == key_id)


async def team_spend(conn: AsyncConnection, team_id: str, since: int) -> int:
    """Nano-USD spent by the team ``team_id`` since ``since`` (ms)."""
    rows = (await conn.execute(spend_query(["team"], since or None, None, team_id))).all()
    return sum(int(r.cost) for r in rows)


async def user_names(conn: AsyncConnection, ids: set[str]) -> dict[str, str]:
    if not ids:
        return {}
    query = select(users.c.id, users.c.name).where(users.c.id.in_(sorted(ids)))
    return {str(r.id): str(r.name) for r in (await conn.execute(query)).all()}


@dataclass(frozen=True, slots=True)
class SpendFilter:
    """What ``/spend/logs`` was asked for; ``team_id`` None: every team (the caller may)."""

    team_id: str | None = None
    key_id: str | None = None
    user_id: str | None = None
    request_id: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None


def _spend_where(f: SpendFilter) -> list[Any]:
    where: list[Any] = []
    if f.team_id is not None:
        where.append(spend.c.team_id == f.team_id)
    if f.key_id is not None:
        where.append(spend.c.key_id == f.key_id)
    if f.request_id is not None:
        where.append(spend.c.request_id == f.request_id)
    if f.user_id is not None:
        where.append(
            spend.c.key_id.in_(select(api_keys.c.id).where(api_keys.c.user_id == f.user_id))
        )
    if f.since_ms is not None:
        where.append(spend.c.created_ms >= f.since_ms)
    if f.until_ms is not None:
        where.append(spend.c.created_ms < f.until_ms)
    return where


async def spend_rows(conn: AsyncConnection, f: SpendFilter, limit: int) -> list[Any]:
    """The newest ``limit`` spend rows that match ``f``, with the key's hash and user."""
    query = (
        select(spend, api_keys.c.key_hash, api_keys.c.user_id)
        .select_from(spend.outerjoin(api_keys, api_keys.c.id == spend.c.key_id))
        .order_by(spend.c.created_ms.desc(), spend.c.request_id)
        .limit(limit)
    )
    where = _spend_where(f)
    if where:
        query = query.where(and_(*where))
    return list((await conn.execute(query)).all())


@dataclass(frozen=True, slots=True)
class DayRow:
    day_ms: int
    alias: str
    key_id: str
    user_id: str | None
    cost_nusd: int


async def day_rows(conn: AsyncConnection, f: SpendFilter) -> list[DayRow]:
    """Spend per UTC day, alias and key over ``[since, until)`` (whole days: the rollup's day
    rows when nothing narrower than a team is asked, else the raw rows)."""
    if f.key_id is None and f.user_id is None and f.request_id is None:
        return await _rollup_days(conn, f)
    day = (spend.c.created_ms - spend.c.created_ms % DAY_MS).label("day")
    query = (
        select(day, spend.c.alias, spend.c.key_id, api_keys.c.user_id,
               func.sum(spend.c.cost_nusd).label("cost"))
        .select_from(spend.outerjoin(api_keys, api_keys.c.id == spend.c.key_id))
        .where(and_(*_spend_where(f)))
        .group_by(day, spend.c.alias, spend.c.key_id, api_keys.c.user_id)
    )  # fmt: skip
    rows = (await conn.execute(query)).all()
    return [DayRow(int(r.day), r.alias, r.key_id, r.user_id, int(r.cost)) for r in rows]


async def _rollup_days(conn: AsyncConnection, f: SpendFilter) -> list[DayRow]:
    r = spend_rollup.c
    out: list[DayRow] = []
    for dim in ("alias", "key"):
        query = select(r.start_ms, r.group_value, func.sum(r.cost_nusd).label("cost")).where(
            r.dim == dim, r.period_ms == DAY_MS
        )
        if f.since_ms is not None:
            query = query.where(r.start_ms >= f.since_ms)
        if f.until_ms is not None:
            query = query.where(r.start_ms < f.until_ms)
        if f.team_id is not None:
            query = query.where(r.team_id == f.team_id)
        rows = (await conn.execute(query.group_by(r.start_ms, r.group_value))).all()
        for row in rows:
            alias, key = (row.group_value, "") if dim == "alias" else ("", row.group_value)
            out.append(DayRow(int(row.start_ms), alias, key, None, int(row.cost)))
    bound = await _users_of_keys(conn, {d.key_id for d in out if d.key_id})
    return [DayRow(d.day_ms, d.alias, d.key_id, bound.get(d.key_id), d.cost_nusd) for d in out]


async def _users_of_keys(conn: AsyncConnection, ids: set[str]) -> dict[str, str]:
    if not ids:
        return {}
    query = select(api_keys.c.id, api_keys.c.user_id).where(
        api_keys.c.id.in_(sorted(ids)), api_keys.c.user_id.is_not(None)
    )
    return {str(r.id): str(r.user_id) for r in (await conn.execute(query)).all()}
