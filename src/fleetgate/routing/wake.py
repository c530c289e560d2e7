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
        self._woken_at: dict[int, float] = {}  # per deployment: when a wake-up last ended
        self._asking: dict[int, asyncio.Task[None]] = {}  # `refused_elsewhere`'s questions
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

    async def woken_after_refusal(self, dep: Deployment, since: float) -> bool:
        """After an attempt to ``dep`` failed: True when the engine was asleep (``GET
        /is_sleeping``; put to sleep by another replica's reclaim in the instant after this one
        picked it, or by another tool) and is awake again now, so the request is sent to it
        again instead of failing over. False when it does not sleep (or cannot be asked, or
        did not wake within ``wake.hold_s``): the failure stands. Concurrent requests share
        one wake-up, and one refused while another's wake-up ran (the attempt sent at
        ``since``, ``time.monotonic``) is sent again too; only deployments with ``wake:`` are
        asked."""
        if dep.config.wake is None:
            return False
        if self._woken_at.get(id(dep.state), 0.0) >= since:
            return True  # woken since this attempt was sent: it refused the sleeping engine
        if not dep.state.asleep:
            if not await self._is_sleeping(engine_root(dep.config.api_base), unknown=False):
                return False
            log.info("%s refused while asleep: waking it for the request", dep.id)
            dep.state.asleep = True  # the others arriving now wait for the wake-up too
        return await self._shared(self._waking, dep, self._wake)

    def refused_elsewhere(self, dep: Deployment) -> None:
        """A data plane's attempt to ``dep`` failed (Envoy behind ``fleetgate epp`` got a 5xx):
        asks in the background whether the engine sleeps; one that does is marked asleep and
        its failure forgiven (no cool-down), so the next pick wakes it first."""
        key = id(dep.state)
        if dep.config.wake is None or dep.state.asleep or key in self._asking:
            return
        task = asyncio.get_running_loop().create_task(self._ask_asleep(dep))
        self._asking[key] = task
        task.add_done_callback(lambda _: self._asking.pop(key, None))

    async def _ask_asleep(self, dep: Deployment) -> None:
        if await self._is_sleeping(engine_root(dep.config.api_base), unknown=False):
            log.info("%s refused while asleep: its next pick wakes it", dep.id)
            state = dep.state
            state.asleep = True
            state.cooldown_until = 0.0
            state.consecutive_failures = 0

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
        if not await self._is_sleeping(root):  # woken already (another replica's request)
            self._awake(dep)
            return True
        log.info("waking %s", dep.id)
        session = self._http.session()
        while time.monotonic() < deadline:
            # the call may take the whole hold (a large model's weights reloading): cut off at
            # 10 s and sent again, the engine would be told to wake a second time meanwhile
            left = max(_CALL_TIMEOUT.total or 10.0, deadline - time.monotonic())
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                timeout = aiohttp.ClientTimeout(total=left)
                async with session.post(f"{root}/wake_up", timeout=timeout) as resp:
                    await resp.read()
                    if resp.status < 300 and not await self._is_sleeping(root):
                        self._awake(dep)
                        return True
            await asyncio.sleep(poll)
        return False

    def _awake(self, dep: Deployment) -> None:
        state = dep.state
        state.asleep = False
        state.last_request_at = time.monotonic()
        state.cooldown_until = 0.0  # a failed wake-up may have cooled it down
        state.consecutive_failures = 0
        self._woken_at[id(state)] = time.monotonic()

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
        for running in (*self._waking.values(), *self._probing.values(), *self._asking.values()):
            await cancel_and_wait(running)
