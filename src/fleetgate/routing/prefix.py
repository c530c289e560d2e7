"""Which prompt prefixes each engine has recently seen: the router's model of its prefix cache.

A prompt is cut into blocks from its start and each block is hashed *chained* to the one before
it (as vLLM does), rooted in a namespace (the tenant, or ``"public"``): two prompts share their
first ``n`` block hashes exactly when they share their first ``n`` blocks and their namespace.
Blocks are either characters of the rendered prompt text (approximate: ``block_chars``, about
4 characters a token; roles and contents only, never the raw JSON, so sampling parameters or
the model name never break a match) or token ids from the engine's own tokenizer (exact).

`PrefixIndex` keeps, per engine, the block hashes of prompts recently routed there in one LRU,
bounded by the engine's own cache size (in index blocks) once its metrics told us, so it forgets
roughly when the engine evicts.

Example::

    hashes = text_block_hashes(prompt, namespace="team-a", block_chars=256)
    index.match("http://10.0.0.5:8000", hashes)     # leading blocks that engine holds
    index.record("http://10.0.0.5:8000", hashes)    # we are sending them there now
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from hashlib import blake2b

__all__ = ["PrefixIndex", "chain_block_hash", "text_block_hashes", "token_block_hashes"]


def _root(namespace: str) -> bytes:
    return blake2b(namespace.encode(), digest_size=8, person=b"fg-prefix").digest()


def _chain(chunks: Sequence[bytes], namespace: str) -> list[int]:
    parent = _root(namespace)
    out: list[int] = []
    for chunk in chunks:
        parent = blake2b(parent + chunk, digest_size=8).digest()
        out.append(int.from_bytes(parent, "little"))
    return out


def _token_bytes(ids: Sequence[int]) -> bytes:
    return b"".join(i.to_bytes(4, "little", signed=False) for i in ids)


def chain_block_hash(parent: int | None, ids: Sequence[int], namespace: str) -> int:
    """The hash of block ``ids`` after the block hashed ``parent`` (None: the first block):
    one step of `token_block_hashes`, for indexes built block by block (KV events)."""
    base = _root(namespace) if parent is None else parent.to_bytes(8, "little")
    return int.from_bytes(blake2b(base + _token_bytes(ids), digest_size=8).digest(), "little")


def text_block_hashes(text: str, namespace: str, block_chars: int) -> list[int]:
    """Chained hashes of the full ``block_chars``-character blocks of ``text``."""
    data = text.encode()
    size = max(1, block_chars)
    return _chain([data[i : i + size] for i in range(0, len(data) - size + 1, size)], namespace)


def token_block_hashes(ids: Sequence[int], namespace: str, block_tokens: int) -> list[int]:
    """Chained hashes of the full ``block_tokens``-token blocks of ``ids``."""
    size = max(1, block_tokens)
    chunks = [_token_bytes(ids[s : s + size]) for s in range(0, len(ids) - size + 1, size)]
    return _chain(chunks, namespace)


@dataclass(slots=True)
class _EngineBlocks:
    capacity: int
    blocks: OrderedDict[int, None] = field(default_factory=OrderedDict)


class PrefixIndex:
    """Per engine, an LRU set of block hashes; ``default_capacity`` until told the real size."""

    def __init__(self, default_capacity: int = 16384) -> None:
        self.default_capacity = max(1, default_capacity)
        self._engines: dict[str, _EngineBlocks] = {}

    def _engine(self, key: str) -> _EngineBlocks:
        engine = self._engines.get(key)
        if engine is None:
            engine = self._engines[key] = _EngineBlocks(self.default_capacity)
        return engine

    def set_capacity(self, key: str, blocks: int) -> None:
        """Bound engine ``key`` to ``blocks`` index blocks (evicting the oldest beyond it)."""
        engine = self._engine(key)
        engine.capacity = max(1, blocks)
        self._evict(engine)

    def capacity(self, key: str) -> int:
        engine = self._engines.get(key)
        return self.default_capacity if engine is None else engine.capacity

    def match(self, key: str, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` engine ``key`` was recently sent."""
        engine = self._engines.get(key)
        if engine is None:
            return 0
        blocks = engine.blocks
        n = 0
        for h in hashes:
            if h not in blocks:
                break
            n += 1
        return n

    def record(self, key: str, hashes: Sequence[int]) -> None:
        """Mark ``hashes`` as sent to ``key`` now.

        The leading blocks become the most recently used, so the tail of a prompt is forgotten
        before its shared head (vLLM, too, evicts a request's tail blocks first).
        """
        if not hashes:
            return
        engine = self._engine(key)
        blocks = engine.blocks
        for h in reversed(hashes):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        self._evict(engine)

    def size(self, key: str) -> int:
        engine = self._engines.get(key)
        return 0 if engine is None else len(engine.blocks)

    def forget(self, key: str) -> None:
        """Drop everything known about ``key`` (the engine restarted or left the config)."""
        self._engines.pop(key, None)

    def keys(self) -> list[str]:
        return list(self._engines)

    @staticmethod
    def _evict(engine: _EngineBlocks) -> None:
        blocks = engine.blocks
        while len(blocks) > engine.capacity:
            blocks.popitem(last=False)
