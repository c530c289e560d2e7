"""Spend sums over a date range, read from the rollup wherever it can answer exactly.

A range ``[since, until)`` is cut into pieces (`pieces`): whole UTC days are read from the
rollup's day rows, whole hours at either end from its hour rows, and what is left at the very
edges (less than an hour on each side, only when a bound is not on the hour) from the raw
spend rows, through ``ix_fg_spend_time``. The pieces are disjoint and cover the range, and
every rollup row is the exact sum of the raw rows of its period, so the answer is the one a
plain ``GROUP BY`` over the raw rows gives, to the nano-dollar. An open end (no ``since`` or no
``until``) takes whole periods up to it: the rollup row of the current hour or day already
holds every row written so far.

The rollup keeps one dimension per row, with the team on every row: a report grouped by one
of team, key, alias, deployment, version or tag, optionally also by team and limited to one
team, reads the rollup; one grouped by two or more of the others (``key,alias``) reads the raw
rows for the whole range.

Example::

    query = spend_query(["alias"], since_ms, until_ms, team_id="team_1")
    rows = (await conn.execute(query)).all()   # alias, cost, requests, input_tokens, ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, select, union_all

from fleetgate.tenancy.rollup import PERIODS
from fleetgate.tenancy.tables import spend, spend_rollup, spend_tags

__all__ = ["Piece", "pieces", "raw_spend_query", "spend_query"]

# (period_ms or None for the raw rows, start or None: unbounded, end or None: unbounded)
Piece = tuple[int | None, int | None, int | None]
SUMS = ("cost", "requests", "input_tokens", "output_tokens", "cached_tokens",
        "cache_write_tokens")  # fmt: skip
_NULLABLE = ("deployment", "version", "tag")  # stored as '' in the rollup


def pieces(since: int | None, until: int | None, periods: Sequence[int] = PERIODS) -> list[Piece]:
    """Disjoint pieces covering ``[since, until)``: the coarsest whole periods first, finer
    ones at the edges, raw rows (period ``None``) for what no period covers whole."""
    if since is not None and until is not None and since >= until:
        return []
    if not periods:
        return [(None, since, until)]
    p, finer = periods[0], periods[1:]
    start = None if since is None else -(-since // p) * p  # the first whole period's start
    end = None if until is None else until // p * p
    if start is not None and end is not None and start >= end:
        return pieces(since, until, finer)
    out: list[Piece] = []
    if since is not None and start is not None and since < start:
        out += pieces(since, start, finer)
    out.append((p, start, end))
    if until is not None and end is not None and end < until:
        out += pieces(end, until, finer)
    return out


def raw_spend_query(
    group_by: Sequence[str], lo: int | None, hi: int | None, team: str | None
) -> Select[Any]:
    """The sums of ``[lo, hi)`` from the raw spend rows (and their tags): the edges' pieces,
    and the reference the rollup is checked (and benchmarked) against."""
    columns: dict[str, Any] = {
        "team": spend.c.team_id, "alias": spend.c.alias, "key": spend.c.key_id,
        "deployment": spend.c.deployment, "version": spend.c.version, "tag": spend_tags.c.tag,
    }  # fmt: skip
    keys = [columns[g] for g in group_by]
    query = select(
        *[k.label(g) for k, g in zip(keys, group_by, strict=True)],
        func.sum(spend.c.cost_nusd).label("cost"),
        func.count().label("requests"),
        func.sum(spend.c.input_tokens).label("input_tokens"),
        func.sum(spend.c.output_tokens).label("output_tokens"),
        func.sum(spend.c.cached_tokens).label("cached_tokens"),
        func.sum(spend.c.cache_write_tokens).label("cache_write_tokens"),
    ).select_from(spend)
    if "tag" in group_by:
        query = query.outerjoin(spend_tags, spend_tags.c.request_id == spend.c.request_id)
    where: list[ColumnElement[bool]] = []
    if lo is not None:
        where.append(spend.c.created_ms >= lo)
    if hi is not None:
        where.append(spend.c.created_ms < hi)
    if team is not None:
        where.append(spend.c.team_id == team)
    if where:
        query = query.where(and_(*where))
    return query.group_by(*keys) if keys else query


def _rollup(
    group_by: Sequence[str], period: int, lo: int | None, hi: int | None, team: str | None
) -> Select[Any]:
    r = spend_rollup.c
    dim = next((g for g in group_by if g != "team"), "team")
    labelled, keys = [], []
    for g in group_by:
        col = r.team_id if g == "team" else r.group_value
        keys.append(col)
        labelled.append(
            func.nullif(col, "").label(g) if g in (*_NULLABLE, "team") else col.label(g)
        )
    query = select(
        *labelled,
        func.sum(r.cost_nusd).label("cost"),
        func.sum(r.requests).label("requests"),
        *[func.sum(r[c]).label(c) for c in SUMS[2:]],
    ).where(r.dim == dim, r.period_ms == period)
    if lo is not None:
        query = query.where(r.start_ms >= lo)
    if hi is not None:
        query = query.where(r.start_ms < hi)
    if team is not None:
        query = query.where(r.team_id == team)
    return query.group_by(*keys) if keys else query


def spend_query(
    group_by: Sequence[str], since: int | None, until: int | None, team_id: str | None
) -> Select[Any]:
    """One statement: per group (labelled by the names in ``group_by``, ordered by them),
    ``cost`` (nano-USD), ``requests``, ``input_tokens``, ``output_tokens``, ``cached_tokens``
    and ``cache_write_tokens``; one row without groups (zeros when nothing matched)."""
    parts = pieces(since, until)
    if sum(g != "team" for g in group_by) > 1:  # not in the rollup: the raw rows throughout
        parts = pieces(since, until, periods=())
    selects = [
        raw_spend_query(group_by, lo, hi, team_id)
        if p is None
        else _rollup(group_by, p, lo, hi, team_id)
        for p, lo, hi in parts
    ] or [raw_spend_query(group_by, 0, 0, team_id)]  # an empty range: no rows (or one of zeros)
    inner = selects[0] if len(selects) == 1 else None
    if inner is None:
        u = union_all(*selects).subquery()
        keys = [u.c[g] for g in group_by]
        inner = select(*keys, *[func.sum(u.c[c]).label(c) for c in SUMS])
        if keys:
            inner = inner.group_by(*keys)
    sub = inner.subquery()
    keys = [sub.c[g] for g in group_by]
    query = select(*keys, *[func.coalesce(sub.c[c], 0).label(c) for c in SUMS])
    return query.order_by(*keys) if keys else query
