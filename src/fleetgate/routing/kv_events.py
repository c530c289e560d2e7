"""What each engine reports it holds: a block index built from vLLM's KV-cache events.

vLLM (``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", ...}'``)
publishes every change of its prefix cache as msgpack-encoded msgspec structs:

- an ``EventBatch``: ``[ts, [event, ...], data_parallel_rank]`` (``array_like``; vLLM releases
  since late 2025 also send it as a map ``{"ts": .., "events": [..], ...}``; both decode here),
- tagged events (``tag=True``: the class name is the first array element, or the ``"type"`` key
  of a map): ``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
  medium, lora_name?, extra_keys?, ...]``, ``["BlockRemoved", block_hashes, medium, ...]``,
  ``["AllBlocksCleared"]``.

The engine's block hashes are its own (sha256 of its hash chain, salt and extra keys included),
so rather than re-implement them the index maps each engine hash to the *gateway's* chain hash
of the same block, computed from the event's ``token_ids`` and its parent's chain hash (the
token-block hashing of `fleetgate.routing.prefix`), rooted in the request's ``cache_salt`` when
the event carries it in the first block's extra keys. A prompt is then looked up with the
gateway's own hashes of its token ids (`EventBlockIndex.match`).

Trust: an index is *trusted* only while it is known to be complete. It starts trusted when the
stream is read from sequence 0 (a fresh engine, or a replay from 0) or the engine's replay
buffer is empty (it has published nothing, so it holds nothing), and loses trust on a
sequence gap that a replay cannot fill, or an engine restart seen mid-stream; it is trusted
again after ``resync_s`` seconds of unbroken events (what was stored before the gap has then
mostly been reused, and so re-announced, or evicted). While untrusted the kv-aware scorer uses
the gateway's own `PrefixIndex` instead. ``AllBlocksCleared`` empties the index and keeps it
trusted: an empty cache is known exactly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetgate.routing.prefix import chain_block_hash, token_block_hashes

__all__ = [
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "EngineBlocks",
    "EventBlockIndex",
    "KvEvent",
    "WireError",
    "decode_batch",
    "salt_namespace",
]


class WireError(ValueError):
    """A payload that is not a KV-event batch."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: list[Hashable]
    parent_block_hash: Hashable | None
    token_ids: list[int]
    block_size: int
    salt: str | None = None  # the cache_salt in the first block's extra keys, if any


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: list[Hashable]


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


def _hash_value(value: Any) -> Hashable:
    if isinstance(value, int | bytes):
        return value
    raise WireError(f"block hash must be an int or bytes, got {type(value).__name__}")


def _salt_of(extra_keys: Any, parent: Any) -> str | None:
    """vLLM appends ``cache_salt`` to the extra keys of a request's first block (only)."""
    if parent is not None or not isinstance(extra_keys, list) or not extra_keys:
        return None
    first = extra_keys[0]
    if isinstance(first, list) and first and isinstance(first[-1], str):
        return str(first[-1])
    return None


def _fields(raw: Any, names: Sequence[str]) -> tuple[str, list[Any]]:
    """(tag, positional fields) of an array-like or map-encoded tagged struct."""
    if isinstance(raw, list) and raw and isinstance(raw[0], str):
        values = list(raw[1:])
        return raw[0], values + [None] * (len(names) - len(values))
    if isinstance(raw, dict) and isinstance(raw.get("type"), str):
        return raw["type"], [raw.get(n) for n in names]
    raise WireError("an event must be a tagged array or map")


_STORED = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium")
_STORED_ALL = (*_STORED, "lora_name", "extra_keys")


def _event(raw: Any) -> KvEvent | None:
    tag, values = _fields(raw, _STORED_ALL)
    if tag == "BlockStored":
        hashes, parent, tokens, size = values[0], values[1], values[2], values[3]
        if not isinstance(hashes, list) or not isinstance(tokens, list):
            raise WireError("BlockStored needs block_hashes and token_ids lists")
        if not isinstance(size, int) or size < 1 or len(tokens) != size * len(hashes):
            raise WireError("BlockStored token_ids must be block_size tokens per block")
        return BlockStored(
            [_hash_value(h) for h in hashes],
            None if parent is None else _hash_value(parent),
            [int(t) for t in tokens],
            size,
            _salt_of(values[7], parent),
        )
    if tag == "BlockRemoved":
        hashes = values[0]
        if not isinstance(hashes, list):
            raise WireError("BlockRemoved needs block_hashes")
        return BlockRemoved([_hash_value(h) for h in hashes])
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    return None  # an event kind this gateway does not know: skipped, as vLLM adds kinds


def decode_batch(payload: bytes) -> tuple[float, list[KvEvent]]:
    """(timestamp, events) of one msgpack ``EventBatch``; raises `WireError`."""
    import msgpack  # the ``kv-events`` extra; imported by the subscriber only

    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise WireError(f"not msgpack: {exc}") from exc
    if isinstance(raw, list) and len(raw) >= 2:
        ts, events = raw[0], raw[1]
    elif isinstance(raw, dict):
        ts, events = raw.get("ts"), raw.get("events")
    else:
        raise WireError("an event batch must be [ts, events, ...] or a map")
    if not isinstance(ts, int | float) or not isinstance(events, list):
        raise WireError("an event batch needs a numeric ts and a list of events")
    out = [e for e in (_event(r) for r in events) if e is not None]
    return float(ts), out


def salt_namespace(salt: str | None) -> str:
    """The chain root of blocks stored under ``salt`` (none: the engine's unsalted root)."""
    return f"kv-salt:{salt}" if salt else "kv-salt:"


@dataclass(slots=True)
class EngineBlocks:
    """One engine's reported blocks, in the gateway's chain hashes."""

    by_engine: dict[Hashable, int] = field(default_factory=dict)  # engine hash -> ours
    held: dict[int, int] = field(default_factory=dict)  # our hash -> engine blocks with it
    block_size: int | None = None
    last_seq: int = -1
    started: bool = False  # the stream's start is known (a batch applied, or an empty replay)
    trusted: bool = False
    trusted_from: float = 0.0  # when an untrusted index becomes trusted again (monotonic)
    orphans: int = 0  # stored blocks whose parent was never seen (stored before we listened)

    def clear(self) -> None:
        self.by_engine.clear()
        self.held.clear()


class EventBlockIndex:
    """Per engine, the blocks its KV events say it holds; see the module docstring.

    Example::

        index = EventBlockIndex(resync_s=30.0)
        index.apply_batch("http://10.0.0.5:8000", seq, events)
        if index.trusted("http://10.0.0.5:8000"):
            tokens = index.match("http://10.0.0.5:8000", prompt_ids, salt=None)
    """

    def __init__(self, resync_s: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.resync_s = resync_s
        self._clock = clock
        self._engines: dict[str, EngineBlocks] = {}
        self.batches = 0
        self.gaps = 0
        self.decode_errors = 0

    def engine(self, key: str) -> EngineBlocks:
        blocks = self._engines.get(key)
        if blocks is None:
            blocks = self._engines[key] = EngineBlocks()
        return blocks

    def keys(self) -> list[str]:
        return list(self._engines)

    def forget(self, key: str) -> None:
        self._engines.pop(key, None)

    # ---------------------------------------------------------------- stream state

    def expects(self, key: str) -> int:
        """The next sequence number engine ``key`` should send."""
        return self.engine(key).last_seq + 1

    def distrust(self, key: str, *, clear: bool) -> None:
        """A gap nothing filled: fall back to the gateway's index for ``resync_s``."""
        blocks = self.engine(key)
        if clear:
            blocks.clear()
        blocks.trusted = False
        blocks.trusted_from = self._clock() + self.resync_s

    def start_empty(self, key: str) -> None:
        """The engine's replay buffer is empty: it has published nothing, so holds nothing."""
        blocks = self.engine(key)
        if not blocks.started:
            blocks.started = blocks.trusted = True

    def trusted(self, key: str) -> bool:
        blocks = self._engines.get(key)
        if blocks is None or not blocks.started:
            return False
        if not blocks.trusted and self._clock() >= blocks.trusted_from:
            blocks.trusted = True
        return blocks.trusted

    def apply_batch(self, key: str, seq: int, events: Sequence[KvEvent]) -> bool:
        """Apply batch ``seq`` of engine ``key``; False (nothing applied) for a gap.

        The first batch ever seen starts the stream: at sequence 0 the index is complete and
        trusted, later it waits ``resync_s`` for trust. (A restarted engine counts from 0
        again: the subscriber calls `forget` when the sequence goes back.)
        """
        blocks = self.engine(key)
        if blocks.last_seq >= 0 and seq <= blocks.last_seq:
            return True  # already applied (a replay overlapping the stream)
        if not blocks.started:
            blocks.started = True
            if seq == 0:
                blocks.trusted = True
            else:
                self.distrust(key, clear=True)
        elif seq != blocks.last_seq + 1:
            self.gaps += 1
            return False
        for event in events:
            self._apply(blocks, event)
        blocks.last_seq = seq
        self.batches += 1
        return True

    def skip_to(self, key: str, seq: int) -> None:
        """Give up on the batches before ``seq`` (lost): distrust and resume at ``seq``."""
        self.distrust(key, clear=True)
        blocks = self.engine(key)
        blocks.started = True
        blocks.last_seq = seq - 1

    @staticmethod
    def _apply(blocks: EngineBlocks, event: KvEvent) -> None:
        if isinstance(event, BlockStored):
            blocks.block_size = event.block_size
            if event.parent_block_hash is None:
                parent: int | None = None
            else:
                found = blocks.by_engine.get(event.parent_block_hash)
                if found is None:
                    blocks.orphans += len(event.block_hashes)
                    return
                parent = found
            namespace = salt_namespace(event.salt)
            size = event.block_size
            for i, engine_hash in enumerate(event.block_hashes):
                chunk = event.token_ids[i * size : (i + 1) * size]
                parent = chain_block_hash(parent, chunk, namespace)
                old = blocks.by_engine.get(engine_hash)
                if old == parent:
                    continue
                if old is not None:
                    EventBlockIndex._release(blocks, old)
                blocks.by_engine[engine_hash] = parent
                blocks.held[parent] = blocks.held.get(parent, 0) + 1
        elif isinstance(event, BlockRemoved):
            for engine_hash in event.block_hashes:
                ours = blocks.by_engine.pop(engine_hash, None)
                if ours is not None:
                    EventBlockIndex._release(blocks, ours)
        else:
            blocks.clear()

    @staticmethod
    def _release(blocks: EngineBlocks, ours: int) -> None:
        left = blocks.held.get(ours, 0) - 1
        if left > 0:
            blocks.held[ours] = left
        else:
            blocks.held.pop(ours, None)

    # ---------------------------------------------------------------- lookups

    def block_size(self, key: str) -> int | None:
        blocks = self._engines.get(key)
        return None if blocks is None else blocks.block_size

    def size(self, key: str) -> int:
        blocks = self._engines.get(key)
        return 0 if blocks is None else len(blocks.held)

    def match(self, key: str, ids: Sequence[int], salt: str | None) -> int:
        """Prompt tokens engine ``key`` reports holding as a prefix of ``ids`` (whole blocks)."""
        blocks = self._engines.get(key)
        if blocks is None or not blocks.block_size:
            return 0
        hashes = token_block_hashes(ids, salt_namespace(salt), blocks.block_size)
        n = 0
        for h in hashes:
            if h not in blocks.held:
                break
            n += 1
        return n * blocks.block_size
