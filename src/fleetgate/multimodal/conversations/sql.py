"""SQLAlchemy 2 async conversation store: SQLite (aiosqlite) and PostgreSQL (asyncpg).

Tables ``mm_conversations`` and ``mm_turns`` (`fleetgate.multimodal.tables`), created by the
multimodal feature's Alembic migrations like every other table. Every append is one
transaction; a replayed ``request_id`` is a no-op. Every read, append and delete checks the
conversation's tenant and owner (``user``; ``None``: shared by the whole tenant), not only its
id.

Storage is bounded per owner: a conversation keeps its newest ``max_turns`` turns (older ones
are never loaded into a prompt anyway), and an owner keeps its newest ``max_conversations``
conversations; starting one more drops that owner's oldest, never another owner's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from fleetgate.errors import InvalidRequest, NotFound, ServiceUnavailable
from fleetgate.multimodal.conversations.store import StoredTurn
from fleetgate.multimodal.tables import conversation_turns, conversations

__all__ = ["SqlConversationStore"]


class SqlConversationStore:
    """Conversation store on the engine of a migrated `fleetgate.store.Database`.

    Example::

        db = resources.databases.get(settings.database_url, settings.data_dir)
        await resources.databases.migrate(db)        # creates mm_conversations, mm_turns
        store = SqlConversationStore(db.engine)
        cid = await store.create(tenant="team-a", user="user:u1")
        await store.append(
            cid, [StoredTurn("user", "hi")], tenant="team-a", user="user:u1", request_id="req-1"
        )
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_turns: int | None = None,
        max_conversations: int | None = None,
    ) -> None:
        self._engine = engine
        self.conversations = conversations
        self.turns = conversation_turns
        self.max_turns = max_turns
        self.max_conversations = max_conversations

    async def create(
        self, *, tenant: str, user: str | None = None, conversation_id: str | None = None
    ) -> str:
        cid = conversation_id or uuid.uuid4().hex
        if not 0 < len(cid) <= 64:
            raise InvalidRequest("conversation id must be 1-64 characters", param="conversation_id")
        row = {"id": cid, "tenant": tenant, "user_id": user, "created_at": time.time()}
        try:
            async with self._engine.begin() as conn:
                await conn.execute(insert(self.conversations).values(**row))
                await self._drop_oldest(conn, tenant, user)
        except IntegrityError as exc:
            raise InvalidRequest(
                f"conversation {cid!r} already exists", param="conversation_id"
            ) from exc
        except SQLAlchemyError as exc:
            raise ServiceUnavailable(f"conversation store failed: {exc}") from exc
        return cid

    async def _drop_oldest(self, conn: AsyncConnection, tenant: str, user: str | None) -> None:
        """Delete the owner's conversations beyond its newest ``max_conversations``."""
        if self.max_conversations is None:
            return
        c = self.conversations
        owner = c.c.user_id.is_(None) if user is None else c.c.user_id == user
        beyond = (
            select(c.c.id)
            .where(c.c.tenant == tenant, owner)
            .order_by(c.c.created_at.desc(), c.c.id.desc())
            .offset(self.max_conversations)
        )
        old = list((await conn.scalars(beyond)).all())
        if old:
            await conn.execute(delete(self.turns).where(self.turns.c.conversation_id.in_(old)))
            await conn.execute(delete(c).where(c.c.id.in_(old)))

    async def _owned(self, conn: AsyncConnection, cid: str, tenant: str, user: str | None) -> None:
        c = self.conversations
        owner = c.c.user_id.is_(None) if user is None else c.c.user_id == user
        found = await conn.scalar(select(c.c.id).where(c.c.id == cid, c.c.tenant == tenant, owner))
        if found is None:  # someone else's and unknown look the same
            raise NotFound(f"conversation {cid!r} not found", param="conversation_id")

    async def append(
        self,
        conversation_id: str,
        turns: Sequence[StoredTurn],
        *,
        tenant: str,
        user: str | None = None,
        request_id: str | None = None,
    ) -> None:
        for attempt in range(3):
            try:
                async with self._engine.begin() as conn:
                    await self._append(conn, conversation_id, turns, tenant, user, request_id)
                return
            except IntegrityError as exc:  # a concurrent append took our seq numbers
                if attempt == 2:
                    raise ServiceUnavailable("conversation append kept conflicting") from exc
            except SQLAlchemyError as exc:
                raise ServiceUnavailable(f"conversation store failed: {exc}") from exc

    async def _append(
        self,
        conn: AsyncConnection,
        cid: str,
        turns: Sequence[StoredTurn],
        tenant: str,
        user: str | None,
        request_id: str | None,
    ) -> None:
        await self._owned(conn, cid, tenant, user)
        t = self.turns
        if request_id is not None:
            seen = await conn.scalar(
                select(func.count()).where(t.c.conversation_id == cid, t.c.request_id == request_id)
            )
            if seen:
                return
        last = await conn.scalar(select(func.max(t.c.seq)).where(t.c.conversation_id == cid))
        start = (last if last is not None else -1) + 1
        now = time.time()
        rows: list[dict[str, Any]] = [
            {
                "conversation_id": cid,
                "seq": start + i,
                "role": turn.role,
                "content": turn.content,
                "request_id": request_id,
                "created_at": now,
            }
            for i, turn in enumerate(turns)
        ]
        if rows:
            await conn.execute(insert(t), rows)
        if self.max_turns is not None:
            keep_from = start + len(rows) - self.max_turns
            await conn.execute(delete(t).where(t.c.conversation_id == cid, t.c.seq < keep_from))

    async def history(
        self,
        conversation_id: str,
        *,
        tenant: str,
        user: str | None = None,
        limit: int | None = None,
    ) -> list[StoredTurn]:
        t = self.turns
        query = select(t.c.role, t.c.content).where(t.c.conversation_id == conversation_id)
        query = query.order_by(t.c.seq.desc())
        if limit is not None:
            query = query.limit(limit)
        try:
            async with self._engine.connect() as conn:
                await self._owned(conn, conversation_id, tenant, user)
                rows = (await conn.execute(query)).all()
        except SQLAlchemyError as exc:
            raise ServiceUnavailable(f"conversation store failed: {exc}") from exc
        return [StoredTurn(str(role), content) for role, content in reversed(rows)]

    async def delete(self, conversation_id: str, *, tenant: str, user: str | None = None) -> None:
        try:
            async with self._engine.begin() as conn:
                await self._owned(conn, conversation_id, tenant, user)
                await conn.execute(
                    delete(self.turns).where(self.turns.c.conversation_id == conversation_id)
                )
                await conn.execute(
                    delete(self.conversations).where(self.conversations.c.id == conversation_id)
                )
        except SQLAlchemyError as exc:
            raise ServiceUnavailable(f"conversation store failed: {exc}") from exc
