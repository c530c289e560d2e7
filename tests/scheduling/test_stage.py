"""The scheduling stage's dispatch hooks: a claim that cut a stream is sent once it ended."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fleetgate.scheduling import stage
from fleetgate.scheduling.stage import _AfterCut
from tests.scheduling.support import FakeOutcome, policy, scheduler_with_pool


async def test_a_claim_is_sent_once_the_stream_it_cut_has_ended() -> None:
    scheduler, pool, _ = scheduler_with_pool(1)
    batch = policy("etl", "batch")
    assert scheduler.try_admit(pool, batch, 10)
    victim = scheduler.started(pool, batch, FakeOutcome(3), False, 10)
    sent = asyncio.Event()

    async def send() -> None:
        dep: Any = None
        async with _AfterCut(pool, victim).admit(dep):
            sent.set()

    task = asyncio.create_task(send())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not sent.is_set()  # the cut stream still holds its engine slot
    scheduler.finish(pool, victim, 3, 0.1)  # its relay closed the upstream request
    await asyncio.wait_for(task, 1)
    assert sent.is_set()
    # one already ended: nothing to wait for
    async with _AfterCut(pool, victim).admit(None):  # type: ignore[arg-type]
        pass


async def test_a_cut_stream_that_does_not_end_holds_the_claim_only_briefly(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(stage, "CUT_WAIT_S", 0.05)
    scheduler, pool, _ = scheduler_with_pool(1)
    batch = policy("etl", "batch")
    assert scheduler.try_admit(pool, batch, 10)
    stuck = scheduler.started(pool, batch, FakeOutcome(3), False, 10)
    began = time.monotonic()
    async with _AfterCut(pool, stuck).admit(None):  # type: ignore[arg-type]
        waited = time.monotonic() - began
    assert 0.04 <= waited < 1.0
    assert stuck.gone is not None and not stuck.gone.cancelled()  # shielded: still usable
    scheduler.finish(pool, stuck, 3, 0.1)
    assert stuck.gone.done()
