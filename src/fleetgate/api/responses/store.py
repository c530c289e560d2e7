"""`ResponseStore`: stored responses and the conversation they continue, per tenant.

Each stored response is one turn of a conversation: its response object (what ``GET``
returns) and its chat messages (this turn's input, then the assistant's output), with the id
of the response it continued. ``history`` walks that chain back in one query (a recursive
CTE, the same on SQLite and PostgreSQL) and returns the conversation's messages, oldest first.

Everything is scoped to an owner (the key's team, or the key without a team): another
owner's response is "not found" (404), never "forbidden". A response past its ``expires_ms``
(``responses.retention_s`` after it was made) is not found either, and `purge` deletes it.
A chain whose older response was deleted or expired continues from what is left.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Integer, delete, insert, literal, select

from fleetgate.api.responses.tables import responses
from fleetgate.errors import NotFound
from fleetgate.store.database import Database
from fleetgate.store.rows import now_ms

__all__ = ["ResponseStore"]


class ResponseStore:
    def __init__(self, db: Database, clock: Callable[[], int] = now_ms) -> None:
        self.db = db
        self.clock = clock

    async def save(
        self,
        owner: str,
        response: dict[str, Any],
        messages: list[dict[str, Any]],
        retention_s: float,
        items: list[dict[str, Any]] | None = None,
    ) -> None:
        now = self.clock()
        async with self.db.engine.begin() as conn:
            await conn.execute(
                insert(responses).values(
                    id=response["id"], owner=owner,
                    previous_id=response.get("previous_response_id"), created_ms=now,
                    expires_ms=now + int(retention_s * 1000), response=response,
                    messages=messages, input=items or [],
                )
            )  # fmt: skip

    async def get(self, owner: str, response_id: str) -> dict[str, Any]:
        """The stored response object."""
        found = await self._column(responses.c.response, owner, response_id)
        if not isinstance(found, dict):
            raise _missing(response_id, "response_id")
        return found

    async def input_items(self, owner: str, response_id: str) -> list[dict[str, Any]]:
        """The stored response's input items, in the order they were sent."""
        found = await self._column(responses.c.input, owner, response_id)
        if not isinstance(found, list):
            raise _missing(response_id, "response_id")
        return found

    async def _column(self, column: Any, owner: str, response_id: str) -> Any:
        async with self.db.engine.connect() as conn:
            return await conn.scalar(
                select(column).where(
                    responses.c.id == response_id,
                    responses.c.owner == owner,
                    responses.c.expires_ms > self.clock(),
                )
            )

    async def delete(self, owner: str, response_id: str) -> None:
        async with self.db.engine.begin() as conn:
            gone = await conn.execute(
                delete(responses).where(
                    responses.c.id == response_id,
                    responses.c.owner == owner,
                    responses.c.expires_ms > self.clock(),
                )
            )
        if not gone.rowcount:
            raise _missing(response_id, "response_id")

    async def history(self, owner: str, response_id: str, max_turns: int) -> list[dict[str, Any]]:
        """The chat messages of the conversation up to and including ``response_id`` (at most
        ``max_turns`` turns back), oldest first; `NotFound` when it is not the owner's."""
        now = self.clock()
        r = responses
        chain = (
            select(r.c.id, r.c.previous_id, literal(0, Integer).label("depth"))
            .where(r.c.id == response_id, r.c.owner == owner, r.c.expires_ms > now)
            .cte("chain", recursive=True)
        )
        earlier = r.alias("earlier")
        chain = chain.union_all(
            select(earlier.c.id, earlier.c.previous_id, chain.c.depth + 1).where(
                earlier.c.id == chain.c.previous_id,
                earlier.c.owner == owner,
                earlier.c.expires_ms > now,
                chain.c.depth < max_turns - 1,
            )
        )
        query = (
            select(r.c.messages).join(chain, r.c.id == chain.c.id).order_by(chain.c.depth.desc())
        )
        async with self.db.engine.connect() as conn:
            turns = (await conn.execute(query)).scalars().all()
        if not turns:
            raise _missing(response_id, "previous_response_id")
        return [m for turn in turns for m in turn if isinstance(m, dict)]

    async def purge(self) -> int:
        """Delete the expired responses; returns how many."""
        async with self.db.engine.begin() as conn:
            gone = await conn.execute(
                delete(responses).where(responses.c.expires_ms <= self.clock())
            )
        return int(gone.rowcount or 0)


def _missing(response_id: str, param: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param=param)
