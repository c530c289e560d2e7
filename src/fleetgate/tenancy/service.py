"""`TenancyService`: the admin operations on teams, users and keys, with their rules.

The master key may do anything; a team admin key only manages its own team's keys and reads
only its own team's spend and audit. Every change is written to the admin audit log in the
same transaction, bumps the change counter and reloads every replica's key cache.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Column, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.contract.principal import Principal
from fleetgate.errors import InvalidRequest, NotFound, PermissionDenied
from fleetgate.store.database import Database
from fleetgate.store.fields import ColumnShape, column_range, require_fits
from fleetgate.store.rows import now_ms
from fleetgate.tenancy.model import hash_key, key_hint, new_key
from fleetgate.tenancy.money import nusd_to_usd, usd_to_nusd
from fleetgate.tenancy.periods import PERIODS
from fleetgate.tenancy.tables import admin_audit, api_keys, spend_tags, teams, tenancy_state, users

__all__ = ["TenancyService", "parse_time_ms"]


_MAX_EPOCH_S = 253_402_300_799  # 9999-12-31T23:59:59Z


def parse_time_ms(value: Any, param: str) -> int | None:
    """Epoch seconds or an ISO-8601 time (UTC if no zone) → epoch milliseconds."""
    if value is None or value == "":
        return None
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = float(value)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                pass
            else:
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=UTC)
                seconds = parsed.timestamp()
    if seconds is None or not 0 <= seconds <= _MAX_EPOCH_S:  # NaN fails both comparisons
        raise InvalidRequest(
            f"'{param}' must be an ISO-8601 time or epoch seconds (years 1970-9999)", param=param
        )
    return int(seconds * 1000)


def _name(value: Any, column: Column[Any], param: str) -> str:
    """A required name as it will be stored (stripped; fits ``column``, no NUL)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"'{param}' is required", param=param)
    return require_fits(value.strip(), column, param)


def _audit_target(target: str) -> str:
    """What the audit row holds of a caller-given target (clipped, NUL replaced): recording an
    action never fails it after it was made."""
    fitted: str = ColumnShape.of(admin_audit.c.target).fit(target)
    return fitted


def _within_scope(actor: Principal, aliases: list[str] | None) -> list[str] | None:
    """A key made by a team admin limited to some aliases gets no more than those: none named
    means the admin's own list; naming another alias is refused."""
    own = actor.allowed_aliases
    if actor.is_master or own is None:
        return aliases
    if aliases is None:
        return sorted(own)
    outside = sorted(set(aliases) - own)
    if outside:
        raise PermissionDenied(
            f"This admin key may not grant aliases it cannot use itself: {', '.join(outside)}."
        )
    return aliases


def _limits(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("rpm", "tpm", "max_parallel"):
        value = body.get(name)
        top = column_range(api_keys.c[name])[1]  # the store's column: beyond it, a 500 later
        bad_type = not isinstance(value, int) or isinstance(value, bool)  # true is not 1
        if value is not None and (bad_type or not 0 <= value <= top):
            raise InvalidRequest(f"'{name}' must be an integer from 0 to {top}", param=name)
        out[name] = value
    budget = body.get("max_budget_usd")
    top_usd = column_range(api_keys.c.max_budget_nusd)[1] // 10**9
    if budget is not None and (
        not isinstance(budget, int | float)
        or isinstance(budget, bool)
        or not 0 <= budget <= top_usd  # NaN fails too
    ):
        raise InvalidRequest(
            f"'max_budget_usd' must be a number from 0 to {top_usd}", param="max_budget_usd"
        )
    out["max_budget_nusd"] = None if budget is None else usd_to_nusd(budget)
    period = body.get("budget_period")
    if period is not None and period not in PERIODS:
        raise InvalidRequest(
            f"'budget_period' must be one of {', '.join(PERIODS)}", param="budget_period"
        )
    out["budget_period"] = (
        period if period is not None else ("monthly" if budget is not None else None)
    )
    return out


def _tags(body: dict[str, Any]) -> dict[str, str]:
    tags = body.get("tags") or {}
    if not isinstance(tags, dict):
        raise InvalidRequest("'tags' must be an object of strings", param="tags")
    out = {str(k): str(v) for k, v in tags.items()}
    for k, v in out.items():  # each request's spend row stores "key=value"
        require_fits(f"{k}={v}", spend_tags.c.tag, "tags")
    return out


def _limits_out(r: Any) -> dict[str, Any]:
    """A team's or a key's limits as the API shows them (the budget in USD)."""
    return {
        "rpm": r.rpm, "tpm": r.tpm, "max_parallel": r.max_parallel,
        "max_budget_usd": None if r.max_budget_nusd is None else nusd_to_usd(r.max_budget_nusd),
        "budget_period": r.budget_period,
    }  # fmt: skip


def _team_out(r: Any) -> dict[str, Any]:
    return {
        "id": r.id, "name": r.name, **_limits_out(r),
        "log_payloads": bool(r.log_payloads), "tags": r.tags,
    }  # fmt: skip


def _key_out(r: Any) -> dict[str, Any]:
    return {
        "id": r.id, "hint": r.key_hint, "team_id": r.team_id, "user_id": r.user_id,
        "role": r.role, "aliases": r.aliases, **_limits_out(r), "tags": r.tags,
        "expires_ms": r.expires_ms, "revoked": r.revoked_ms is not None,
        "created_ms": r.created_ms, "last_used_ms": r.last_used_ms,
    }  # fmt: skip


class TenancyService:
    """Admin operations; ``changed`` is awaited after each committed change (cache sync)."""

    def __init__(self, db: Database, changed: Callable[[], Awaitable[None]]) -> None:
        self.db = db
        self._changed = changed

    async def _audit(
        self,
        conn: AsyncConnection,
        actor: Principal,
        action: str,
        target: str,
        detail: Any,
        team_id: str | None,
    ) -> None:
        await conn.execute(admin_audit.insert().values(
            created_ms=now_ms(), actor_key_id=actor.key_id, actor_team_id=actor.team_id,
            team_id=team_id, action=action, target=_audit_target(target), detail=detail,
        ))  # fmt: skip
        await conn.execute(
            update(tenancy_state).where(tenancy_state.c.id == 1)
            .values(version=tenancy_state.c.version + 1)
        )  # fmt: skip

    async def _team_id(self, conn: AsyncConnection, ref: str) -> str:
        row = None
        if "\x00" not in ref:  # no stored name has one (and PostgreSQL refuses to compare it)
            query = select(teams.c.id).where((teams.c.id == ref) | (teams.c.name == ref))
            row = (await conn.execute(query)).first()
        if row is None:
            raise NotFound(f"No team '{ref}'.", param="team")
        return str(row.id)

    async def create_team(self, actor: Principal, body: dict[str, Any]) -> dict[str, Any]:
        if not actor.is_master:
            raise PermissionDenied("Only the master key creates teams.")
        name = _name(body.get("name"), teams.c.name, "name")
        row = {"id": "team_" + os.urandom(8).hex(), "name": name, **_limits(body),
               "log_payloads": bool(body.get("log_payloads", False)), "tags": _tags(body),
               "created_ms": now_ms()}  # fmt: skip
        try:
            async with self.db.engine.begin() as conn:
                await conn.execute(teams.insert().values(**row))
                await self._audit(
                    conn, actor, "team.create", row["id"], {"name": row["name"]}, row["id"]
                )
        except IntegrityError:
            raise InvalidRequest(f"A team named '{row['name']}' exists.", param="name") from None
        await self._changed()
        return await self.get_team(actor, row["id"])

    async def get_team(self, actor: Principal, ref: str) -> dict[str, Any]:
        async with self.db.engine.connect() as conn:
            team_id = await self._team_id(conn, ref)
            if not actor.is_master and actor.team_id != team_id:
                raise NotFound(f"No team '{ref}'.", param="team")
            row = (await conn.execute(select(teams).where(teams.c.id == team_id))).one()
        return _team_out(row)

    async def list_teams(self, actor: Principal) -> list[dict[str, Any]]:
        query = select(teams).order_by(teams.c.created_ms)
        if not actor.is_master:
            query = query.where(teams.c.id == actor.team_id)
        async with self.db.engine.connect() as conn:
            return [_team_out(r) for r in (await conn.execute(query)).all()]

    async def create_user(self, actor: Principal, body: dict[str, Any]) -> dict[str, Any]:
        async with self.db.engine.begin() as conn:
            team_id = await self._team_id(conn, str(body.get("team") or ""))
            self._may_manage(actor, team_id)
            name = _name(str(body.get("name") or ""), users.c.name, "name")
            row: dict[str, Any] = {"id": "user_" + os.urandom(8).hex(), "team_id": team_id,
                                   "name": name,
                   "created_ms": now_ms()}  # fmt: skip
            await conn.execute(users.insert().values(**row))
            await self._audit(conn, actor, "user.create", row["id"], {"team_id": team_id}, team_id)
        return row

    def _may_manage(self, actor: Principal, team_id: str) -> None:
        if actor.is_master:
            return
        if actor.role != "team_admin" or actor.team_id != team_id:
            raise PermissionDenied("This key may only manage its own team.")

    async def _may_bind(
        self, conn: AsyncConnection, actor: Principal, team_id: str, user: str
    ) -> None:
        """Whether ``actor`` may make a key that acts as ``user`` (reads its conversations).

        The user must be one of the key's team (``POST /admin/users``): another team's user,
        or a name no user has, is refused alike (400, nothing told about other teams). A team
        admin binds only a user that has never had a key (the key it hands over on
        onboarding) or itself; more keys for a user who has one come from the master key.
        """
        found = None
        if "\x00" not in user:
            query = select(users.c.team_id).where(users.c.id == user)
            found = (await conn.execute(query)).first()
        if found is None or found.team_id != team_id:
            raise InvalidRequest(
                f"'user' must be the id of a user of the key's team (POST /admin/users): "
                f"no user '{user}' there.",
                param="user",
            )
        if actor.is_master or actor.owner == f"user:{user}":
            return
        query = select(api_keys.c.id).where(api_keys.c.user_id == user).limit(1)
        if (await conn.execute(query)).first() is not None:
            raise PermissionDenied(
                f"User '{user}' already has a key: only the master key may bind another key "
                "to it (a key bound to a user reads that user's conversations).",
                param="user",
            )

    async def create_key(self, actor: Principal, body: dict[str, Any]) -> dict[str, Any]:
        """Create a key; the response is the only time the key itself is shown."""
        team_ref = body.get("team") or actor.team_id
        if not isinstance(team_ref, str):
            raise InvalidRequest("'team' is required", param="team")
        role = body.get("role", "user")
        if role not in ("user", "team_admin", "finance_viewer"):
            raise InvalidRequest("'role' must be user, team_admin or finance_viewer", param="role")
        aliases = body.get("aliases")
        if aliases is not None and (
            not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases)
        ):
            raise InvalidRequest("'aliases' must be a list of strings", param="aliases")
        aliases = _within_scope(actor, aliases)
        user = body.get("user")
        if user is not None and not isinstance(user, str):
            raise InvalidRequest("'user' must be a user id", param="user")
        if user is not None:
            require_fits(user, api_keys.c.user_id, "user")
        key = new_key()
        async with self.db.engine.begin() as conn:
            team_id = await self._team_id(conn, team_ref)
            self._may_manage(actor, team_id)
            if role != "user" and not actor.is_master:
                raise PermissionDenied(f"Only the master key creates {role} keys.")
            if user is not None:
                await self._may_bind(conn, actor, team_id, user)
            row = {"id": "key_" + os.urandom(8).hex(), "key_hash": hash_key(key),
                   "key_hint": key_hint(key), "team_id": team_id, "user_id": user,
                   "role": role, "aliases": aliases, **_limits(body), "tags": _tags(body),
                   "expires_ms": parse_time_ms(body.get("expires_at"), "expires_at"),
                   "revoked_ms": None, "created_ms": now_ms()}  # fmt: skip
            await conn.execute(api_keys.insert().values(**row))
            detail = {"team_id": team_id, "role": role, "user": user}
            await self._audit(conn, actor, "key.create", row["id"], detail, team_id)
        await self._changed()
        return {"id": row["id"], "key": key, "team_id": team_id, "hint": row["key_hint"]}

    async def list_keys(self, actor: Principal, team: str | None = None) -> list[dict[str, Any]]:
        async with self.db.engine.connect() as conn:
            query = select(api_keys).order_by(api_keys.c.created_ms)
            if team is not None:
                team_id = await self._team_id(conn, team)
                if not actor.is_master and team_id != actor.team_id:
                    raise PermissionDenied("This key may only see its own team.")
                query = query.where(api_keys.c.team_id == team_id)
            if not actor.is_master:
                if actor.role != "team_admin":
                    raise PermissionDenied("Listing keys needs a team admin or the master key.")
                query = query.where(api_keys.c.team_id == actor.team_id)
            return [_key_out(r) for r in (await conn.execute(query)).all()]

    async def revoke_key(self, actor: Principal, key_id: str) -> dict[str, Any]:
        async with self.db.engine.begin() as conn:
            query = select(api_keys).where(api_keys.c.id == key_id)
            row = None if "\x00" in key_id else (await conn.execute(query)).first()
            if row is None or (not actor.is_master and row.team_id != actor.team_id):
                raise NotFound(f"No key '{key_id}'.")
            self._may_manage(actor, row.team_id)
            await conn.execute(
                update(api_keys).where(api_keys.c.id == key_id).values(revoked_ms=now_ms())
            )
            await self._audit(
                conn, actor, "key.revoke", key_id, {"team_id": row.team_id}, row.team_id
            )
        await self._changed()
        return {"id": key_id, "revoked": True}

    async def set_limits(
        self, actor: Principal, kind: str, ref: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Replace the limits and budget of a team (master key) or a key (master, or the admin
        of its team); a limit left out becomes unlimited."""
        limits = _limits(body)
        async with self.db.engine.begin() as conn:
            if kind == "team":
                if not actor.is_master:
                    raise PermissionDenied("Only the master key changes a team's limits.")
                team_id = await self._team_id(conn, ref)
                target, table = team_id, teams
            else:
                query = select(api_keys.c.team_id).where(api_keys.c.id == ref)
                row = None if "\x00" in ref else (await conn.execute(query)).first()
                if row is None or (not actor.is_master and row.team_id != actor.team_id):
                    raise NotFound(f"No key '{ref}'.")
                self._may_manage(actor, row.team_id)
                target, table, team_id = ref, api_keys, row.team_id
            await conn.execute(update(table).where(table.c.id == target).values(**limits))
            await self._audit(conn, actor, f"{kind}.limits", target, {
                k: v for k, v in limits.items() if v is not None}, team_id)  # fmt: skip
        await self._changed()
        return {"id": target, **limits}

    async def record_admin(
        self,
        actor: Principal,
        action: str,
        target: str,
        detail: Any,
        team_id: str | None = None,
    ) -> None:
        """Audit an admin action that changes nothing here (reads, config reloads, safety
        policies); ``team_id``: the team it concerns (default: the actor's)."""
        async with self.db.engine.begin() as conn:
            await conn.execute(admin_audit.insert().values(
                created_ms=now_ms(), actor_key_id=actor.key_id, actor_team_id=actor.team_id,
                team_id=team_id or actor.team_id, action=action, target=_audit_target(target),
                detail=detail,
            ))  # fmt: skip

    async def team_id(self, ref: str) -> str:
        """The id of a team given by id or name (404 if none)."""
        async with self.db.engine.connect() as conn:
            return await self._team_id(conn, ref)
