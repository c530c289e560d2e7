from fleetgate.sim.kv import BlockManager


def _prompt(n: int, offset: int = 0) -> list[int]:
    return [offset + i for i in range(n)]


def _run_prompt(kv: BlockManager, tokens: list[int], salt: str | None = None) -> list[int]:
    """Admit, 'compute' and finish one prompt; returns the hit block ids."""
    hashes = kv.block_hashes(tokens, salt)
    hits = kv.find_cached(hashes, len(tokens))
    blocks = kv.allocate(hits, len(tokens) // kv.block_size + 1)
    assert blocks is not None
    for i in range(len(hits), len(hashes)):
        kv.commit(blocks[i], hashes[i])
    kv.release(blocks)
    return hits


def test_repeated_prompt_hits_all_full_blocks_but_the_last_token() -> None:
    kv = BlockManager(num_blocks=32, block_size=4)
    tokens = _prompt(12)
    assert _run_prompt(kv, tokens) == []
    # 12 tokens = 3 full blocks, but one token must be computed: only 2 blocks may hit.
    assert len(_run_prompt(kv, tokens)) == 2
    longer = tokens + [99, 98, 97, 96, 95]
    assert len(_run_prompt(kv, longer)) == 3


def test_a_different_first_block_breaks_the_chain() -> None:
    kv = BlockManager(num_blocks=32, block_size=4)
    _run_prompt(kv, _prompt(16))
    changed = [1000] + _prompt(16)[1:]
    assert _run_prompt(kv, changed) == []


def test_cache_salt_is_a_separate_namespace() -> None:
    kv = BlockManager(num_blocks=32, block_size=4)
    tokens = _prompt(17)
    _run_prompt(kv, tokens, salt="tenant-a")
    assert _run_prompt(kv, tokens, salt="tenant-b") == []
    assert _run_prompt(kv, tokens) == []
    assert len(_run_prompt(kv, tokens, salt="tenant-a")) == 4


def test_lru_eviction_of_free_blocks() -> None:
    kv = BlockManager(num_blocks=8, block_size=4)
    a, b = _prompt(9, 0), _prompt(9, 500)  # 2 full blocks each, 3 blocks allocated
    _run_prompt(kv, a)
    _run_prompt(kv, b)
    assert kv.num_cached == 4 and kv.usage == 0.0
    # Touch "a" again so "b" is now the least recently used prefix.
    assert len(_run_prompt(kv, a)) == 2
    # A big request takes 6 blocks: the 2 never-cached ones and 4 evicted ones, b's first.
    big = kv.allocate([], 6)
    assert big is not None
    assert kv.find_cached(kv.block_hashes(b), len(b)) == []
    assert len(kv.find_cached(kv.block_hashes(a), len(a))) == 2
    kv.release(big)


def test_blocks_in_use_are_never_evicted_and_allocation_fails_when_full() -> None:
    kv = BlockManager(num_blocks=4, block_size=4)
    tokens = _prompt(9)
    hashes = kv.block_hashes(tokens)
    held = kv.allocate([], 3)
    assert held is not None
    kv.commit(held[0], hashes[0])
    kv.commit(held[1], hashes[1])
    assert kv.usage == 0.75
    assert kv.allocate([], 2) is None
    # Sharing the held prefix needs only one new block.
    hits = kv.find_cached(hashes, len(tokens))
    assert hits == held[:2]
    shared = kv.allocate(hits, 3)
    assert shared is not None and kv.usage == 1.0
    kv.release(shared)
    kv.release(held)
    assert kv.usage == 0.0 and kv.num_cached == 2


def test_reset_forgets_prefixes() -> None:
    kv = BlockManager(num_blocks=8, block_size=4)
    tokens = _prompt(9)
    _run_prompt(kv, tokens)
    kv.reset()
    assert _run_prompt(kv, tokens) == []
