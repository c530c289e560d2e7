"""The batch lane leaves headroom for interactive requests in a small pool (#33).

A pool of 4 slots (the engine's too) and a batch lane of ``concurrency: 4``: its lines are
whole responses that nothing preempts, so without headroom they fill the pool and an
interactive request arriving meanwhile queues behind them (up to a line's length). With the
default ``scheduling.batch_headroom`` (a quarter of the limit, at least one slot) the lane
holds at most 3 and an interactive request starts at once: it never queues in the gateway
and its first token comes well within a line's length.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from fleetgate.api.state import GATEWAY
from fleetgate.scheduling.ports import SCHEDULER
from fleetgate.sim import SimConfig, running_sim
from tests.batches.support import config, finished, jsonl, running_gateway

pytestmark = pytest.mark.slow

SLOTS = 4
DECODE_MS = 25.0
LINE_TOKENS = 60  # a line lasts about LINE_S
LINE_S = LINE_TOKENS * DECODE_MS / 1000
LINES = 12
PROBES = 8
QUEUED_AT_ONCE_S = 0.03  # admitted by the drain right after it queued (no slot to wait for)


def _line(i: int) -> dict[str, Any]:
    return {
        "custom_id": f"l-{i}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "tiny", "messages": [{"role": "user", "content": "go"}],
                 "max_tokens": LINE_TOKENS, "ignore_eos": True},
    }  # fmt: skip


async def _probe(client: Any) -> tuple[float, float]:
    """One interactive stream: (time to its first token, seconds queued in the gateway)."""
    sent = time.monotonic()
    raw = await client.chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True
    )
    queued = float(raw.headers.get("x-fleetgate-queue-ms") or 0) / 1000
    ttft = None
    async for chunk in raw.parse():
        if ttft is None and chunk.choices and chunk.choices[0].delta.content:
            ttft = time.monotonic() - sent
    assert ttft is not None
    return ttft, queued


async def _run(tmp: Path, headroom: float | None) -> tuple[list[tuple[float, float]], int]:
    """The probes' (TTFT, queue wait) while a batch runs, and the most lines held at once."""
    sim = SimConfig(mode="random", max_num_seqs=SLOTS, decode_ms_per_step=DECODE_MS)
    async with running_sim(sim) as url:
        cfg = config(url, {"concurrency": SLOTS, "idle_wait_s": 0.01}, max_num_seqs=SLOTS)
        if headroom is not None:
            cfg["scheduling"] = {"batch_headroom": headroom}
        async with running_gateway(cfg, tmp) as gw:
            scheduler = gw.app[GATEWAY].core.ports.require(SCHEDULER)
            assert scheduler is not None
            batch_client = gw.client(await gw.team_key("etl"))
            probe_client = gw.client(await gw.team_key("chat"))
            upload = await batch_client.files.create(
                file=("in.jsonl", jsonl([_line(i) for i in range(LINES)])), purpose="batch"
            )
            batch = await batch_client.batches.create(
                input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            pool = scheduler.pool("tiny")
            assert pool is not None
            held = probing = 0

            async def watch() -> None:
                nonlocal held
                while True:
                    held = max(held, pool.admitted - probing)
                    await asyncio.sleep(0.005)

            watcher = asyncio.ensure_future(watch())
            try:
                deadline = time.monotonic() + 20
                while pool.admitted < SLOTS - 1 and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)  # the lane is running
                probes = []
                for _ in range(PROBES):
                    probing = 1  # (an upper bound: the lines' count is then one too low)
                    probes.append(await _probe(probe_client))
                    probing = 0
                    await asyncio.sleep(LINE_S / 4)
                done = await finished(batch_client, batch.id, timeout_s=60)
                assert done.status == "completed"
                assert done.request_counts is not None
                assert done.request_counts.completed == LINES
            finally:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
    return probes, held


async def test_interactive_requests_do_not_queue_behind_batch_lines_in_a_small_pool(
    tmp_path: Path,
) -> None:
    probes, held = await _run(tmp_path / "default", None)
    print(f"default headroom: lines held at most {held}; probes (TTFT, queued s) {probes}")
    assert held <= SLOTS - 1  # the limit less the headroom's one slot
    # A probe may pass through the queue (a line queued there keeps the fast path shut) but
    # starts at once: no slot to wait for.
    assert max(queued for _, queued in probes) < QUEUED_AT_ONCE_S, probes
    assert max(ttft for ttft, _ in probes) < LINE_S / 2, probes
    # Without the headroom (the previous default) the lane fills the pool and the probes
    # wait for its lines to end: what the default prevents.
    before, held_before = await _run(tmp_path / "none", 0.0)
    print(f"no headroom: lines held at most {held_before}; probes {before}")
    assert held_before == SLOTS
    assert max(queued for _, queued in before) >= QUEUED_AT_ONCE_S, before
