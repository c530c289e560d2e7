from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.tenancy.support import STORES, migrated_database

from fleetgate.errors import InvalidRequest, NotFound
from fleetgate.multimodal.conversations.sql import SqlConversationStore
from fleetgate.multimodal.conversations.store import ConversationStore, StoredTurn


@pytest.fixture(params=STORES)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[SqlConversationStore]:
    """The store on a freshly migrated database (its tables come from the migrations)."""
    async with migrated_database(request.param, tmp_path) as db:
        yield SqlConversationStore(db.engine)


async def test_turns_come_back_in_order_and_tenant_scoped(store: SqlConversationStore) -> None:
    assert isinstance(store, ConversationStore)
    cid = await store.create(tenant="a", user="u1")
    await store.append(
        cid, [StoredTurn("user", "hi"), StoredTurn("assistant", "hello")], tenant="a", user="u1"
    )
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    await store.append(cid, [StoredTurn("user", parts)], tenant="a", user="u1")
    history = await store.history(cid, tenant="a", user="u1")
    assert [t.role for t in history] == ["user", "assistant", "user"]
    assert history[2].content == parts and history[2].text() == "look"
    two = await store.history(cid, tenant="a", user="u1", limit=2)
    assert [t.content for t in two] == ["hello", parts]
    with pytest.raises(NotFound):
        await store.history(cid, tenant="b", user="u1")
    with pytest.raises(NotFound):
        await store.append(cid, [StoredTurn("user", "sneaky")], tenant="b", user="u1")


async def test_another_owner_of_the_tenant_is_told_not_found(
    store: SqlConversationStore,
) -> None:
    """The id alone opens nothing: reads, appends and deletes check the owner as well."""
    cid = await store.create(tenant="a", user="user:alice")
    await store.append(cid, [StoredTurn("user", "alice's secret")], tenant="a", user="user:alice")
    for other in ("user:mallory", None):  # another user, or the tenant's shared conversations
        with pytest.raises(NotFound):
            await store.history(cid, tenant="a", user=other)
        with pytest.raises(NotFound):
            await store.append(cid, [StoredTurn("user", "planted")], tenant="a", user=other)
        with pytest.raises(NotFound):
            await store.delete(cid, tenant="a", user=other)
    history = await store.history(cid, tenant="a", user="user:alice")
    assert [t.content for t in history] == ["alice's secret"]
    shared = await store.create(tenant="a")  # no owner: the tenant's
    assert await store.history(shared, tenant="a") == []
    with pytest.raises(NotFound):
        await store.history(shared, tenant="a", user="user:alice")


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
