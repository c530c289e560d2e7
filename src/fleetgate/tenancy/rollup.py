"""The spend rollup (``fg_spend_rollup``): spend summed per hour and per UTC day, by team, key,
alias, deployment, version and tag, kept in step with ``fg_spend`` by every writer.

One spend row adds to one rollup row per dimension (team, key, alias, deployment, version, and
one per tag, or the no-tag row) in each period (hour and day); a spend report then reads a few
thousand rollup rows instead of a month of requests (`fleetgate.tenancy.spend_query`).

The rollup only ever grows from the spend rows an insert really added (``ON CONFLICT DO
NOTHING ... RETURNING``), inside the same transaction, so a replayed record counts once and a
report from the rollup equals one from the raw rows. Who writes spend rows, and how:

- the record writer's bulk insert (`fleetgate.store.bulk`), through `SPEND_ROLLUP`, which the
  spend table declares (`fleetgate.store.after_insert`): SQLite runs `rollup_statement` over
  the new request ids after its inserts; PostgreSQL adds it to the batch's one statement as one
  more data-modifying CTE over the spend and tag CTEs' ``RETURNING`` rows;
- the LiteLLM importer: `roll_up` with the request ids its insert returned;
- migration 0011: the same statement over the whole table (the backfill).

Missing values (no team, deployment, version or tag) are stored as ``''`` so that they can be
part of the primary key (reports turn them back into ``None``); rows whose hour or day holds
the same group are merged with ``ON CONFLICT DO UPDATE``, in primary-key order so that two
replicas' writers take their row locks in the same order. A cost sum that would pass the
column's range stops at its largest value.

Example::

    async with db.engine.begin() as conn:
        ids = [...]                       # the request ids just inserted into fg_spend
        await roll_up(conn, ids)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.store.after_insert import AfterInsert
from fleetgate.timespans import DAY_MS, HOUR_MS

__all__ = [
    "DIMENSIONS",
    "PERIODS",
    "SPEND_ROLLUP",
    "new_spend_source",
    "roll_up",
    "rollup_statement",
]

PERIODS = (DAY_MS, HOUR_MS)  # coarsest first: how a date range is cut into pieces
# dimension -> its value in a spend row ``s`` ('' where the row has none)
DIMENSIONS = {
    "team": "''",
    "key": "s.key_id",
    "alias": "s.alias",
    "deployment": "coalesce(s.deployment, '')",
    "version": "coalesce(s.version, '')",
    "tag": "coalesce(t.tag, '')",
}
_SUMS = ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens", "cost_nusd")
_INT8_MAX = 2**63 - 1


def _start(created: str, period: str) -> str:
    """The start of ``created``'s period (floor, also before 1970), without ``%`` (a
    parameter marker to some drivers)."""
    return (
        f"CASE WHEN {created} >= 0 THEN {created} / {period} * {period} "
        f"ELSE -((-{created} + {period} - 1) / {period}) * {period} END"
    )


def rollup_statement(dialect: str, spend_src: str, tags_src: str = "fg_spend_tags") -> str:
    """``INSERT INTO fg_spend_rollup ... ON CONFLICT DO UPDATE`` adding the spend rows of
    ``spend_src`` (a table, CTE or parenthesised subquery with fg_spend's columns) and their
    tags in ``tags_src`` (request_id, tag)."""
    measures = (
        "s.created_ms AS created_ms, coalesce(s.team_id, '') AS team_id, "
        "s.input_tokens AS input_tokens, s.output_tokens AS output_tokens, "
        "s.cached_tokens AS cached_tokens, "
        "coalesce(s.cache_write_tokens, 0) AS cache_write_tokens, s.cost_nusd AS cost_nusd"
    )
    facts = []
    for dim, value in DIMENSIONS.items():
        join = f" LEFT JOIN {tags_src} t ON t.request_id = s.request_id" if dim == "tag" else ""
        facts.append(
            f"SELECT '{dim}' AS dim, {value} AS group_value, {measures} FROM {spend_src} s{join}"
        )
    periods = " UNION ALL ".join(f"SELECT {p} AS period_ms" for p in PERIODS)
    pg = dialect == "postgresql"
    cost = f"LEAST(sum(f.cost_nusd), {_INT8_MAX})::bigint" if pg else "sum(f.cost_nusd)"
    sums = ", ".join(f"sum(f.{c})" for c in _SUMS[:-1])
    add = [f"{c} = fg_spend_rollup.{c} + excluded.{c}" for c in ("requests", *_SUMS[:-1])]
    if pg:
        add.append(
            "cost_nusd = LEAST(fg_spend_rollup.cost_nusd::numeric + excluded.cost_nusd, "
            f"{_INT8_MAX})::bigint"
        )
    else:  # SQLite turns an overflowing integer sum into a float, which min() caps
        add.append(f"cost_nusd = min(fg_spend_rollup.cost_nusd + excluded.cost_nusd, {_INT8_MAX})")
    return (
        "INSERT INTO fg_spend_rollup (dim, period_ms, start_ms, team_id, group_value, "
        "requests, input_tokens, output_tokens, cached_tokens, cache_write_tokens, cost_nusd) "
        f"SELECT f.dim, p.period_ms, {_start('f.created_ms', 'p.period_ms')}, f.team_id, "
        f"f.group_value, count(*), {sums}, {cost} "
        f"FROM ({' UNION ALL '.join(facts)}) f CROSS JOIN ({periods}) p "
        # WHERE true: SQLite's parser needs it before an upsert clause after a SELECT
        "WHERE true GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5 "
        "ON CONFLICT (dim, period_ms, start_ms, team_id, group_value) DO UPDATE SET "
        + ", ".join(add)
    )


def new_spend_source(dialect: str) -> str:
    """The spend rows whose request ids are the JSON array bound to ``:ids``."""
    ids = (
        "SELECT json_array_elements_text(CAST(:ids AS json))"
        if dialect == "postgresql"
        else "SELECT value FROM json_each(:ids)"
    )
    return f"(SELECT * FROM fg_spend WHERE request_id IN ({ids}))"


async def roll_up(conn: AsyncConnection, request_ids: Sequence[str]) -> None:
    """Add the spend rows ``request_ids`` (just inserted, with their tags, in ``conn``'s
    transaction) to the rollup."""
    if not request_ids:
        return
    dialect = conn.dialect.name
    stmt = text(rollup_statement(dialect, new_spend_source(dialect)))
    await conn.execute(stmt, {"ids": orjson.dumps(list(request_ids)).decode()})


def _postgres_rollup(sources: Mapping[str, str]) -> str:
    return rollup_statement("postgresql", sources["fg_spend"], sources["fg_spend_tags"])


SPEND_ROLLUP = AfterInsert(
    sqlite=rollup_statement("sqlite", new_spend_source("sqlite")),
    postgresql=_postgres_rollup,
    reads=("fg_spend_tags",),
)
"""The rollup as the bulk insert runs it after the spend rows (and tags) a batch added."""
