"""The KV-event wire format (vLLM's msgspec structs) and the per-engine index built from it."""

from __future__ import annotations

import msgpack
import pytest

from fleetgate.routing.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBlockIndex,
    WireError,
    decode_batch,
    salt_namespace,
)
from fleetgate.routing.prefix import token_block_hashes

E = "http://engine-a:8000"
DOC = list(range(1000, 1064))  # 4 blocks of 16


def _stored(hashes, parent, tokens, salt=None):
    return BlockStored(list(hashes), parent, list(tokens), 16, salt)


def test_decodes_array_like_batches_as_vllm_sends_them() -> None:
    # msgspec array_like + tag=True: the tag first, fields in declaration order.
    payload = msgpack.packb([
        1700000000.5,
        [["BlockStored", [11, 12], None, DOC[:32], 16, None, "GPU"],
         ["BlockRemoved", [11], "GPU"],
         ["AllBlocksCleared"],
         ["SomeFutureEvent", 1, 2]],
        0,
    ])  # fmt: skip
    ts, events = decode_batch(payload)
    assert ts == 1700000000.5
    assert events == [_stored([11, 12], None, DOC[:32]), BlockRemoved([11]), AllBlocksCleared()]


def test_decodes_map_batches_and_the_salt_in_extra_keys() -> None:
    # Newer vLLM: no array_like (maps, "type" tag), bytes hashes, lora_name and extra_keys.
    payload = msgpack.packb({
        "ts": 2.0,
        "events": [{"type": "BlockStored", "block_hashes": [b"\x01" * 32, b"\x02" * 32],
                    "parent_block_hash": None, "token_ids": DOC[:32], "block_size": 16,
                    "lora_id": None, "medium": "GPU", "lora_name": None,
                    "extra_keys": [["salt-x"], None]}],
        "data_parallel_rank": 0,
    })  # fmt: skip
    _, events = decode_batch(payload)
    assert events == [_stored([b"\x01" * 32, b"\x02" * 32], None, DOC[:32], "salt-x")]


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # not msgpack
        msgpack.packb("text"),
        msgpack.packb([1.0, "no list"]),
        msgpack.packb([1.0, [["BlockStored", [1], None, [1, 2, 3], 16, None, None]]]),
        msgpack.packb([1.0, [["BlockRemoved", [1.5], None]]]),
        msgpack.packb([1.0, [[1, 2]]]),
    ],
)
def test_malformed_batches_raise_wire_errors(payload: bytes) -> None:
    with pytest.raises(WireError):
        decode_batch(payload)


def test_stored_blocks_are_indexed_in_the_gateways_token_hashes() -> None:
    index = EventBlockIndex()
    index.apply_batch(E, 0, [_stored([101, 102], None, DOC[:32])])
    index.apply_batch(E, 1, [_stored([103], 102, DOC[32:48])])  # chained on its parent
    assert index.trusted(E)
    assert index.match(E, DOC + [7, 8, 9], salt=None) == 48
    ours = token_block_hashes(DOC, salt_namespace(None), 16)
    assert set(index.engine(E).held) == set(ours[:3])
    # Another tenant's salt is another chain: nothing of it is held.
    assert index.match(E, DOC, salt="other") == 0
    # Removing the middle block ends the matching prefix there.
    index.apply_batch(E, 2, [BlockRemoved([102])])
    assert index.match(E, DOC, salt=None) == 16
    index.apply_batch(E, 3, [AllBlocksCleared()])
    assert index.match(E, DOC, salt=None) == 0 and index.size(E) == 0
    assert index.trusted(E)  # an empty cache is known exactly


def test_salted_chains_match_only_the_same_salt() -> None:
    index = EventBlockIndex()
    index.apply_batch(E, 0, [_stored([1, 2], None, DOC[:32], "s1")])
    assert index.match(E, DOC, salt="s1") == 32
    assert index.match(E, DOC, salt=None) == 0


def test_blocks_whose_parent_was_never_seen_are_not_guessed() -> None:
    index = EventBlockIndex()
    index.apply_batch(E, 0, [_stored([9], 8, DOC[16:32])])
    assert index.size(E) == 0 and index.engine(E).orphans == 1


def test_a_gap_distrusts_the_index_until_resync() -> None:
    now = [100.0]
    index = EventBlockIndex(resync_s=30.0, clock=lambda: now[0])
    index.apply_batch(E, 0, [_stored([1], None, DOC[:16])])
    assert index.apply_batch(E, 2, []) is False  # batch 1 is missing
    assert index.gaps == 1 and index.trusted(E)  # the subscriber decides (replay first)
    index.skip_to(E, 2)  # the replay failed
    assert not index.trusted(E) and index.size(E) == 0
    assert index.apply_batch(E, 2, [_stored([5], None, DOC[:16])])
    now[0] += 29.0
    assert not index.trusted(E)
    now[0] += 2.0
    assert index.trusted(E)
    assert index.match(E, DOC, None) == 16


def test_a_stream_joined_late_is_untrusted_and_duplicates_are_ignored() -> None:
    now = [0.0]
    index = EventBlockIndex(resync_s=5.0, clock=lambda: now[0])
    assert not index.trusted(E)  # nothing heard yet
    index.apply_batch(E, 7, [_stored([1], None, DOC[:16])])
    assert not index.trusted(E)
    assert index.apply_batch(E, 7, [BlockRemoved([1])])  # a replayed duplicate: no effect
    assert index.size(E) == 1
