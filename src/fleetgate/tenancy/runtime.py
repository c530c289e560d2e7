"""`Tenancy`: every tenancy part built from Settings and config, started and stopped together.

`fleetgate.tenancy.feature.TenancyFeature` puts it on the request path (the first stage)::

    tenancy = Tenancy(settings, config.tenancy, metrics.registry, resources=resources)
    core.auth.add(tenancy.cache)   # virtual keys, after the master key (fleetgate.core)
    await tenancy.start()   # migrate, replay the spool, load keys, seed budgets
    ...
    await tenancy.aclose()

The database, the limiter's Redis connection and the change feed's Redis pool come from the
process's `fleetgate.resources.Resources` (which closes them, after the tenancy's `aclose`).
"""

from __future__ import annotations

import asyncio
import logging

from fleetgate.config.schema import TenancyConfig
from fleetgate.config.settings import Settings
from fleetgate.limits.base import Limiter
from fleetgate.limits.memory import MemoryLimiter
from fleetgate.limits.redis import RedisLimiter
from fleetgate.resources import Resources
from fleetgate.tasks import cancel_and_wait
from fleetgate.telemetry.registry import Registry
from fleetgate.tenancy.alerts import AlertNotifier
from fleetgate.tenancy.budgets import Budgets
from fleetgate.tenancy.cache import KeyCache
from fleetgate.tenancy.key_use import KeyUse
from fleetgate.tenancy.scopes import ScopeBook
from fleetgate.tenancy.service import TenancyService
from fleetgate.tenancy.settles import Settles
from fleetgate.tenancy.stage import TenancyStage
from fleetgate.tenancy.sync import CacheSync
from fleetgate.tenancy.usage_metrics import SpendMetrics
from fleetgate.tenancy.writer import RecordWriter

__all__ = ["Tenancy"]

log = logging.getLogger("fleetgate.tenancy")


class Tenancy:
    """Store, key cache and its sync, limiter, budgets, alerts, spend writer, stage, service."""

    def __init__(
        self,
        settings: Settings,
        config: TenancyConfig,
        registry: Registry,
        *,
        resources: Resources,
    ) -> None:
        self.config = config
        self.resources = resources
        self._store_ready = False
        self._store_task: asyncio.Task[None] | None = None
        self.db = self.resources.databases.get(settings.database_url, settings.data_dir)
        self.cache = KeyCache(self.db)
        unavailable = registry.counter(
            "fleetgate_limiter_unavailable_total",
            "Requests admitted (fail_open) or refused (fail_closed) because Redis was away.",
            ("policy",),
        )
        write_failures = registry.counter(
            "fleetgate_spend_write_failures_total",
            "Failed batch writes of spend/audit records (records stay spooled).",
        )
        self.limiter: Limiter
        if settings.redis_url:
            self.limiter = RedisLimiter(
                self.resources.redis.commands(settings.redis_url),
                prefix=config.redis_prefix,
                policy=config.limiter_failure,
                on_unavailable=lambda policy: unavailable.labels(policy).inc(),
            )
        else:
            self.limiter = MemoryLimiter()
        self.sync = CacheSync(
            self.cache,
            self.resources.redis.client(settings.redis_url) if settings.redis_url else None,
            prefix=config.redis_prefix,
            poll_interval_s=config.poll_interval_s,
        )
        refused = registry.counter(
            "fleetgate_spend_dead_letters_total",
            "Spend/audit records the store refused, set aside in the dead-letter file.",
        )
        lost = registry.counter(
            "fleetgate_spend_dropped_total",
            "Spend/audit records dropped: the spool failed and the memory queue was full.",
        )
        self.writer = RecordWriter(
            self.db,
            settings.data_dir / "spool",
            batch_size=config.spend_batch_size,
            flush_interval_s=config.spend_flush_interval_s,
            fsync=config.spool_fsync,
            on_error=lambda _exc: write_failures.inc(),
            on_refused=refused.inc,
            on_dropped=lost.inc,
        )
        pending = registry.gauge(
            "fleetgate_spend_pending_records", "Spend/audit records not yet in the store."
        )
        pending.set_collector(lambda: [((), float(self.writer.pending()))])
        held = registry.gauge(
            "fleetgate_spend_memory_records",
            "Spend/audit records waiting in memory (the spool on disk holds the rest).",
        )
        held.set_collector(lambda: [((), float(self.writer.held()))])
        self.alerts = AlertNotifier(self.db, config.alert_webhook, http=self.resources.http)
        self.budgets = Budgets(
            self.db,
            self.limiter,
            self.cache,
            self.alerts,
            config.alert_thresholds,
            registry,
            refresh_s=config.budget_refresh_s,
        )
        self.key_use = KeyUse(self.db)
        self._key_use_task: asyncio.Task[None] | None = None
        self.cache.subscribe(lambda snap: self.key_use.forget(set(snap.by_id)))
        self.scopes = ScopeBook(config.alias_limits)
        self.cache.subscribe(lambda _snap: self.scopes.clear())
        dropped = registry.counter(
            "fleetgate_settles_dropped_total",
            "Settles dropped because too many waited for the limiter (their slots expire).",
        )
        self.settles = Settles(self.limiter, self.budgets.settled, on_dropped=dropped.inc)
        queued = registry.gauge(
            "fleetgate_settles_queued", "Settles waiting for the limiter to be reachable again."
        )
        queued.set_collector(lambda: [((), float(self.settles.queued()))])
        self.stage = TenancyStage(
            self.cache,
            self.limiter,
            self.scopes,
            self.writer,
            self.budgets,
            audit_requests=config.audit_requests,
            settles=self.settles,
            key_use=self.key_use,
            usage=SpendMetrics(registry, self.cache),
            overlap=config.overlap_reserve,
            overlapped=registry.counter(
                "fleetgate_reservations_overlapped_total",
                "Reservations answered while the upstream call was in flight, by answer "
                "(refused or unavailable: an upstream call aborted).",
                ("answer",),
            ),
        )
        self.service = TenancyService(self.db, self.sync.changed)

    def reconfigure(self, config: TenancyConfig) -> None:
        """Apply a reloaded ``tenancy:`` section. Everything takes effect at once except
        ``enabled`` and ``redis_prefix``, which need a restart (logged)."""
        old, self.config = self.config, config
        for name in ("enabled", "redis_prefix"):
            if getattr(old, name) != getattr(config, name):
                log.warning("tenancy.%s changed: it takes effect at the next restart", name)
        if config.alias_limits != old.alias_limits:
            self.scopes.set_alias_limits(config.alias_limits)
        if isinstance(self.limiter, RedisLimiter):
            self.limiter.policy = config.limiter_failure
        self.alerts.webhook = config.alert_webhook
        self.budgets.thresholds = tuple(sorted(config.alert_thresholds))
        self.budgets.refresh_s = config.budget_refresh_s
        self.sync.poll_interval_s = config.poll_interval_s
        self.writer.batch_size = config.spend_batch_size
        self.writer.flush_interval_s = config.spend_flush_interval_s
        self.writer.fsync = config.spool_fsync
        self.stage.audit_requests = config.audit_requests
        self.stage.overlap = config.overlap_reserve

    @property
    def store_ready(self) -> bool:
        """The store was reached: migrated, keys loaded, budgets seeded."""
        return self._store_ready

    async def start(self) -> None:
        """Migrate the store, replay any spool left by a crash, load keys, seed budgets.

        A database that cannot be reached does not stop the gateway: it serves the master key
        (readiness says the database is missing), records wait in the spool, and the store is
        opened in the background as soon as it answers."""
        try:
            await self._open_store()
        except Exception as exc:
            log.error("the database is unreachable (%s); retrying in the background", exc)
            self._store_task = asyncio.get_running_loop().create_task(
                self._open_store_when_back(), name="fg-tenancy-store"
            )
        await self.writer.start()
        self._key_use_task = asyncio.get_running_loop().create_task(
            self.key_use.run(), name="fg-key-use"
        )

    async def _open_store(self) -> None:
        await self.resources.databases.migrate(self.db)
        await self.cache.load()
        await self.budgets.seed()
        self._store_ready = True
        await self.sync.start()
        await self.alerts.start()
        await self.budgets.start()

    async def _open_store_when_back(self, interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._open_store()
            except Exception as exc:
                log.debug("the database is still unreachable: %s", exc)
            else:
                log.warning("the database is back: keys loaded, budgets seeded")
                return

    async def aclose(self) -> None:
        await cancel_and_wait(self._store_task)
        await self.sync.aclose()
        await self.stage.drain()
        await cancel_and_wait(self._key_use_task)
        try:  # the last minute's uses
            await self.key_use.flush()
        except Exception as exc:
            log.warning("keys' last use not written at shutdown: %s", exc)
        await self.budgets.aclose()
        await self.writer.aclose()
        await self.alerts.aclose()
        await self.limiter.aclose()
