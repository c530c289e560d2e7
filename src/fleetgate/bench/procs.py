"""Open-loop runs split over several client processes when one process cannot keep the rate.

Request ``k`` goes to process ``k % n``. The processes start (spawn), build their bodies and
sessions, wait at a barrier, then all read one shared start time, so the merged schedule is the
same absolute schedule a single process would follow.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections.abc import Sequence
from multiprocessing.synchronize import Barrier
from typing import Any

from fleetgate.bench.client import Target
from fleetgate.bench.runner import RunOutcome, run_open_loop, run_sync
from fleetgate.bench.spec import RequestRecord, RequestSpec
from fleetgate.errors import ServiceUnavailable

__all__ = ["run_open_loop_processes"]


def _child(
    target: Target,
    specs: list[RequestSpec],
    offsets: list[float],
    indices: list[int],
    duration: float | None,
    drain_s: float,
    ready: Barrier,
    start: Any,
    results: Any,
) -> None:
    async def main() -> RunOutcome:
        ready.wait()  # everyone (parent included) is up
        ready.wait()  # the parent has written the start time
        return await run_open_loop(
            target,
            specs,
            offsets,
            duration=duration,
            start=float(start.value),
            indices=indices,
            drain_s=drain_s,
        )

    outcome = run_sync(main)
    results.put((outcome.records, outcome.duration))


def run_open_loop_processes(
    target: Target,
    specs: Sequence[RequestSpec],
    offsets: Sequence[float],
    processes: int,
    *,
    duration: float | None = None,
    drain_s: float = 30.0,
    startup_timeout_s: float = 60.0,
) -> RunOutcome:
    """Run the schedule in ``processes`` spawned processes and merge their records."""
    ctx = mp.get_context("spawn")
    ready = ctx.Barrier(processes + 1)
    start = ctx.Value("d", 0.0)
    results: Any = ctx.Queue()
    spec_list, off_list = list(specs), list(offsets)
    procs = [
        ctx.Process(
            target=_child,
            args=(
                target,
                spec_list,
                off_list,
                list(range(i, len(off_list), processes)),
                duration,
                drain_s,
                ready,
                start,
                results,
            ),
            daemon=True,
        )
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    try:
        ready.wait(timeout=startup_timeout_s)
        start.value = time.perf_counter() + 0.05
        ready.wait(timeout=startup_timeout_s)
        records: list[RequestRecord] = []
        end = 0.0
        budget = (duration or 3600.0) + drain_s + startup_timeout_s
        for _ in procs:
            recs, dur = results.get(timeout=budget)
            records.extend(recs)
            end = max(end, dur)
    except (queue.Empty, RuntimeError) as exc:  # BrokenBarrierError is a RuntimeError
        raise ServiceUnavailable(f"bench worker processes did not finish: {exc}") from exc
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join()
    records.sort(key=lambda r: r.index)
    return RunOutcome(records, end)
