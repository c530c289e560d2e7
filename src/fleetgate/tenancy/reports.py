"""Spend reports and audit listings, grouped and filtered in SQL (same on every dialect).

Spend reports read the hourly and daily rollup, and the raw spend rows only for the partial
hours at a range's edges (`fleetgate.tenancy.spend_query`): the sums are exact."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest, PermissionDenied
from fleetgate.store.database import Database
from fleetgate.tenancy.money import nusd_to_usd
from fleetgate.tenancy.spend_query import spend_query
from fleetgate.tenancy.tables import admin_audit, api_keys, request_audit, teams, users

__all__ = ["GROUPS", "MASTER_LABEL", "audit_log", "spend_report"]

GROUPS = ("team", "alias", "key", "tag", "deployment", "version")
MASTER_LABEL = "master key"  # the name of the master key's own traffic in reports


def _scope_team(actor: Principal, team_id: str | None, *, spend: bool = False) -> str | None:
    """The team a report is limited to: a team admin's own; ``None`` (every team) for the
    master key, and for a finance viewer's spend reports."""
    if actor.is_master or (spend and actor.may("spend_all")):
        return team_id
    if not actor.may("spend" if spend else "manage"):
        raise PermissionDenied("Reports need a team admin or the master key.")
    if team_id is not None and team_id != actor.team_id:
        raise PermissionDenied("This key may only see its own team's spend.")
    return actor.team_id


async def spend_report(
    db: Database,
    actor: Principal,
    group_by: list[str],
    since_ms: int | None = None,
    until_ms: int | None = None,
    team_id: str | None = None,
) -> list[dict[str, Any]]:
    """Rows of ``team_name`` (grouped by team; "master key" for its own traffic), ``key_name``
    (grouped by key: its user's name and hint, or its hint), ``spend_usd``, ``requests``,
    ``input_tokens``, ``output_tokens``, ``cached_tokens`` (of the input, read from a prompt
    cache) and ``cache_write_tokens`` (of the input, written to one) per group."""
    unknown = [g for g in group_by if g not in GROUPS]
    if unknown:
        raise InvalidRequest(
            f"group_by: unknown {', '.join(unknown)}; use {', '.join(GROUPS)}", param="group_by"
        )
    if len(set(group_by)) != len(group_by):
        raise InvalidRequest("group_by: a group is named twice", param="group_by")
    team_id = _scope_team(actor, team_id, spend=True)
    query = spend_query(group_by, since_ms, until_ms, team_id)
    async with db.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
        names: dict[str, str] = {}
        if "team" in group_by:
            names = dict((await conn.execute(select(teams.c.id, teams.c.name))).all())
        keys: dict[str, str] = {}
        if "key" in group_by:
            keys = await _key_names(conn, {str(r.key) for r in rows if r.key is not None})
    out = []
    for r in rows:
        item: dict[str, Any] = {g: getattr(r, g) for g in group_by}
        if "team" in group_by:  # the master key's own traffic has no team
            item["team_name"] = names.get(item["team"]) if item["team"] else MASTER_LABEL
        if "key" in group_by:
            item["key_name"] = MASTER_LABEL if item["key"] == "master" else keys.get(item["key"])
        item.update(
            spend_usd=nusd_to_usd(int(r.cost)),
            spend_nusd=int(r.cost),
            requests=int(r.requests),
            input_tokens=int(r.input_tokens),
            output_tokens=int(r.output_tokens),
            cached_tokens=int(r.cached_tokens),
            cache_write_tokens=int(r.cache_write_tokens),
        )
        out.append(item)
    return out


async def _key_names(conn: Any, ids: set[str]) -> dict[str, str]:
    """What people call a key: its user's name when bound to one, else its hint."""
    if not ids:
        return {}
    query = (
        select(api_keys.c.id, api_keys.c.key_hint, users.c.name)
        .select_from(api_keys.outerjoin(users, users.c.id == api_keys.c.user_id))
        .where(api_keys.c.id.in_(sorted(ids)))
    )
    out = {}
    for key_id, hint, user in (await conn.execute(query)).all():
        out[str(key_id)] = f"{user} ({hint})" if user else str(hint)
    return out


async def audit_log(
    db: Database,
    actor: Principal,
    kind: str = "admin",
    limit: int = 100,
    *,
    offset: int = 0,
    search: str | None = None,
) -> list[dict[str, Any]]:
    """The newest audit rows (``kind``: admin or request), a team admin sees its team's.

    ``offset`` skips that many of the newest (pages); ``search`` keeps the rows whose action,
    target or actor key (admin), or key, alias or decision (request) contains it.
    """
    team_id = _scope_team(actor, None)
    limit = max(1, min(limit, 1000))
    offset = max(0, offset)
    if search is not None and ("\x00" in search or len(search) > 200):
        raise InvalidRequest("'search' must be at most 200 characters, no NUL", param="search")
    pattern = f"%{search}%" if search else None
    if kind == "admin":
        query = select(admin_audit).order_by(admin_audit.c.id.desc())
        if team_id is not None:  # what its keys did, and what was done to its team
            query = query.where(
                (admin_audit.c.actor_team_id == team_id) | (admin_audit.c.team_id == team_id)
            )
        if pattern is not None:
            query = query.where(
                admin_audit.c.action.like(pattern)
                | admin_audit.c.target.like(pattern)
                | admin_audit.c.actor_key_id.like(pattern)
            )
    elif kind == "request":
        query = select(request_audit).order_by(request_audit.c.created_ms.desc())
        if team_id is not None:
            query = query.where(request_audit.c.team_id == team_id)
        if pattern is not None:
            query = query.where(
                request_audit.c.key_id.like(pattern)
                | request_audit.c.alias.like(pattern)
                | request_audit.c.decision.like(pattern)
            )
    else:
        raise InvalidRequest("'kind' must be admin or request", param="kind")
    query = query.limit(limit).offset(offset)
    async with db.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [{str(k): v for k, v in r._asdict().items()} for r in rows]
