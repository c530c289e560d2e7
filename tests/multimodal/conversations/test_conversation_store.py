import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from fleetgate.errors import InvalidRequest, NotFound
from fleetgate.multimodal.conversations.sql import SqlConversationStore
from fleetgate.multimodal.conversations.store import ConversationStore, StoredTurn

PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[SqlConversationStore]:
    if request.param == "sqlite":
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'conv.db'}")
        s = SqlConversationStore(engine)
        await s.create_tables()
        yield s
        await engine.dispose()
        return
    engine = create_async_engine(PG_URL)
    schema = f"mm_test_{uuid.uuid4().hex[:12]}"
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:  # noqa: BLE001 - any connection failure means "no PostgreSQL here"
        await engine.dispose()
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    try:
        s = SqlConversationStore(engine, schema=schema)
        await s.create_tables()
        yield s
    finally:
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await engine.dispose()


async def test_turns_come_back_in_order_and_tenant_scoped(store: SqlConversationStore) -> None:
    assert isinstance(store, ConversationStore)
    cid = await store.create(tenant="a", user="u1")
    await store.append(
        cid, [StoredTurn("user", "hi"), StoredTurn("assistant", "hello")], tenant="a"
    )
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    await store.append(cid, [StoredTurn("user", parts)], tenant="a")
    history = await store.history(cid, tenant="a")
    assert [t.role for t in history] == ["user", "assistant", "user"]
    assert history[2].content == parts and history[2].text() == "look"
    assert [t.content for t in await store.history(cid, tenant="a", limit=2)] == ["hello", parts]
    with pytest.raises(NotFound):
        await store.history(cid, tenant="b")
    with pytest.raises(NotFound):
        await store.append(cid, [StoredTurn("user", "sneaky")], tenant="b")


async def test_replayed_request_id_is_not_appended_twice(store: SqlConversationStore) -> None:
    cid = await store.create(tenant="a", conversation_id="conv-1")
    for _ in range(2):
        await store.append(
            cid,
            [StoredTurn("user", "q"), StoredTurn("assistant", "a")],
            tenant="a",
            request_id="r1",
        )
    await store.append(cid, [StoredTurn("user", "q2")], tenant="a", request_id="r2")
    assert [t.content for t in await store.history(cid, tenant="a")] == ["q", "a", "q2"]
    with pytest.raises(InvalidRequest, match="already exists"):
        await store.create(tenant="a", conversation_id="conv-1")


async def test_delete(store: SqlConversationStore) -> None:
    cid = await store.create(tenant="a")
    await store.append(cid, [StoredTurn("user", "x")], tenant="a")
    with pytest.raises(NotFound):
        await store.delete(cid, tenant="b")
    await store.delete(cid, tenant="a")
    with pytest.raises(NotFound):
        await store.history(cid, tenant="a")
