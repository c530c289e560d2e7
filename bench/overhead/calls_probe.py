"""The measured side of ``calls.py``: fleetgate served in this process, counted per request.

Runs the gateway exactly as ``fleetgate serve --workers 1 --no-watch`` does
(``fleetgate.cli.serve.serve_forever``: uvloop, logging at INFO, the frozen heap), from
whichever source tree is first on ``PYTHONPATH``. Once it listens, it has ``calls_peer.py``
(another process: the upstream and the client, so their work is not counted here) warm it up
and send ``--requests`` requests of each mode one after another, measuring in separate passes:

- CPU time of this process per request (``time.process_time``), median of ``--reps`` passes;
- Python function calls per request (cProfile: every call and every coroutine resumption, C
  functions included) and the top functions by calls and by cumulative time;
- allocations and requested bytes per request (``alloc_counter``), and tracemalloc's peak and
  retained bytes over the pass.

The gateway's background work (the shared-state poller, health checks, engine stats, the
scheduler's tick) runs whether requests come or not; its rate is measured over ``--idle-s``
seconds with no request in flight and subtracted from calls, allocations and CPU time for the
wall time of each pass.

Writes the results to ``--out`` (JSON) and stops the server.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import signal
import statistics
import time
import tracemalloc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import alloc_counter


class Driver:
    """The peer process (``calls_peer.py``: upstream and client), told over ``POST /drive``
    to send this gateway ``count`` requests; a raw socket, so that this side stays small."""

    def __init__(self, peer_port: int, gateway_url: str, api_key: str, long_repeat: int) -> None:
        self._peer_port = peer_port
        self._order = {"url": gateway_url, "key": api_key}
        self._long_repeat = long_repeat
        self.stalls = 0

    async def send(self, mode: str, count: int) -> None:
        """``json``, ``sse``, or ``sse_long`` (streams ``--long-repeat`` times as long)."""
        repeat = self._long_repeat if mode == "sse_long" else 1
        order = {**self._order, "mode": mode.removesuffix("_long"), "repeat": repeat}
        body = json.dumps({**order, "count": count}).encode()
        head = (
            f"POST /drive HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
            "Content-Type: application/json\r\nConnection: close\r\n\r\n"
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", self._peer_port)
        writer.write(head.encode() + body)
        answer = await reader.read()
        writer.close()
        outcome = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        if not outcome.get("ok"):
            raise RuntimeError(f"peer: {outcome.get('error')}")
        self.stalls += outcome["stalls"]


def _label(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    for marker in ("/fleetgate/", "/site-packages/", "/lib/python3"):
        if marker in filename:
            filename = filename.rsplit(marker, 1)[1]
            break
    return f"{filename}:{line}({name})"


def _top(stats: pstats.Stats, field: int, count: int, n: int) -> list[tuple[str, float]]:
    """The ``count`` functions with the most calls (field 1) or cumulative time (field 3)."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    ranked = sorted(table.items(), key=lambda kv: kv[1][field], reverse=True)[:count]
    scale = n if field == 1 else n / 1e6  # calls per request, or microseconds per request
    return [(_label(key), round(value[field] / scale, 2)) for key, value in ranked]


@dataclass(frozen=True)
class Background:
    """What the gateway spends per second with no request in flight (pollers, health checks,
    the scheduler's tick): subtracted from each pass for the time the pass took."""

    cpu_s: float
    calls: float
    allocs: float
    nbytes: float

    @classmethod
    async def measure(cls, counter: alloc_counter.AllocCounter | None, seconds: float) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        before = counter.read() if counter else alloc_counter.Counts(0, 0)
        await asyncio.sleep(seconds)
        counted = (counter.read() if counter else before) - before
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        profile = cProfile.Profile()
        profile.enable()
        await asyncio.sleep(seconds)
        profile.disable()
        calls = pstats.Stats(profile).total_calls / seconds  # type: ignore[attr-defined]
        return cls(cpu / wall, calls, counted.allocs / wall, counted.nbytes / wall)


async def _timed(driver: Driver, mode: str, n: int) -> float:
    """Send ``n`` requests; the wall time they took."""
    start = time.perf_counter()
    await driver.send(mode, n)
    return time.perf_counter() - start


async def _cpu(driver: Driver, mode: str, n: int, reps: int, idle: Background) -> float:
    times = []
    for _ in range(reps):
        start = time.process_time()
        wall = await _timed(driver, mode, n)
        times.append((time.process_time() - start - idle.cpu_s * wall) / n * 1e6)
    return statistics.median(times)


async def _calls(
    driver: Driver, mode: str, n: int, top: int, idle: Background, dump: Path | None
) -> Any:
    profile = cProfile.Profile()
    profile.enable()
    wall = await _timed(driver, mode, n)
    profile.disable()
    stats = pstats.Stats(profile)
    if dump is not None:
        stats.dump_stats(dump.with_name(f"{dump.name}-{mode}.pstats"))
    total: int = stats.total_calls  # type: ignore[attr-defined]
    return {
        "calls": (total - idle.calls * wall) / n,
        "raw_calls": total / n,
        "top_calls": _top(stats, 1, top, n),
        "top_cumulative_us": _top(stats, 3, top, n),
    }


async def _allocations(
    driver: Driver, mode: str, n: int, counter: alloc_counter.AllocCounter | None, idle: Background
) -> dict[str, float | None]:
    out: dict[str, float | None] = {"allocs": None, "alloc_bytes": None}
    if counter is not None:
        gc.collect()
        before = counter.read()
        wall = await _timed(driver, mode, n)
        counted = counter.read() - before
        out["allocs"] = (counted.allocs - idle.allocs * wall) / n
        out["alloc_bytes"] = (counted.nbytes - idle.nbytes * wall) / n
    gc.collect()
    tracemalloc.start()
    await driver.send(mode, n)
    gc.collect()
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {**out, "peak_bytes": float(peak), "retained_bytes": retained / n}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    url = f"http://127.0.0.1:{args.port}"
    counter = alloc_counter.load()
    driver = Driver(args.peer_port, url, os.environ["FLEETGATE_MASTER_KEY"], args.long_repeat)
    results: dict[str, Any] = {}
    await driver.send("json", args.warmup)
    idle = await Background.measure(counter, args.idle_s)
    results["idle_per_s"] = asdict(idle)
    for mode in args.modes.split(","):
        await driver.send(mode, args.warmup)
        cpu = await _cpu(driver, mode, args.requests, args.reps, idle)
        calls = await _calls(driver, mode, args.requests, args.top, idle, args.profile_out)
        allocs = await _allocations(driver, mode, args.requests, counter, idle)
        results[mode] = {"cpu_us": cpu, **calls, **allocs}
    results["stalls"] = driver.stalls
    return results


def main() -> None:
    # fleetgate from whichever tree PYTHONPATH names; imported here so that calls.py, which
    # runs under another tree, can import this module's marker
    from fleetgate.cli.logs import configure as configure_logging
    from fleetgate.cli.serve import _use_uvloop, serve_forever, settings_from_args

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--peer-port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="where the results go (JSON)")
    parser.add_argument("--profile-out", type=Path, help="PREFIX: PREFIX-<mode>.pstats")
    parser.add_argument("--modes", default="json,sse,sse_long")
    parser.add_argument("--long-repeat", type=int, default=4)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--idle-s", type=float, default=3.0, help="background cost window")
    args = parser.parse_args()
    ns = argparse.Namespace(
        config=args.config, host="127.0.0.1", port=args.port, workers=1,
        data_dir=args.data_dir, no_watch=True,
    )  # fmt: skip
    settings = settings_from_args(ns)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    configure_logging("INFO")
    _use_uvloop()
    outcome: dict[str, Any] = {}

    def listening() -> None:
        task = asyncio.get_running_loop().create_task(measure(args))

        def done(t: asyncio.Task[dict[str, Any]]) -> None:
            outcome["error" if t.exception() else "results"] = (
                repr(t.exception()) if t.exception() else t.result()
            )
            os.kill(os.getpid(), signal.SIGTERM)

        task.add_done_callback(done)
        outcome["task"] = task

    asyncio.run(serve_forever(settings, on_listening=listening))
    outcome.pop("task", None)
    args.out.write_text(json.dumps(outcome))


if __name__ == "__main__":
    main()
