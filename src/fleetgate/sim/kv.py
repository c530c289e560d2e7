"""Paged KV cache with automatic prefix caching, modelled on vLLM's block manager.

The cache has ``num_blocks`` blocks of ``block_size`` tokens. A full block of prompt tokens is
identified by a chained hash ``hash((parent_hash, block_tokens))`` whose root is derived from
the request's ``cache_salt`` -- so two tenants with different salts never share blocks, exactly
like vLLM. Blocks are reference counted; a block whose count drops to 0 keeps its hash and
stays reusable (a prefix-cache hit) until it is evicted, least recently freed first.

Example::

    kv = BlockManager(num_blocks=64, block_size=16)
    hashes = kv.block_hashes(prompt_ids, salt=None)
    hits = kv.find_cached(hashes, len(prompt_ids))
    blocks = kv.allocate(hits, total_blocks=len(hashes) + 1)   # None when out of blocks
    ...
    kv.release(blocks)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from hashlib import blake2b
from typing import Protocol

__all__ = ["BlockManager", "KvListener", "salt_root"]


class KvListener(Protocol):
    """Hears what the prefix cache gains and loses (the KV-event publisher, sim/kv_events.py)."""

    def stored(
        self, block_hash: int, parent: int | None, tokens: Sequence[int], salt: str | None
    ) -> None: ...

    def removed(self, block_hash: int) -> None: ...

    def cleared(self) -> None: ...


def salt_root(salt: str | None) -> int:
    """The root of a hash chain: 0 without salt, else a stable hash of the salt."""
    if not salt:
        return 0
    return int.from_bytes(blake2b(salt.encode(), digest_size=8).digest(), "little") | 1


class BlockManager:
    """Allocates KV blocks, tracks reference counts and the prefix cache, evicts LRU."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}
        # Blocks with refcount 0, least recently freed first: the eviction order.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.evictions = 0
        self.listener: KvListener | None = None

    @property
    def num_free(self) -> int:
        """Blocks not used by any running request (cached-but-idle blocks included)."""
        return len(self._free)

    @property
    def num_cached(self) -> int:
        """Blocks currently holding a reusable prefix."""
        return len(self._cached)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use by requests, 0..1 (vLLM's ``kv_cache_usage_perc``)."""
        return 1.0 - len(self._free) / self.num_blocks

    def block_hashes(self, tokens: Sequence[int], salt: str | None = None) -> list[int]:
        """Chained hashes of the full blocks of ``tokens``."""
        size = self.block_size
        parent = salt_root(salt)
        out: list[int] = []
        for start in range(0, len(tokens) - size + 1, size):
            parent = hash((parent, tuple(tokens[start : start + size])))
            out.append(parent)
        return out

    def find_cached(self, hashes: Sequence[int], num_tokens: int) -> list[int]:
        """Block ids of the longest cached prefix of ``hashes``.

        At least one prompt token must still be computed (it yields the first output token), so
        a prompt that is entirely cached hits at most ``(num_tokens - 1) // block_size`` blocks.
        """
        limit = min(len(hashes), max(0, num_tokens - 1) // self.block_size)
        hits: list[int] = []
        cached = self._cached
        for h in hashes[:limit]:
            block = cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def can_allocate(self, hits: Sequence[int], total_blocks: int) -> bool:
        """Whether ``total_blocks`` fit when ``hits`` are reused."""
        idle_hits = sum(1 for b in hits if self._ref[b] == 0)
        return total_blocks - len(hits) <= len(self._free) - idle_hits

    def allocate(self, hits: Sequence[int], total_blocks: int) -> list[int] | None:
        """Take the ``hits`` and enough new blocks for ``total_blocks``; None if they don't fit."""
        if not self.can_allocate(hits, total_blocks):
            return None
        for b in hits:
            if self._ref[b] == 0:
                del self._free[b]
            self._ref[b] += 1
        blocks = list(hits)
        blocks.extend(self._take() for _ in range(total_blocks - len(hits)))
        return blocks

    def grow(self, blocks: list[int]) -> bool:
        """Append one new block to ``blocks``; False when the cache is full."""
        if not self._free:
            return False
        blocks.append(self._take())
        return True

    def _take(self) -> int:
        block, _ = self._free.popitem(last=False)
        h = self._hash[block]
        if h is not None:
            if self._cached.get(h) == block:
                del self._cached[h]
                self.evictions += 1
                if self.listener is not None:
                    self.listener.removed(h)
            self._hash[block] = None
        self._ref[block] = 1
        return block

    def commit(
        self,
        block: int,
        block_hash: int,
        *,
        tokens: Sequence[int] = (),
        parent: int | None = None,
        salt: str | None = None,
    ) -> None:
        """Mark a block as holding the full prefix ``block_hash`` (reusable by later requests).

        ``tokens`` (the block's), ``parent`` (the previous block's hash, None for the first)
        and ``salt`` are what the listener publishes about it.
        """
        if self._hash[block] is None and block_hash not in self._cached:
            self._hash[block] = block_hash
            self._cached[block_hash] = block
            if self.listener is not None:
                self.listener.stored(block_hash, parent, tokens, salt)

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each block; tail blocks become the first eviction candidates."""
        ref = self._ref
        free = self._free
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None

    def reset(self) -> None:
        """Forget every cached prefix (blocks in use keep their contents)."""
        for h, block in list(self._cached.items()):
            del self._cached[h]
            self._hash[block] = None
        if self.listener is not None:
            self.listener.cleared()
