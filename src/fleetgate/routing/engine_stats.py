"""Engine state for routing: scraped ``/metrics`` plus this gateway's own request tracking.

`EngineStats` scrapes every engine behind an engine-aware alias at ``routing.scrape_interval_s``
(100 ms by default), and is the dispatcher's `DispatchObserver`: it hears of each attempt at
dispatch, first token and completion. `EngineStats.view` combines both: the last scrape moved
forward by what this gateway did since (and, with Redis, what the other replicas are doing), so
the router is never blind between scrapes nor fooled by a stale one.

Engines are identified by `engine_key` (the deployment's ``api_base`` without ``/v1``): two
aliases served by one engine share its queue and its cache.

Example::

    stats = EngineStats(config.routing, lambda: table.deployments(), http=resources.http)
    await stats.start()                # inside the running loop (the app's lifespan)
    view = stats.view(deployment)      # EngineView(queued=2.0, running=14.0, kv_usage=0.61, ...)
    await stats.aclose()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import aiohttp

from fleetgate.config.schema import RoutingConfig
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.routing.context import Pick, RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.engine_metrics import EngineSnapshot, parse_engine_metrics
from fleetgate.routing.load import LoadTracker, LocalLoad, Ticket
from fleetgate.routing.load_share import LoadShare
from fleetgate.tasks import cancel_and_wait

__all__ = ["EngineStats", "EngineView", "engine_key", "metrics_url"]

log = logging.getLogger("fleetgate.routing")

_MAX_BACKOFF_S = 30.0


def engine_key(dep: Deployment) -> str:
    """The engine behind a deployment: its ``api_base`` without a trailing ``/v1``."""
    base = dep.config.api_base.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def metrics_url(dep: Deployment) -> str:
    return f"{engine_key(dep)}/metrics"


@dataclass(frozen=True, slots=True)
class EngineView:
    """What the router believes about one engine right now."""

    engine: str  # "vllm", "sglang" or "" (never scraped successfully)
    queued: float  # requests before their first token (waiting, or in prefill)
    queued_prefill_tokens: float  # their uncached prompt tokens
    running: float  # requests decoding
    kv_usage: float  # 0..1
    block_size: int | None = None
    num_blocks: int | None = None
    scraped: bool = False  # a fresh scrape went into this view

    @property
    def load(self) -> float:
        return self.queued + self.running


@dataclass(slots=True)
class _Target:
    snapshot: EngineSnapshot | None = None
    local_at_scrape: LocalLoad | None = None
    failures: int = 0
    next_try: float = 0.0
    avg_prefill: float = 0.0  # EWMA of uncached tokens per request dispatched here


class EngineStats:
    """Scraper, local tracker and, optionally, the Redis load share of one gateway replica."""

    def __init__(
        self,
        config: RoutingConfig,
        targets: Callable[[], Iterable[Deployment]],
        *,
        http: OutboundHttp,
        share: LoadShare | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``http``: the process's outbound session, for the scrapes (the resource owner closes
        it)."""
        self.config = config
        self._targets = targets
        self._share = share
        self._clock = clock
        self.tracker = LoadTracker()
        self._state: dict[str, _Target] = {}
        self._remote: dict[str, LocalLoad] = {}
        self._task: asyncio.Task[None] | None = None
        self._http = http
        self.scrapes = 0

    # ------------------------------------------------------------------ observer

    def dispatched(self, pick: Pick, ctx: RouteContext) -> Ticket:
        """Dispatcher hook: an attempt was sent to ``pick.deployment``."""
        key = engine_key(pick.deployment)
        tokens = pick.uncached_tokens
        if tokens is None:
            tokens = ctx.request.prompt_tokens
        target = self._state.setdefault(key, _Target())
        target.avg_prefill += 0.2 * (tokens - target.avg_prefill)
        return self.tracker.dispatched(key, tokens)

    def first_token(self, ticket: object) -> None:
        if isinstance(ticket, Ticket):
            self.tracker.first_token(ticket)

    def finished(self, ticket: object) -> None:
        if isinstance(ticket, Ticket):
            self.tracker.finished(ticket)

    # ------------------------------------------------------------------ views

    def record(self, key: str, snapshot: EngineSnapshot) -> None:
        """Store a scrape of engine ``key`` (the scraper calls this; tests may too)."""
        target = self._state.setdefault(key, _Target())
        target.snapshot = snapshot
        target.local_at_scrape = self._local(key)
        target.failures = 0

    def snapshot(self, dep: Deployment) -> EngineSnapshot | None:
        target = self._state.get(engine_key(dep))
        return None if target is None else target.snapshot

    def fresh_snapshot(self, dep: Deployment) -> EngineSnapshot | None:
        """The last scrape of ``dep``'s engine when it is recent (None: none, or stale)."""
        snap = self.snapshot(dep)
        return snap if self._fresh(snap) else None

    def _local(self, key: str) -> LocalLoad:
        load = self.tracker.load(key)
        remote = self._remote.get(key)
        return load if remote is None else load.add(remote)

    def _fresh(self, snap: EngineSnapshot | None) -> bool:
        if snap is None or not snap.known:
            return False
        max_age = max(1.0, 10 * self.config.scrape_interval_s)
        return self._clock() - snap.at <= max_age

    def view(self, dep: Deployment) -> EngineView:
        """The engine's load now: last scrape + what changed locally since, never below local."""
        key = engine_key(dep)
        local = self._local(key)
        target = self._state.get(key)
        snap = target.snapshot if target is not None else None
        if target is None or not self._fresh(snap) or snap is None:
            return EngineView(
                engine=snap.engine if snap is not None else "",
                queued=float(local.prefilling),
                queued_prefill_tokens=float(local.prefill_tokens),
                running=float(local.decoding),
                kv_usage=snap.kv_usage if snap is not None else 0.0,
                block_size=snap.block_size if snap is not None else None,
                num_blocks=snap.num_blocks if snap is not None else None,
            )
        before = target.local_at_scrape or LocalLoad()
        total = max(float(local.total), snap.waiting + snap.running + local.total - before.total)
        queued = max(float(local.prefilling), snap.waiting + local.prefilling - before.prefilling)
        queued = min(queued, total)
        extra = max(0.0, queued - local.prefilling)  # requests of other clients in the queue
        tokens = local.prefill_tokens + extra * max(target.avg_prefill, 1.0)
        return EngineView(
            engine=snap.engine,
            queued=queued,
            queued_prefill_tokens=tokens,
            running=max(0.0, total - queued),
            kv_usage=snap.kv_usage,
            block_size=snap.block_size,
            num_blocks=snap.num_blocks,
            scraped=True,
        )

    # ------------------------------------------------------------------ scraping

    def _engines(self) -> dict[str, Deployment]:
        out: dict[str, Deployment] = {}
        for dep in self._targets():
            out.setdefault(engine_key(dep), dep)
        return out

    async def _scrape(self, key: str, dep: Deployment, now: float) -> None:
        target = self._state.setdefault(key, _Target())
        if target.next_try > now:
            return
        headers = {}
        if dep.config.api_key:
            headers["Authorization"] = f"Bearer {dep.config.api_key}"
        timeout = aiohttp.ClientTimeout(total=self.config.scrape_timeout_s)
        try:
            async with self._http.session().get(
                metrics_url(dep), headers=headers, timeout=timeout
            ) as resp:
                if resp.status != 200:
                    raise aiohttp.ClientResponseError(
                        resp.request_info, (), status=resp.status, message="not 200"
                    )
                text = await resp.text()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            target.failures += 1
            backoff = self.config.scrape_interval_s * 2 ** min(target.failures, 10)
            target.next_try = now + min(_MAX_BACKOFF_S, backoff)
            if target.failures == 3:
                log.warning("engine metrics of %s unavailable: %s", key, exc)
            return
        self.record(key, parse_engine_metrics(text, at=self._clock()))

    async def scrape_once(self) -> None:
        """Scrape every engine once (concurrently); failures back off exponentially."""
        now = self._clock()
        engines = self._engines()
        await asyncio.gather(*(self._scrape(k, d, now) for k, d in engines.items()))
        for gone in set(self._state) - set(engines) - set(self.tracker.loads()):
            del self._state[gone]
        self.scrapes += 1

    async def sync_share(self) -> None:
        """Publish this replica's loads and read the others' (no-op without a share)."""
        if self._share is None:
            return
        try:
            await self._share.publish(self.tracker.loads())
            self._remote = await self._share.others()
        except Exception as exc:  # Redis down: keep routing on local numbers
            log.warning("routing load share unavailable: %s", exc)
            self._remote = {}

    async def _run(self) -> None:
        while True:
            started = self._clock()
            await self.scrape_once()
            await self.sync_share()
            spent = self._clock() - started
            await asyncio.sleep(max(0.0, self.config.scrape_interval_s - spent))

    async def start(self) -> None:
        """Start the background loop (call from inside the running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="fleetgate-engine-stats"
            )

    async def aclose(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if self._share is not None:
            with contextlib.suppress(Exception):
                await self._share.aclose()
