"""The per-engine prefix index: chained hashes, tenant namespaces, LRU bounded by capacity."""

from __future__ import annotations

from fleetgate.routing.prefix import PrefixIndex, text_block_hashes, token_block_hashes

SYSTEM = "You are the support assistant of ACME. " * 40


def test_prompts_sharing_a_prefix_share_leading_hashes() -> None:
    a = text_block_hashes(SYSTEM + "How do I reset my password? " * 5, "t1", 64)
    b = text_block_hashes(SYSTEM + "Where is my invoice, please? " * 5, "t1", 64)
    shared = len(SYSTEM) // 64
    assert a[:shared] == b[:shared]
    assert a[shared:] != b[shared:]


def test_namespaces_never_share_blocks() -> None:
    a = text_block_hashes(SYSTEM, "tenant:a", 64)
    b = text_block_hashes(SYSTEM, "tenant:b", 64)
    assert not set(a) & set(b)


def test_match_counts_leading_blocks_recorded_on_that_engine() -> None:
    index = PrefixIndex()
    first = text_block_hashes(SYSTEM + "question one", "t", 64)
    index.record("e1", first)
    second = text_block_hashes(SYSTEM + "another question", "t", 64)
    assert index.match("e1", second) == len(SYSTEM) // 64
    assert index.match("e2", second) == 0


def test_capacity_forgets_the_oldest_prompts_tail_first() -> None:
    index = PrefixIndex()
    index.set_capacity("e1", 10)
    old = token_block_hashes(list(range(16 * 8)), "t", 16)  # 8 blocks
    new = token_block_hashes(list(range(1000, 1000 + 16 * 6)), "t", 16)  # 6 blocks
    index.record("e1", old)
    index.record("e1", new)
    assert index.size("e1") == 10
    assert index.match("e1", new) == 6
    # The old prompt lost its tail, not its head: its first 4 blocks still match.
    assert index.match("e1", old) == 4


def test_token_hashes_depend_on_every_token_of_the_block() -> None:
    a = token_block_hashes([1, 2, 3, 4, 5, 6, 7, 8], "t", 4)
    b = token_block_hashes([1, 2, 3, 4, 5, 6, 7, 9], "t", 4)
    assert len(a) == 2 and a[0] == b[0] and a[1] != b[1]
    assert token_block_hashes([1, 2, 3], "t", 4) == []
