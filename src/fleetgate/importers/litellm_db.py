"""Teams, keys, budgets and spend history copied from a LiteLLM proxy's PostgreSQL database.

LiteLLM stores a virtual key as the hex SHA-256 of the raw ``sk-...`` key
(``LiteLLM_VerificationToken.token``), which is exactly how fleetgate stores its own keys
(`fleetgate.tenancy.model.hash_key`): the hash is copied as it is, and every LiteLLM key keeps
working against fleetgate without being re-issued.

What is read (tables of LiteLLM's ``schema.prisma``):

- ``LiteLLM_TeamTable`` -> ``fg_teams`` (``team_alias`` as the name; rpm/tpm/parallel limits;
  ``max_budget`` and ``budget_duration``; ``models`` restrict the team's keys that have none).
- ``LiteLLM_BudgetTable`` -> the limits of keys that point at a budget (``budget_id``) and
  have none of their own.
- ``LiteLLM_VerificationToken`` -> ``fg_api_keys`` (hash, team, user, models, limits, budget,
  expiry; ``blocked`` keys and keys of blocked teams are imported revoked).
- ``LiteLLM_SpendLogs`` -> ``fg_spend`` (+ ``fg_spend_tags``, and the new rows added to the
  spend rollup in the same transaction): the history, so reports and budget counters start
  where LiteLLM's left off.

Every row gets an id derived from LiteLLM's (``team_ll_...``, ``key_ll_...``; spend keeps its
request id), so a re-run updates what it wrote before and adds only what is new. A re-run
tightens a team or key fleetgate already holds but never loosens it: a key revoked in fleetgate
stays revoked, a lowered limit or budget and a narrowed allowlist stay (`reimport`).

Example::

    report = await import_litellm_db("postgresql://litellm@db/litellm", fleetgate_db)
    print(report.summary())
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from fleetgate.errors import ConfigError
from fleetgate.importers.announce import announce_tenancy_change
from fleetgate.importers.reimport import merge_key, merge_team
from fleetgate.store.database import Database
from fleetgate.store.shared import dialect_insert
from fleetgate.tenancy.money import usd_to_nusd
from fleetgate.tenancy.rollup import roll_up
from fleetgate.tenancy.tables import api_keys, spend, spend_tags, teams, tenancy_state

__all__ = ["DbImportReport", "import_litellm_db", "litellm_dsn"]

NO_TEAM_ID = "team_ll_none"  # LiteLLM keys may have no team; fleetgate's keys always have one
NO_TEAM_NAME = "litellm-no-team"
_ALL_MODELS = {"all-proxy-models", "*"}
_HEX = frozenset("0123456789abcdef")
_SPEND_BATCH = 1000

Merge = Callable[[Mapping[str, Any], dict[str, Any], str], tuple[dict[str, Any], list[str]]]


@dataclass
class DbImportReport:
    teams: int = 0
    keys: int = 0
    spend_read: int = 0
    spend_new: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"teams: {self.teams}, keys: {self.keys}, spend records: {self.spend_new} new "
            f"of {self.spend_read} read"
        )


def litellm_dsn(url: str) -> tuple[str, str | None]:
    """LiteLLM's ``DATABASE_URL`` as asyncpg takes it, and the schema (Prisma's ``?schema=``)."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in ("postgresql", "postgres") or not parts.hostname:
        raise ConfigError(f"not a PostgreSQL URL: {_redact(url)} (postgresql://user@host/db)")
    query = parse_qs(parts.query)
    schema = query.pop("schema", [None])[0]
    rest = "&".join(f"{k}={v[0]}" for k, v in query.items())
    return urlunsplit(("postgresql", parts.netloc, parts.path, rest, "")), schema


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def _period(duration: str | None) -> str | None:
    """LiteLLM's ``budget_duration`` (``30d``, ``1mo``, ``7d``, ``24h``) -> a fleetgate period."""
    if not duration:
        return None
    d = duration.strip().lower()
    if d in ("1d", "24h"):
        return "daily"
    if d in ("7d", "1w"):
        return "weekly"
    if d in ("30d", "31d", "1mo", "1m"):
        return "monthly"
    return None


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _as_it_is(
    old: Mapping[str, Any], new: dict[str, Any], where: str
) -> tuple[dict[str, Any], list[str]]:
    """The team that holds keys without one, once there, is fleetgate's to change."""
    return dict(old), []


def _limit(value: Any, top: int = 2_147_483_647) -> int | None:
    return None if value is None else max(0, min(int(value), top))


class _Importer:
    def __init__(self, src: asyncpg.Connection, dst: Database, now_ms: int) -> None:
        self.src = src
        self.dst = dst
        self.now_ms = now_ms
        self.report = DbImportReport()
        self.team_ids: dict[str, str] = {}  # LiteLLM team_id -> fleetgate id
        self.team_models: dict[str, list[str] | None] = {}
        self.team_blocked: set[str] = set()
        self.team_admins: dict[str, set[str]] = {}
        self.key_ids: dict[str, str] = {}  # token hash -> fleetgate key id

    def note(self, text: str) -> None:
        self.report.notes.append(text)

    async def table_exists(self, name: str) -> bool:
        return bool(await self.src.fetchval("SELECT to_regclass($1) IS NOT NULL", f'"{name}"'))

    def budget_fields(self, max_budget: Any, duration: Any, where: str) -> dict[str, Any]:
        period = _period(duration)
        if duration and period is None:
            self.note(f"{where}: budget_duration {duration!r} has no fleetgate period (monthly)")
        if max_budget is None:
            return {"max_budget_nusd": None, "budget_period": None}
        return {"max_budget_nusd": usd_to_nusd(float(max_budget)),
                "budget_period": period or "monthly"}  # fmt: skip

    async def upsert(self, table: Any, row: dict[str, Any], merge: Merge | None = None) -> None:
        """Insert ``row``, or merge it into the row of its id already there (`reimport`):
        read and written in one transaction, the row locked, so an admin change made at the
        same time is not lost."""
        async with self.dst.engine.begin() as conn:
            old = None
            if merge is not None:
                query = select(table).where(table.c.id == row["id"]).with_for_update()
                old = (await conn.execute(query)).mappings().first()
            if old is None or merge is None:
                stmt = dialect_insert(self.dst.dialect)(table).values(**row)
                keep = {c: stmt.excluded[c] for c in row if c not in ("id", "created_ms")}
                await conn.execute(
                    stmt.on_conflict_do_update(index_elements=[table.c.id], set_=keep)
                )
                return
            merged, notes = merge(dict(old), row, f"{table.name} {row['id']}")
            self.report.notes.extend(notes)
            await conn.execute(update(table).where(table.c.id == row["id"]).values(**merged))

    async def team_name(self, team_id: str, wanted: str) -> str:
        async with self.dst.engine.connect() as conn:
            owner = await conn.scalar(select(teams.c.id).where(teams.c.name == wanted))
        if owner is None or owner == team_id:
            return wanted
        return f"{wanted} (litellm {team_id[8:16]})"

    async def teams(self) -> None:
        rows = await self.src.fetch('SELECT * FROM "LiteLLM_TeamTable" ORDER BY created_at')
        for r in rows:
            tid = "team_ll_" + r["team_id"].replace("-", "")[:32]
            self.team_ids[r["team_id"]] = tid
            models = [m for m in (r["models"] or []) if m]
            self.team_models[r["team_id"]] = (
                None if not models or _ALL_MODELS & set(models) else models
            )
            self.team_admins[r["team_id"]] = set(r["admins"] or [])
            if r["blocked"]:
                self.team_blocked.add(r["team_id"])
                self.note(f"team {r['team_alias'] or r['team_id']}: blocked -> its keys revoked")
            name = await self.team_name(tid, (r["team_alias"] or r["team_id"])[:200])
            where = f"team {name}"
            row = {"id": tid, "name": name, "rpm": _limit(r["rpm_limit"]),
                   "tpm": _limit(r["tpm_limit"]),
                   "max_parallel": _limit(r["max_parallel_requests"]),
                   **self.budget_fields(r["max_budget"], r["budget_duration"], where),
                   "log_payloads": False, "tags": {"litellm_team_id": r["team_id"]},
                   "created_ms": _ms(r["created_at"]) or self.now_ms}  # fmt: skip
            if r["soft_budget"] is not None:
                self.note(f"{where}: soft_budget has no equivalent (alert_thresholds instead)")
            if r["tpd_limit"] is not None:
                self.note(f"{where}: tpd_limit has no equivalent (left out)")
            await self.upsert(teams, row, merge_team)
            self.report.teams += 1

    async def budgets(self) -> dict[str, Any]:
        if not await self.table_exists("LiteLLM_BudgetTable"):
            return {}
        rows = await self.src.fetch('SELECT * FROM "LiteLLM_BudgetTable"')
        return {r["budget_id"]: r for r in rows}

    async def keys(self) -> None:
        budgets = await self.budgets()
        rows = await self.src.fetch('SELECT * FROM "LiteLLM_VerificationToken"')
        for r in rows:
            token = (r["token"] or "").lower()
            if len(token) != 64 or not set(token) <= _HEX:
                self.note(f"key {r['key_alias'] or r['key_name']}: token is not a SHA-256 "
                          "hash (left out)")  # fmt: skip
                continue
            await self.key(r, token, budgets.get(r["budget_id"]))

    async def no_team(self) -> str:
        if NO_TEAM_ID not in self.team_ids.values():
            await self.upsert(teams, {"id": NO_TEAM_ID, "name": NO_TEAM_NAME, "log_payloads": False,
                                      "tags": {}, "created_ms": self.now_ms},
                              _as_it_is)  # fmt: skip
            self.team_ids[""] = NO_TEAM_ID
            self.report.teams += 1
            self.note(f"keys without a team were put in team {NO_TEAM_NAME!r}")
        return NO_TEAM_ID

    async def key(self, r: Any, token: str, budget: Any) -> None:
        ll_team = r["team_id"]
        if ll_team and ll_team not in self.team_ids:
            self.note(f"key {token[:8]}: team {ll_team} not found; put in {NO_TEAM_NAME!r}")
            ll_team = None
        team_id = self.team_ids[ll_team] if ll_team else await self.no_team()
        models = [m for m in (r["models"] or []) if m]
        aliases = None if not models or _ALL_MODELS & set(models) else models
        if aliases is None and ll_team:
            aliases = self.team_models.get(ll_team)
        src = r
        if budget is not None and all(
            r[f] is None for f in ("max_budget", "rpm_limit", "tpm_limit", "max_parallel_requests")
        ):
            src = budget  # the key's limits live in LiteLLM_BudgetTable
        user = r["user_id"]
        tags = {"litellm_key_alias": r["key_alias"]} if r["key_alias"] else {}
        if user and len(user) > 40:
            tags["litellm_user_id"], user = user[:250], None
        blocked = bool(r["blocked"]) or (ll_team in self.team_blocked)
        role = (
            "team_admin"
            if ll_team and r["user_id"] in self.team_admins.get(ll_team, ())
            else "user"
        )
        hint = (r["key_name"] or r["key_alias"] or f"ll-{token[:8]}")[:32]
        kid = "key_ll_" + token[:32]
        row = {"id": kid, "key_hash": token, "key_hint": hint, "team_id": team_id,
               "user_id": user, "role": role, "aliases": aliases,
               "rpm": _limit(src["rpm_limit"]), "tpm": _limit(src["tpm_limit"]),
               "max_parallel": _limit(src["max_parallel_requests"]),
               **self.budget_fields(src["max_budget"], src["budget_duration"], f"key {hint}"),
               "tags": tags, "expires_ms": _ms(r["expires"]),
               "revoked_ms": self.now_ms if blocked else None,
               "created_ms": _ms(r["created_at"]) or self.now_ms}  # fmt: skip
        try:
            await self.upsert(api_keys, row, merge_key)
        except IntegrityError:  # the same hash under another id: a key fleetgate issued
            self.note(f"key {hint}: its hash is already a fleetgate key (left as it is)")
            async with self.dst.engine.connect() as conn:
                owner = await conn.scalar(select(api_keys.c.id).where(api_keys.c.key_hash == token))
            if owner is not None:  # its LiteLLM spend is billed to that key
                self.key_ids[token] = str(owner)
            return
        self.key_ids[token] = kid
        self.report.keys += 1

    def spend_row(self, r: Any) -> tuple[dict[str, Any], list[dict[str, str]]]:
        token = (r["api_key"] or "").lower()
        key_id = self.key_ids.get(token) or ("key_ll_" + token[:32] if token else "key_ll_unknown")
        team = self.team_ids.get(r["team_id"] or "")
        start = _ms(r["startTime"]) or self.now_ms
        latency = r["request_duration_ms"]
        if latency is None and r["endTime"] is not None:
            latency = (_ms(r["endTime"]) or start) - start
        tags = _json(r["request_tags"])
        names = [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []
        status = 200 if (r["status"] or "success") == "success" else 500
        rid = str(r["request_id"])[:100]
        row = {"request_id": rid, "created_ms": start, "key_id": key_id, "team_id": team,
               "alias": (r["model_group"] or r["model"] or "unknown")[:200],
               "deployment": (r["model_id"] or None), "version": None, "status": status,
               "input_tokens": int(r["prompt_tokens"] or 0),
               "output_tokens": int(r["completion_tokens"] or 0), "cached_tokens": 0,
               "cost_nusd": usd_to_nusd(float(r["spend"] or 0.0)),
               "latency_ms": max(0, int(latency or 0)),
               "tags": {"litellm_tags": ",".join(names)} if names else {}}  # fmt: skip
        tag_rows = [{"request_id": rid, "tag": f"litellm_tag={t}"[:300]} for t in names]
        return row, tag_rows

    async def spend(self) -> None:
        query = ('SELECT request_id, api_key, spend, prompt_tokens, completion_tokens, '
                 '"startTime", "endTime", request_duration_ms, model, model_id, model_group, '
                 'team_id, request_tags, status FROM "LiteLLM_SpendLogs" '
                 'ORDER BY "startTime", request_id')  # fmt: skip
        async with self.src.transaction():
            batch: list[dict[str, Any]] = []
            tag_rows: list[dict[str, str]] = []
            async for r in self.src.cursor(query, prefetch=_SPEND_BATCH):
                row, tags = self.spend_row(r)
                batch.append(row)
                tag_rows.extend(tags)
                if len(batch) >= _SPEND_BATCH:
                    await self.flush_spend(batch, tag_rows)
                    batch, tag_rows = [], []
            await self.flush_spend(batch, tag_rows)

    async def flush_spend(self, rows: list[dict[str, Any]], tag_rows: list[dict[str, str]]) -> None:
        if not rows:
            return
        self.report.spend_read += len(rows)
        async with self.dst.engine.begin() as conn:
            new = [str(k[0]) for k in await self.dst.insert_new(spend, rows, conn)]
            await self.dst.insert_ignore(spend_tags, tag_rows, conn)
            await roll_up(conn, new)  # the reports' rollup, in the same transaction
            self.report.spend_new += len(new)

    async def bump(self) -> int:
        """Move the change counter running gateways poll; its new value."""
        async with self.dst.engine.begin() as conn:
            await conn.execute(
                update(tenancy_state)
                .where(tenancy_state.c.id == 1)
                .values(version=tenancy_state.c.version + 1)
            )
            version = await conn.scalar(
                select(tenancy_state.c.version).where(tenancy_state.c.id == 1)
            )
        return int(version or 0)


async def import_litellm_db(
    url: str,
    dst: Database,
    *,
    spend_history: bool = True,
    redis_url: str | None = None,
    redis_prefix: str = "fg:",
) -> DbImportReport:
    """Copy LiteLLM's teams, keys, budgets and spend into ``dst`` (migrated first), then tell
    running gateways (the store's change counter, and with ``redis_url`` the Redis message
    every replica reloads its keys on, as after an admin change: `announce`).

    Raises `ConfigError` when ``url`` cannot be reached or holds no LiteLLM tables."""
    dsn, schema = litellm_dsn(url)
    settings = {"search_path": schema} if schema else {}
    try:
        src = await asyncpg.connect(dsn, timeout=10, server_settings=settings)
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        raise ConfigError(f"cannot connect to {_redact(url)}: {exc}") from None
    try:
        importer = _Importer(src, dst, int(time.time() * 1000))
        for table in ("LiteLLM_TeamTable", "LiteLLM_VerificationToken"):
            if not await importer.table_exists(table):
                raise ConfigError(f"{_redact(url)}: no table {table} (is this LiteLLM's database?)")
        await dst.migrate()
        try:
            await importer.teams()
            await importer.keys()
            if spend_history and await importer.table_exists("LiteLLM_SpendLogs"):
                await importer.spend()
        finally:  # what was written before a failure is announced too
            version = await importer.bump()
            if redis_url is not None:
                note = await announce_tenancy_change(redis_url, redis_prefix, version)
                if note is not None:
                    importer.note(note)
        return importer.report
    finally:
        await src.close()
