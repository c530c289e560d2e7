"""What several features' stores do to their rows the same way: the wall clock they stamp
rows with, a row's lease (one replica drives it) and an update that only lands on the revision
it was computed from (optimistic: a row changed meanwhile is left alone).

Example::

    held = await conn.execute(take_lease(rollouts, owner, now, 15.0, rollouts.c.alias == a))
    held.rowcount == 1  # this replica drives the rollout for the next 15 s
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import ColumnElement, Table, Update, or_, update

__all__ = ["at_revision", "now_ms", "take_lease"]


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch: the stores' default ``clock``."""
    return int(time.time() * 1000)


def take_lease(
    table: Table,
    owner: str,
    now: int,
    lease_s: float,
    *where: ColumnElement[bool],
    owner_column: str = "owner",
) -> Update:
    """The update that gives ``owner`` the lease of the row ``where`` selects (until ``now``
    plus ``lease_s``) when it holds it already or its holder's ran out (``lease_until_ms``
    before ``now``); one row updated: held."""
    held_by = table.c[owner_column]
    return (
        update(table)
        .where(*where)
        .where(or_(held_by == owner, table.c.lease_until_ms < now))
        .values({owner_column: owner, "lease_until_ms": now + int(lease_s * 1000)})
    )


def at_revision(
    table: Table, revision: int, now: int, values: dict[str, Any], *where: ColumnElement[bool]
) -> Update:
    """The update of the row ``where`` selects to ``values`` while it is still at
    ``revision``: its ``revision`` goes up by one and ``updated_ms`` becomes ``now``; no row
    updated: it moved meanwhile."""
    return (
        update(table)
        .where(*where)
        .where(table.c.revision == revision)
        .values({**values, "revision": revision + 1, "updated_ms": now})
    )
