"""Request ids name answers to clients (``x-request-id``, feedback): a caller's own ids must not
tell it a neighbour's, and ids stay unique across replicas and sort by when they were issued
(within a millisecond too, for one process: the feedback flywheel's "asked again" tie-break
orders two requests of the same millisecond by id)."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from fleetgate.core import RequestIds
from tests.conftest import AUTH, GatewayFactory, one_alias
from tests.fakes import FakeUpstream


def _random_part(rid: str) -> str:
    return rid[16:]  # after the milliseconds (12 hex digits) and the sequence (4)


def test_ids_are_unguessable_unique_and_sort_by_issue_time() -> None:
    now = [1_700_000_000.0]
    replicas = [RequestIds(clock=lambda: now[0]) for _ in range(2)]
    issued: list[str] = []
    for i in range(200):
        now[0] += 0.001 * (i % 2)  # two ids in each millisecond
        issued += [r.next() for r in replicas]
    assert len(set(issued)) == len(issued)  # unique across replicas
    assert sorted(issued, key=lambda rid: rid[:12]) == issued  # time first
    for replica in (issued[0::2], issued[1::2]):
        assert sorted(replica) == replica  # one process's ids sort in issue order
    for a, b in zip(issued, issued[1:], strict=False):
        ra, rb = _random_part(a), _random_part(b)
        # neither a successor nor a shared stem: the next id is not a step from one's own
        assert int(rb, 16) - int(ra, 16) not in range(-1024, 1025)
        assert ra[:6] != rb[:6]
    assert all(len(rid) == 32 and int(rid, 16) >= 0 for rid in issued)


async def test_a_callers_next_answer_is_not_a_step_from_its_last(
    gateway: GatewayFactory, upstream: FakeUpstream
) -> None:
    client = await gateway(one_alias(upstream))
    body: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    ids = []
    for _ in range(3):
        resp = await client.post("/v1/chat/completions", json=body, headers=AUTH)
        assert resp.status == 200
        ids.append(resp.headers["x-request-id"])
    for a, b in zip(ids, ids[1:], strict=False):
        assert _random_part(a)[:6] != _random_part(b)[:6]
        assert int(_random_part(b), 16) - int(_random_part(a), 16) not in range(-1024, 1025)


def test_ids_stay_unique_past_one_read_of_randomness_and_after_a_fork(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = RequestIds(clock=lambda: 1_700_000_000.0)
    issued = [_random_part(ids.next()) for _ in range(3 * 256 + 5)]  # several reads of the CSPRNG
    assert len(set(issued)) == len(issued)
    child = copy.copy(ids)  # what a fork would leave in the child: the same unused randomness
    monkeypatch.setattr(os, "getpid", lambda: -1)  # the child's pid: another process
    assert _random_part(child.next()) != _random_part(ids.next())  # the child read anew


def test_ids_of_one_millisecond_sort_in_issue_order_past_the_sequence() -> None:
    now = [1_700_000_000.0]
    ids = RequestIds(clock=lambda: now[0])
    issued = [ids.next() for _ in range(0x10000 + 10)]  # more than one millisecond's sequence
    assert sorted(issued) == issued and len(set(issued)) == len(issued)
    now[0] -= 5.0  # the clock steps back: later ids still sort after the earlier ones
    assert ids.next() > issued[-1]
