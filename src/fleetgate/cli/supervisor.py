"""Worker processes of ``fleetgate serve --workers N``: started, watched, restarted.

Each worker is a whole gateway (``SO_REUSEPORT`` spreads connections over them). A worker that
dies while the supervisor is not stopping (a crash, the OOM killer, ``kill -9``) is started
again; one that keeps dying soon after starting is restarted with a growing delay (up to 30 s)
so a crash loop does not spin. SIGINT/SIGTERM stop every worker; SIGHUP is passed on (reload).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess

__all__ = ["Supervisor"]

log = logging.getLogger("fleetgate.serve")

_QUICK_DEATH_S = 5.0
_MAX_DELAY_S = 30.0


class Supervisor:
    """Keeps ``count`` processes running ``target()`` until stopped."""

    def __init__(self, target: Callable[[], None], count: int) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._target = target
        self._count = count
        self._procs: list[BaseProcess] = []
        self._started: dict[int, float] = {}
        self._failures = 0
        self._stopping = False
        self.restarts = 0

    def _spawn(self) -> BaseProcess:
        proc = self._ctx.Process(target=self._target, daemon=False)
        proc.start()
        self._started[id(proc)] = time.monotonic()
        return proc

    def _signal(self, signum: int, _frame: object) -> None:
        if signum in (signal.SIGINT, signal.SIGTERM):
            self._stopping = True
        for proc in self._procs:
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signum)

    def run(self) -> int:
        self._procs = [self._spawn() for _ in range(self._count)]
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._signal)
        while self._procs:
            wait([p.sentinel for p in self._procs])
            for proc in [p for p in self._procs if not p.is_alive()]:
                self._procs.remove(proc)
                if not self._stopping:
                    self._procs.append(self._replace(proc))
        return 0

    def _replace(self, dead: BaseProcess) -> BaseProcess:
        lived = time.monotonic() - self._started.pop(id(dead), 0.0)
        self._failures = self._failures + 1 if lived < _QUICK_DEATH_S else 0
        delay = min(_MAX_DELAY_S, 0.5 * (2 ** (self._failures - 1))) if self._failures else 0.0
        log.error(
            "worker %s exited with %s after %.1fs; starting another%s",
            dead.pid, dead.exitcode, lived, f" in {delay:.1f}s" if delay else "",
        )  # fmt: skip
        if delay:
            time.sleep(delay)
        self.restarts += 1
        return self._spawn()
