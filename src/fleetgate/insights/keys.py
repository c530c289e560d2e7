"""The key hygiene report: live keys unused for N days, keys that never expire, and keys that
may call more aliases than they used in those N days.

A key is live when it is neither revoked nor expired. Findings per key:

- ``unused``: no request for ``days`` days (``last_used_ms``, at most a minute stale; a key
  never used counts from its creation);
- ``never_expires``: ``expires_ms`` is not set;
- ``broader_than_used``: the key may call every alias, or aliases it did not call in the
  window (from ``fg_spend``); ``suggested_aliases`` lists the ones it did call. A key that made
  no request in the window is reported as ``unused`` only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from fleetgate.tenancy.tables import api_keys, spend
from fleetgate.timespans import DAY_MS

__all__ = ["key_report"]


async def _used_aliases(conn: AsyncConnection, since_ms: int) -> dict[str, set[str]]:
    rows = await conn.execute(
        select(spend.c.key_id, spend.c.alias).where(spend.c.created_ms >= since_ms).distinct()
    )
    used: dict[str, set[str]] = {}
    for key_id, alias in rows:
        used.setdefault(str(key_id), set()).add(str(alias))
    return used


def _findings(
    row: Any, used: set[str], since_ms: int, aliases: Iterable[str]
) -> tuple[list[str], list[str] | None]:
    found: list[str] = []
    if (row.last_used_ms or row.created_ms) < since_ms:
        found.append("unused")
    if row.expires_ms is None:
        found.append("never_expires")
    allowed = None if row.aliases is None else set(row.aliases)
    if used:
        extra = (set(aliases) if allowed is None else allowed) - used
        if allowed is None or extra:
            found.append("broader_than_used")
    return found, None if allowed is None else sorted(allowed)


async def key_report(
    conn: AsyncConnection,
    *,
    now_ms: int,
    days: int,
    aliases: Iterable[str],
    team_id: str | None = None,
) -> list[dict[str, Any]]:
    """The live keys with at least one finding (see the module docstring), oldest first.
    ``aliases``: the configured ones (what a key allowed every alias may call)."""
    since = now_ms - days * DAY_MS
    used = await _used_aliases(conn, since)
    query = select(api_keys).where(api_keys.c.revoked_ms.is_(None))
    if team_id is not None:
        query = query.where(api_keys.c.team_id == team_id)
    configured = sorted(aliases)
    out = []
    for row in (await conn.execute(query.order_by(api_keys.c.created_ms))).all():
        if row.expires_ms is not None and row.expires_ms <= now_ms:
            continue  # expired: no longer a risk
        key_used = used.get(row.id, set())
        found, allowed = _findings(row, key_used, since, configured)
        if found:
            out.append({
                "id": row.id, "key_hint": row.key_hint, "team_id": row.team_id,
                "role": row.role, "created_ms": row.created_ms,
                "last_used_ms": row.last_used_ms, "expires_ms": row.expires_ms,
                "findings": found, "allowed_aliases": allowed,
                "suggested_aliases": sorted(key_used) if "broader_than_used" in found else None,
            })  # fmt: skip
    return out
