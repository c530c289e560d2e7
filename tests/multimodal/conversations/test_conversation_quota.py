"""Conversation storage is bounded per owner: each conversation keeps its newest turns, each
owner its newest conversations, and one owner's churn never deletes another owner's."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.tenancy.support import STORES, migrated_database

from fleetgate.errors import NotFound
from fleetgate.multimodal.conversations.sql import SqlConversationStore
from fleetgate.multimodal.conversations.store import StoredTurn


@pytest.fixture(params=STORES)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[SqlConversationStore]:
    """A store keeping 4 turns a conversation and 3 conversations an owner."""
    async with migrated_database(request.param, tmp_path) as db:
        yield SqlConversationStore(db.engine, max_turns=4, max_conversations=3)


async def test_a_conversation_keeps_its_newest_turns(store: SqlConversationStore) -> None:
    cid = await store.create(tenant="t", user="user:a")
    for n in range(5):
        turns = [StoredTurn("user", f"q{n}"), StoredTurn("assistant", f"r{n}")]
        await store.append(cid, turns, tenant="t", user="user:a", request_id=f"req-{n}")
    history = await store.history(cid, tenant="t", user="user:a")
    assert [t.content for t in history] == ["q3", "r3", "q4", "r4"]
    # The turns kept still continue in order after more are added.
    await store.append(cid, [StoredTurn("user", "q5")], tenant="t", user="user:a")
    assert [t.content for t in await store.history(cid, tenant="t", user="user:a")] == [
        "r3", "q4", "r4", "q5",
    ]  # fmt: skip


async def test_one_owner_s_new_conversations_drop_its_own_oldest_never_another_s(
    store: SqlConversationStore,
) -> None:
    others = [
        await store.create(tenant="t", user="user:b", conversation_id="b-kept"),
        await store.create(tenant="t", user=None, conversation_id="team-kept"),
        await store.create(tenant="u", user="user:a", conversation_id="other-tenant-kept"),
    ]
    owners = [("t", "user:b"), ("t", None), ("u", "user:a")]
    for cid, (tenant, user) in zip(others, owners, strict=True):
        await store.append(cid, [StoredTurn("user", "mine")], tenant=tenant, user=user)
    made = []
    for n in range(10):  # user:a of tenant t starts ten conversations
        cid = await store.create(tenant="t", user="user:a", conversation_id=f"a-{n}")
        await store.append(cid, [StoredTurn("user", f"hi {n}")], tenant="t", user="user:a")
        made.append(cid)
    for cid in made[:-3]:
        with pytest.raises(NotFound):
            await store.history(cid, tenant="t", user="user:a")
    for cid in made[-3:]:
        assert len(await store.history(cid, tenant="t", user="user:a")) == 1
    for cid, (tenant, user) in zip(others, owners, strict=True):
        assert [t.content for t in await store.history(cid, tenant=tenant, user=user)] == ["mine"]
