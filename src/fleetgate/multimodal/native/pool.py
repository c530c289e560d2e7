"""Supervised native worker processes: where a crash in native code costs one call.

Libraries that keep C globals or parse hostile bytes (espeak-ng, pocketsphinx, libsndfile) run
in long-lived child processes (``fleetgate.multimodal.native.child``), never in the gateway.
Each worker builds its handler once, at start, on its main thread; then it serves one call at a
time. A worker that dies (a segfault, the OOM killer, SIGKILL) or overruns the per-call time
limit is reaped, its call fails with a 503, and the next call starts a fresh one.

Example::

    pool = NativeWorkerPool(WorkerSpec("fleetgate.multimodal.speech.espeak:EspeakEngine"))
    pcm, rate = await pool.call("speak", "Hello.", "en-us", 175)
    await pool.aclose()
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fleetgate import errors
from fleetgate.errors import FleetgateError, ServiceUnavailable
from fleetgate.multimodal.native.wire import WireError, dumps, loads_plain, recv_frame, send_frame

__all__ = ["NativeWorkerPool", "WorkerSpec"]

log = logging.getLogger("fleetgate.multimodal.native")

FailureHook = Callable[[str, str], None]  # (pool name, reason): "crashed" | "timeout" | "start"


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a worker runs: ``factory`` (``"module:callable"``) called with ``kwargs`` (builtins
    only) builds the handler whose methods the pool calls by name."""

    factory: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    name: str = "native"


class _Lost(Exception):
    """The worker is gone (or was killed); the message says why. ``unsent``: it was gone
    before the call reached it (so the call may go to a new worker)."""

    def __init__(self, message: str, reason: str, *, unsent: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.unsent = unsent


def _child_env() -> dict[str, str]:
    # The child imports the handler's module the way this process did.
    paths = [p or os.getcwd() for p in sys.path]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class _Worker:
    """One child process and the gateway's end of its socket (used by one thread at a time)."""

    def __init__(self, spec: WorkerSpec, start_timeout_s: float) -> None:
        self.name = spec.name
        ours, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-m", "fleetgate.multimodal.native.child", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=_child_env(),
                start_new_session=True,  # a Ctrl-C on the gateway's terminal is the gateway's
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        try:
            ours.settimeout(start_timeout_s)
            send_frame(ours, dumps({"factory": spec.factory, "kwargs": dict(spec.kwargs)}))
            kind, info = loads_plain(recv_frame(ours))
        except (OSError, WireError, ValueError) as exc:
            self.kill()
            raise _Lost(f"{self.name} worker did not start: {exc}", "start") from exc
        if kind == "error":  # the handler refused to start with an error of the tree
            self.kill()
            raise _client_error(info)
        if kind != "ready":
            self.kill()
            raise _Lost(f"{self.name} worker failed to start: {info}", "start")
        self.info: dict[str, Any] = dict(info)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, method: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        try:
            self.sock.settimeout(timeout_s)
            send_frame(self.sock, dumps((method, args)))
        except OSError as exc:
            self.kill(grace_s=1.0)
            raise _Lost(
                f"{self.name} worker died ({self._exit()})", "crashed", unsent=True
            ) from exc
        try:
            frame = recv_frame(self.sock)
        except TimeoutError as exc:
            self.kill()
            raise _Lost(f"{self.name} worker took longer than {timeout_s:g} s", "timeout") from exc
        except (OSError, WireError) as exc:
            self.kill(grace_s=1.0)  # it is exiting: let it, to report how it ended
            raise _Lost(f"{self.name} worker died ({self._exit()})", "crashed") from exc
        try:
            kind, payload = loads_plain(frame)
        except (WireError, ValueError, TypeError) as exc:
            self.kill()
            raise _Lost(f"{self.name} worker sent a malformed answer: {exc}", "crashed") from exc
        if kind == "ok":
            return payload
        if kind == "error":
            raise _client_error(payload)
        raise ServiceUnavailable(
            f"{self.name} worker failed: {payload}", code="native_worker_error"
        )

    def _exit(self) -> str:
        code = self.proc.returncode
        if code is None:
            return "connection lost"
        return f"signal {-code}" if code < 0 else f"exit status {code}"

    def kill(self, grace_s: float = 0.0) -> None:
        if grace_s > 0:
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.sock.close()


def _client_error(fields: Any) -> FleetgateError:
    """Rebuild a FleetgateError the worker raised (only classes of the error tree)."""
    cls = getattr(errors, str(fields.get("type")), None) if isinstance(fields, dict) else None
    if not (isinstance(cls, type) and issubclass(cls, FleetgateError)):
        return ServiceUnavailable(
            "native worker sent a malformed error", code="native_worker_error"
        )
    message = str(fields.get("message"))
    if issubclass(cls, errors.MissingExtra):
        return cls(message, extra=str(fields.get("extra")))
    try:
        return cls(message, param=fields.get("param"), code=fields.get("code"))
    except TypeError:
        return ServiceUnavailable(message, code="native_worker_error")


def _kill_all(workers: set[_Worker]) -> None:
    for worker in list(workers):
        worker.kill()
    workers.clear()


class _Slot:
    __slots__ = ("worker",)

    def __init__(self) -> None:
        self.worker: _Worker | None = None


class NativeWorkerPool:
    """``size`` worker processes running ``spec``'s handler; :meth:`call` runs one method.

    Workers start on first use (or at :meth:`warm_up`) and are restarted after they die.
    ``call_timeout_s`` bounds each call: past it the worker is killed and the call fails with
    503. ``on_failure(name, reason)`` is told of every lost worker (for a metric).
    """

    def __init__(
        self,
        spec: WorkerSpec,
        *,
        size: int = 1,
        call_timeout_s: float = 60.0,
        start_timeout_s: float = 30.0,
        on_failure: FailureHook | None = None,
    ) -> None:
        if size <= 0:
            raise ValueError("size must be positive")
        self.spec = spec
        self.size = size
        self.call_timeout_s = call_timeout_s
        self.start_timeout_s = start_timeout_s
        self._on_failure = on_failure
        self._slots: queue.SimpleQueue[_Slot] = queue.SimpleQueue()
        for _ in range(size):
            self._slots.put(_Slot())
        self._live: set[_Worker] = set()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._executor = ThreadPoolExecutor(size, thread_name_prefix=f"{spec.name}-worker")
        self._closed = False
        # Children never outlive a pool that was dropped without close() (or the interpreter).
        self._finalizer = weakref.finalize(self, _kill_all, self._live)

    @property
    def in_flight(self) -> int:
        """Calls running in a worker now."""
        return self._in_flight

    def pids(self) -> list[int]:
        """Process ids of the running workers."""
        with self._lock:
            return [w.pid for w in self._live if w.proc.poll() is None]

    async def call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        """Run ``method(*args)`` on a free worker; 503 when the worker dies or times out.

        Cancelling the caller does not interrupt the worker: the call finishes in the
        background and the worker is reused."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                self._executor, self.call_blocking, method, args, timeout_s
            )
        except RuntimeError as exc:  # the executor was shut down: the pool is closed
            raise ServiceUnavailable(f"{self.spec.name} workers are stopped") from exc

    def call_blocking(
        self, method: str, args: tuple[Any, ...] = (), timeout_s: float | None = None
    ) -> Any:
        """:meth:`call` for threads (blocks)."""
        slot = self._slots.get()
        with self._lock:
            self._in_flight += 1
        try:
            try:
                return self._call_on(slot, method, args, timeout_s)
            except _Lost as exc:
                if not exc.unsent:
                    raise
                return self._call_on(slot, method, args, timeout_s)  # died while idle
        except _Lost as exc:
            raise ServiceUnavailable(str(exc), code=f"native_worker_{exc.reason}") from None
        finally:
            with self._lock:
                self._in_flight -= 1
            self._slots.put(slot)

    def _call_on(
        self, slot: _Slot, method: str, args: tuple[Any, ...], timeout_s: float | None
    ) -> Any:
        worker = slot.worker
        if worker is not None and worker.proc.poll() is not None:
            slot.worker = None
            worker.kill()
            self._lost(_Lost(f"{self.spec.name} worker died while idle", "crashed"))
        try:
            if slot.worker is None:
                slot.worker = self._start()
            return slot.worker.call(method, args, timeout_s or self.call_timeout_s)
        except _Lost as exc:
            slot.worker = None
            self._lost(exc)
            raise

    def _start(self) -> _Worker:
        if self._closed:
            raise _Lost(f"{self.spec.name} workers are stopped", "start")
        worker = _Worker(self.spec, self.start_timeout_s)
        with self._lock:
            self._live.add(worker)
        return worker

    def _lost(self, exc: _Lost) -> None:
        with self._lock:
            for w in [w for w in self._live if w.proc.returncode is not None]:
                self._live.discard(w)
        log.warning("%s (%s); the next call starts a new worker", exc, exc.reason)
        if self._on_failure is not None:
            self._on_failure(self.spec.name, exc.reason)

    def warm_up(self) -> None:
        """Start every worker now (blocking) instead of on first use."""
        slots = [self._slots.get() for _ in range(self.size)]
        try:
            for slot in slots:
                if slot.worker is None:
                    slot.worker = self._start()
        finally:
            for slot in slots:
                self._slots.put(slot)

    def close(self) -> None:
        """Stop the workers (blocking; a call in flight finishes first)."""
        self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            _kill_all(self._live)

    async def aclose(self) -> None:
        """Stop the workers."""
        await asyncio.to_thread(self.close)
