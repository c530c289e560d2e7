"""The load runner: open loop on an absolute schedule, or closed loop at a fixed concurrency.

Open loop: request ``i`` is due at ``start + offsets[i]`` (perf_counter seconds). The sender
sleeps while the next send is more than 1.5 ms away, then yields to the event loop
(``sleep(0)``, which still serves responses) until it is due, so sends are neither late by a
timer tick nor delayed by responses. Every request records its intended and actual send time.

Every run is bounded: at most ``len(offsets)`` requests, none sent after ``duration``, and
requests still running ``drain_s`` after that are cancelled and counted as failed. A run whose
first ``fail_fast`` answers all failed (a wrong key, a model the target does not serve, a
target that is down) sends nothing more: `FailFast`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from fleetgate.bench.client import BenchClient, Target, build_body, send_request
from fleetgate.bench.progress import NullProgress, ProgressSink
from fleetgate.bench.spec import RequestRecord, RequestSpec

__all__ = ["FAIL_FAST", "FailFast", "RunOutcome", "run_closed_loop", "run_open_loop", "run_sync"]

_SLEEP_MARGIN = 0.0015
_T = TypeVar("_T")


FAIL_FAST = 20  # answers, all failed, after which a run stops sending


class FailFast:
    """Trips once ``threshold`` requests have finished and none succeeded (None: never)."""

    __slots__ = ("failed", "succeeded", "threshold")

    def __init__(self, threshold: int | None = FAIL_FAST) -> None:
        self.threshold = threshold
        self.failed = 0
        self.succeeded = 0

    def observe(self, rec: RequestRecord) -> None:
        if rec.success:
            self.succeeded += 1
        else:
            self.failed += 1

    @property
    def tripped(self) -> bool:
        return self.threshold is not None and self.succeeded == 0 and self.failed >= self.threshold


@dataclass
class RunOutcome:
    """Records of every request sent, and the wall time from start to the last completion."""

    records: list[RequestRecord]
    duration: float


def run_sync(factory: Callable[[], Awaitable[_T]]) -> _T:
    """Run a coroutine on uvloop when it is installed (the plain asyncio loop otherwise)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(_wrap(factory))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_wrap(factory))


async def _wrap(factory: Callable[[], Awaitable[_T]]) -> _T:
    return await factory()


def _client(target: Target, connections: int) -> BenchClient:
    # 10,000 and more means "no cap": every request in flight gets its own connection.
    return BenchClient(target.timeout_s, connections if connections < 10_000 else None)


async def _wait_until(due: float) -> None:
    while True:
        wait = due - time.perf_counter()
        if wait <= 0:
            return
        await asyncio.sleep(wait - _SLEEP_MARGIN if wait > 2 * _SLEEP_MARGIN else 0)


async def run_open_loop(
    target: Target,
    specs: Sequence[RequestSpec],
    offsets: Sequence[float],
    *,
    duration: float | None = None,
    start: float | None = None,
    indices: Sequence[int] | None = None,
    drain_s: float = 30.0,
    connections: int = 10_000,
    progress: ProgressSink | None = None,
    fail_fast: int | None = FAIL_FAST,
) -> RunOutcome:
    """Send ``specs[k]`` at ``start + offsets[k]`` for each k in ``indices`` (default: all).

    ``start`` is a ``time.perf_counter`` value (several processes may share it); default now +
    20 ms. Records carry times relative to ``start`` and the request's global index ``k``.
    """
    ks = list(range(len(offsets))) if indices is None else list(indices)
    bodies = [build_body(specs[k], target) for k in ks]
    headers, url = target.headers(), target.url
    sink = progress or NullProgress()
    records: list[RequestRecord] = []
    pending: set[asyncio.Task[None]] = set()
    async with _client(target, connections) as session:
        t0 = time.perf_counter() + 0.02 if start is None else start
        limit = float("inf") if duration is None else duration

        guard = FailFast(fail_fast)

        def finished(rec: RequestRecord, task: asyncio.Task[None]) -> None:
            pending.discard(task)
            guard.observe(rec)
            sink.update(rec.success)

        for j, k in enumerate(ks):
            due = offsets[k]
            if due >= limit or guard.tripped:
                break
            await _wait_until(t0 + due)
            rec = RequestRecord(k, due, stream=specs[k].stream, prompt_tokens=specs[k].input_len)
            records.append(rec)
            task = asyncio.create_task(send_request(session, url, headers, bodies[j], rec, t0))
            pending.add(task)
            task.add_done_callback(functools.partial(finished, rec))
        await _drain(pending, records, t0, limit, drain_s)
        end = time.perf_counter() - t0
    return RunOutcome(records, end)


async def _drain(
    pending: set[asyncio.Task[None]],
    records: list[RequestRecord],
    t0: float,
    limit: float,
    drain_s: float,
) -> None:
    if not pending:
        return
    deadline = (t0 + limit + drain_s) if limit != float("inf") else None
    timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
    _, late = await asyncio.wait(set(pending), timeout=timeout)
    for task in late:
        task.cancel()
    if late:
        await asyncio.wait(late)
        for rec in records:
            if not rec.success and not rec.error and rec.status in (0, 200):
                rec.error = "cancelled: still running when the run's time was up"


async def run_closed_loop(
    target: Target,
    specs: Sequence[RequestSpec],
    concurrency: int,
    *,
    duration: float | None = None,
    drain_s: float = 30.0,
    progress: ProgressSink | None = None,
    fail_fast: int | None = FAIL_FAST,
) -> RunOutcome:
    """``concurrency`` users each send the next request as soon as their last one finished,
    until every spec was sent or ``duration`` passed. A request's intended time is the moment
    its user became free, so schedule lag here only measures the client's own delay."""
    bodies = [build_body(s, target) for s in specs]
    headers, url = target.headers(), target.url
    sink = progress or NullProgress()
    records: list[RequestRecord] = []
    limit = float("inf") if duration is None else duration
    counter = iter(range(len(specs)))
    guard = FailFast(fail_fast)
    async with _client(target, max(concurrency, 1)) as session:
        t0 = time.perf_counter()

        async def user() -> None:
            for k in counter:
                now = time.perf_counter() - t0
                if now >= limit or guard.tripped:
                    return
                rec = RequestRecord(
                    k, now, stream=specs[k].stream, prompt_tokens=specs[k].input_len
                )
                records.append(rec)
                await send_request(session, url, headers, bodies[k], rec, t0)
                guard.observe(rec)
                sink.update(rec.success)

        users = {asyncio.create_task(user()) for _ in range(max(concurrency, 1))}
        await _drain(users, records, t0, limit, drain_s)
        end = time.perf_counter() - t0
    return RunOutcome(records, end)
