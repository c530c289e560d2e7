"""Scale-to-zero and sleep mode: hold requests while a pool comes up, put idle engines to sleep.

A deployment with ``wake:`` may be absent (its Kubernetes Deployment scaled to zero replicas by
KEDA) or asleep (vLLM's sleep mode: weights offloaded, GPU memory free). Instead of failing:

- **Held**: when every attempt on an alias failed because nothing answered (connection refused,
  nothing healthy), the dispatcher asks `Waker.hold`: the request waits, counted in
  ``fleetgate_held_requests{alias}`` (the autoscaler's signal to scale from zero), while the
  wake-able deployments are probed every ``wake.poll_interval_s``; the first that answers is put
  back in rotation and the request is sent again. After ``wake.hold_s`` it fails as before.
- **Sleep mode**: a deployment with ``wake.sleep_after_idle_s`` and no request for that long is
  put to sleep (``POST /sleep?level=``, vLLM with ``VLLM_SERVER_DEV_MODE=1``); the next request
  wakes it (``POST /wake_up``, then ``GET /is_sleeping`` until false) before it is sent, and
  concurrent requests share that one wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

import aiohttp

from fleetgate.errors import UpstreamConnectError
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.deployment import Deployment
from fleetgate.tasks import Background, cancel_and_wait, every
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["Waker", "engine_root"]

log = logging.getLogger("fleetgate.wake")

_CALL_TIMEOUT = aiohttp.ClientTimeout(total=10)


def engine_root(api_base: str) -> str:
    """The engine's own URL (``/sleep`` lives there), from an ``api_base`` ending in ``/v1``."""
    return api_base[: -len("/v1")] if api_base.endswith("/v1") else api_base


class Waker:
    """One per gateway: holds requests for absent pools and drives vLLM's sleep mode."""

    def __init__(
        self,
        http: OutboundHttp,
        metrics: GatewayMetrics,
        deployments: Callable[[], Iterable[Deployment]],
        *,
        idle_check_s: float = 1.0,
    ) -> None:
        self._http = http
        self._metrics = metrics
        self._deployments = deployments
        self._idle_check_s = idle_check_s
        self._waking: dict[int, asyncio.Task[bool]] = {}
        self._probing: dict[int, asyncio.Task[bool]] = {}  # one probe at a time per deployment
        self._loop = Background(self._run)

    # -- holding requests while a pool scales up from zero ------------------------------------

    async def hold(self, alias: str, deps: Sequence[Deployment], deadline: float) -> bool:
        """Wait until one of ``deps`` answers its probe (then it is back in rotation) or until
        ``deadline`` (``time.monotonic``); True when one came up."""
        wakeable = [d for d in deps if d.config.wake is not None]
        if not wakeable:
            return False
        interval = min(d.config.wake.poll_interval_s for d in wakeable if d.config.wake)
        gauge = self._metrics.held.labels(alias)
        gauge.inc()
        try:
            while time.monotonic() < deadline:
                for dep in wakeable:
                    if dep.state.asleep and await self._shared(self._waking, dep, self._wake):
                        return True
                    if not dep.state.asleep and await self._shared(self._probing, dep, self._up):
                        return True
                await asyncio.sleep(max(0.0, min(interval, deadline - time.monotonic())))
            return False
        finally:
            gauge.dec()

    async def _up(self, dep: Deployment) -> bool:
        try:
            ok = await asyncio.wait_for(dep.provider.probe(), 2.0)
        except TimeoutError:
            ok = False
        if ok:
            log.info("%s answers again: back in rotation", dep.id)
            dep.state.cooldown_until = 0.0
            dep.state.consecutive_failures = 0
        return ok

    # -- vLLM sleep mode ----------------------------------------------------------------------

    async def ensure_awake(self, dep: Deployment) -> None:
        """Before sending to ``dep``: wakes it if the gateway put it to sleep; raises
        `UpstreamConnectError` (retryable) when it did not wake within ``wake.hold_s``."""
        if dep.state.asleep and not await self._shared(self._waking, dep, self._wake):
            raise UpstreamConnectError(f"Deployment {dep.id} did not wake up in time.")

    @staticmethod
    async def _shared(
        running: dict[int, asyncio.Task[bool]],
        dep: Deployment,
        work: Callable[[Deployment], Coroutine[Any, Any, bool]],
    ) -> bool:
        """``work(dep)``, run once for all the requests that ask while it runs."""
        key = id(dep.state)
        task = running.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(work(dep))
            running[key] = task
            task.add_done_callback(lambda _: running.pop(key, None))
        return await asyncio.shield(task)

    async def _wake(self, dep: Deployment) -> bool:
        wake = dep.config.wake
        hold_s = wake.hold_s if wake is not None else 60.0
        poll = wake.poll_interval_s if wake is not None else 0.5
        root = engine_root(dep.config.api_base)
        deadline = time.monotonic() + hold_s
        log.info("waking %s", dep.id)
        session = self._http.session()
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.post(f"{root}/wake_up", timeout=_CALL_TIMEOUT) as resp:
                    await resp.read()
                    if resp.status < 300 and not await self._is_sleeping(root):
                        state = dep.state
                        state.asleep = False
                        state.last_request_at = time.monotonic()
                        state.cooldown_until = 0.0  # a failed wake-up may have cooled it down
                        state.consecutive_failures = 0
                        return True
            await asyncio.sleep(poll)
        return False

    async def _is_sleeping(self, root: str, *, unknown: bool = True) -> bool:
        """``GET /is_sleeping``; ``unknown``: the answer when the engine cannot be asked."""
        try:
            async with self._http.session().get(
                f"{root}/is_sleeping", timeout=_CALL_TIMEOUT
            ) as resp:
                if resp.status == 404:  # an engine without sleep mode is awake
                    return False
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return unknown
        return isinstance(body, dict) and body.get("is_sleeping") is True

    async def sleep_idle(self) -> list[str]:
        """Puts every idle sleep-mode deployment to sleep; returns the ids put to sleep."""
        now = time.monotonic()
        slept = []
        for dep in self._deployments():
            wake = dep.config.wake
            state = dep.state
            if wake is None or wake.sleep_after_idle_s is None or state.asleep:
                continue
            if state.in_flight or id(state) in self._waking:
                continue
            if state.last_request_at == 0.0:
                state.last_request_at = now  # idle from the gateway's start
            if now - state.last_request_at < wake.sleep_after_idle_s:
                continue
            state.asleep = True  # before the call: a request arriving now waits for a wake-up
            root = engine_root(dep.config.api_base)
            try:
                async with self._http.session().post(
                    f"{root}/sleep", params={"level": str(wake.sleep_level)}, timeout=_CALL_TIMEOUT
                ) as resp:
                    await resp.read()
                    ok = resp.status < 300
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            if ok:
                log.info("%s idle for %.0fs: put to sleep", dep.id, now - state.last_request_at)
                slept.append(dep.id)
            else:
                state.asleep = False
                state.last_request_at = now  # try again after another idle period
        return slept

    async def sync_sleeping(self) -> None:
        """Asks every sleep-mode deployment whether it sleeps (one put to sleep before this
        gateway started is woken for its next request, not sent requests it refuses)."""
        deps = [
            d for d in self._deployments() if d.config.wake and d.config.wake.sleep_after_idle_s
        ]
        roots = [engine_root(d.config.api_base) for d in deps]
        answers = await asyncio.gather(*(self._is_sleeping(r, unknown=False) for r in roots))
        for dep, sleeping in zip(deps, answers, strict=True):
            dep.state.asleep = dep.state.asleep or sleeping

    async def _run(self) -> None:
        with contextlib.suppress(Exception):
            await self.sync_sleeping()
        await every(lambda: self._idle_check_s, self.sleep_idle, log, "sleep-mode check failed")

    async def start(self) -> None:
        self._loop.start()

    async def aclose(self) -> None:
        await self._loop.aclose()
        for running in (*self._waking.values(), *self._probing.values()):
            await cancel_and_wait(running)
