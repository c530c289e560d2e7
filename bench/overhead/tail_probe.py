"""The measured side of ``tail.py``: fleetgate in this process, every long loop step recorded.

Runs the gateway as ``fleetgate serve --workers 1 --no-watch`` does (``serve_forever``: logging
at INFO, the frozen heap), from whichever source tree is first on ``PYTHONPATH``, but on the
standard asyncio loop with pure-Python tasks (uvloop's C callbacks cannot be attributed), and:

- times every callback the loop runs; each one over ``--slow-ms`` is recorded with its owner
  (the task's coroutine and where it stopped, or the callback's qualified name);
- times every garbage collection (``gc.callbacks``), by generation;
- times the whole loop iteration (``_run_once``) too, so time spent outside callbacks (polling,
  timers) shows.

Once it listens it writes ``--ready`` (an empty file), waits for ``--done`` to appear (the
driver ran its load), writes the records to ``--out`` (JSON) and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.events
import asyncio.futures
import asyncio.tasks
import gc
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any


def _where(frame: FrameType | None) -> str:
    if frame is None:
        return "?"
    name = frame.f_code.co_filename
    for marker in ("/fleetgate/", "/site-packages/", "/lib/python3"):
        if marker in name:
            name = name.rsplit(marker, 1)[1]
            break
    return f"{name}:{frame.f_lineno}({frame.f_code.co_name})"


def _chain(coro: Any) -> str:
    """The coroutine's await chain, outermost first, each as file:line(function)."""
    parts: list[str] = []
    depth = 0
    while coro is not None and depth < 12:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            name = getattr(coro, "__qualname__", type(coro).__name__)
            parts.append(str(name))
            break
        parts.append(_where(frame))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
        depth += 1
    return " > ".join(parts)


def _owner(callback: Callable[..., Any]) -> str:
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        name = getattr(coro, "__qualname__", "?")
        return f"task {name} @ {_chain(coro)}"
    name = getattr(callback, "__qualname__", None) or repr(callback)
    module = getattr(callback, "__module__", "") or ""
    return f"{module}.{name}" if module else str(name)


def _key(callback: Callable[..., Any]) -> str:
    """A cheap owner name: the task's coroutine's qualified name, or the callback's."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return "task " + getattr(coro, "__qualname__", "?")
    return getattr(callback, "__qualname__", None) or type(callback).__name__


class Recorder:
    """Long callbacks, long loop iterations and every GC, with times relative to the start."""

    def __init__(self, slow_s: float, cpu: bool) -> None:
        self.slow_s = slow_s
        # CPU time of the loop's thread: what a callback cost, not how long the box kept it
        # off the CPU (on a shared machine wall time is mostly the neighbours)
        self.clock = time.thread_time if cpu else time.perf_counter
        self.t0 = time.perf_counter()
        self.slow: list[tuple[float, float, str]] = []  # start, seconds, owner
        self.iterations: list[tuple[float, float]] = []  # start, seconds (long ones)
        self.gcs: list[tuple[float, float, int, int]] = []  # start, seconds, gen, collected
        self.callbacks = 0
        self.callback_s = 0.0
        self._gc_start = 0.0
        # each request's start (wall since t0, the loop thread's CPU time): at concurrency 1
        # the CPU between two starts is one request plus whatever else ran meanwhile
        self.starts: list[tuple[float, float]] = []
        self.by_key: dict[str, list[float]] = {}  # cheap owner -> [count, seconds]
        self.samples: list[tuple[float, list[str], list[str]]] = []

    def gc_hook(self, phase: str, info: dict[str, int]) -> None:
        now = self.clock()
        if phase == "start":
            self._gc_start = now
        else:
            at = time.perf_counter() - self.t0
            took = now - self._gc_start
            self.gcs.append((at - took, took, info["generation"], info["collected"]))

    def install(self) -> None:
        recorder = self
        original_run = asyncio.events.Handle._run

        clock = recorder.clock

        def timed_run(handle: asyncio.events.Handle) -> None:
            start = clock()
            original_run(handle)
            took = clock() - start
            recorder.callbacks += 1
            recorder.callback_s += took
            key = _key(handle._callback)  # type: ignore[attr-defined]
            counted = recorder.by_key.get(key)
            if counted is None:
                recorder.by_key[key] = [1, took]
            else:
                counted[0] += 1
                counted[1] += took
            if took >= recorder.slow_s:
                callback = handle._callback  # type: ignore[attr-defined]
                at = time.perf_counter() - recorder.t0
                recorder.slow.append((at - took, took, _owner(callback)))

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
        base = asyncio.base_events.BaseEventLoop
        original_once = base._run_once  # type: ignore[attr-defined]

        def timed_once(loop: Any) -> None:
            start = clock()
            original_once(loop)
            took = clock() - start
            if took >= recorder.slow_s:
                recorder.iterations.append((time.perf_counter() - recorder.t0 - took, took))

        base._run_once = timed_once  # type: ignore[attr-defined]
        original_create_task = base.create_task

        def create_task(loop: Any, coro: Any, **kwargs: Any) -> Any:
            if getattr(coro, "__qualname__", "") == "RequestHandler._handle_request":
                recorder.starts.append((time.perf_counter() - recorder.t0, time.thread_time()))
            return original_create_task(loop, coro, **kwargs)

        base.create_task = create_task  # type: ignore[method-assign]
        # Pure-Python tasks and futures: their step is a bound method whose __self__ is the task.
        asyncio.tasks.Task = asyncio.tasks._PyTask  # type: ignore[attr-defined, misc]
        asyncio.Task = asyncio.tasks._PyTask  # type: ignore[attr-defined, misc]
        asyncio.futures.Future = asyncio.futures._PyFuture  # type: ignore[attr-defined, misc]
        asyncio.Future = asyncio.futures._PyFuture  # type: ignore[attr-defined, misc]
        gc.callbacks.append(self.gc_hook)

    def sample(self, interval_s: float, stop: threading.Event) -> None:
        """Every ``interval_s``: the main thread's stack (innermost frames), for attribution
        inside long callbacks; other threads' innermost frame too (GIL holders)."""
        main = threading.main_thread().ident
        me = threading.get_ident()
        while not stop.wait(interval_s):
            now = time.perf_counter() - self.t0
            frames = sys._current_frames()
            stack = frames.get(main)  # type: ignore[arg-type]
            if stack is None:
                continue
            inner = [_where(f) for f, _ in traceback.walk_stack(stack)][:8]
            others = [_where(f) for ident, f in frames.items() if ident not in (main, me)]
            self.samples.append((now, inner, others))

    def mark(self) -> float:
        return time.perf_counter() - self.t0

    def dump(self) -> dict[str, Any]:
        return {
            "callbacks": self.callbacks,
            "callback_s": self.callback_s,
            "slow": self.slow,
            "iterations": self.iterations,
            "gcs": self.gcs,
            "gc_threshold": gc.get_threshold(),
            "gc_frozen": gc.get_freeze_count(),
            "samples": self.samples,
            "by_key": self.by_key,
            "starts": self.starts,
        }


WINDOW_NAMES = ("idle", "json", "sse")  # tail.py's windows: the heap is read after the last


def _heap() -> dict[str, Any]:
    """Objects the collector tracks outside the frozen start-up heap, by generation, and what
    one full collection costs now (the loop thread's CPU)."""
    sizes = [len(gc.get_objects(generation)) for generation in range(3)]
    kinds: dict[str, int] = {}
    for generation in range(3):
        for obj in gc.get_objects(generation):
            kind = type(obj)
            name = f"{kind.__module__}.{kind.__qualname__}"
            kinds[name] = kinds.get(name, 0) + 1
    top = sorted(kinds.items(), key=lambda kv: kv[1], reverse=True)[:15]
    start = time.thread_time()
    gc.collect()
    took = time.thread_time() - start
    return {"tracked_by_generation": sizes, "full_collection_ms": took * 1e3, "kinds": top}


def main() -> None:
    from fleetgate.cli.logs import configure as configure_logging
    from fleetgate.cli.serve import serve_forever, settings_from_args

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--slow-ms", type=float, default=1.0)
    parser.add_argument("--wall", action="store_true", help="time by wall clock, not CPU")
    parser.add_argument("--sample-ms", type=float, default=1.0, help="0: no stack sampling")
    args = parser.parse_args()
    ns = argparse.Namespace(
        config=args.config, host="127.0.0.1", port=args.port, workers=1,
        data_dir=args.data_dir, no_watch=True,
    )  # fmt: skip
    settings = settings_from_args(ns)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    configure_logging("INFO")
    recorder = Recorder(args.slow_ms / 1000, not args.wall)
    recorder.install()
    marks: list[tuple[str, float]] = []
    snapshots: list[dict[str, list[float]]] = []
    tasks: list[str] = []
    heap: dict[str, Any] = {}
    stop = threading.Event()
    if args.sample_ms > 0:
        sampler = threading.Thread(
            target=recorder.sample, args=(args.sample_ms / 1000, stop), daemon=True
        )
        sampler.start()

    def listening() -> None:
        loop = asyncio.get_running_loop()

        def on_usr1() -> None:  # the driver marks window edges with SIGUSR1
            marks.append((f"mark{len(marks)}", recorder.mark()))
            # per-window counts by owner: a snapshot at each mark
            snapshots.append({k: list(v) for k, v in recorder.by_key.items()})
            if len(marks) == len(WINDOW_NAMES) * 2:  # after the load: what a full collection walks
                heap.update(_heap())
            if not tasks:  # what runs in the background, listed once with nothing in flight
                tasks.extend(sorted(_chain(t.get_coro()) for t in asyncio.all_tasks()))

        loop.add_signal_handler(signal.SIGUSR1, on_usr1)
        args.ready.write_text(str(os.getpid()))

    asyncio.run(serve_forever(settings, on_listening=listening))
    stop.set()
    args.out.write_text(
        json.dumps(
            {
                **recorder.dump(),
                "marks": marks,
                "snapshots": snapshots,
                "tasks": tasks,
                "heap": heap,
                "python": sys.version,
            }
        )
    )


if __name__ == "__main__":
    main()
