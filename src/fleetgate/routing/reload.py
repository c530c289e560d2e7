"""Holds the live route table and swaps in a new one on reload (file change, SIGHUP, admin).

An invalid new config is refused and the old table kept; requests in flight finish on the
table they started with.

Each swap leaves a `fleetgate.config.reload.ReloadChange` in ``change``: the parts applied,
the parts waiting for a restart (measured against the config the process started with) and
the features that could not take the new config. A *check* (``add_check``) may refuse a
config before anything is swapped.

A *resolver* (``add_resolver``) rewrites each config before its table is built: the releases
feature fills the deployments of aliases that follow a registry stage. ``refresh()`` rebuilds
the table from the last config applied, when what a resolver answers has changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from fleetgate.config.loader import load_config
from fleetgate.config.reload import GROUND, ReloadChange, ReloadRules, compare
from fleetgate.config.schema import GatewayConfig
from fleetgate.errors import ConfigError, FleetgateError
from fleetgate.routing.deployment import DeploymentState
from fleetgate.routing.strategies import StrategyRegistry
from fleetgate.routing.table import ProviderFactory, RouteTable
from fleetgate.tasks import cancel_and_wait

__all__ = ["TableManager"]

log = logging.getLogger("fleetgate.config")


class TableManager:
    def __init__(
        self,
        config: GatewayConfig,
        providers: ProviderFactory,
        strategies: StrategyRegistry,
        path: Path | None = None,
        reload_rules: ReloadRules = GROUND,
    ) -> None:
        self._providers = providers
        self.reload_rules = reload_rules  # what a reload applies live (the features' included)
        self._strategies = strategies
        self._states: dict[str, DeploymentState] = {}
        self.path = path
        self._listeners: list[Callable[[RouteTable], Iterable[str] | None]] = []
        self._resolvers: list[Callable[[GatewayConfig], GatewayConfig]] = []
        self._checks: list[Callable[[GatewayConfig], None]] = []
        self.source = config  # the config as written, before resolvers
        self.started = config  # what the parts built once (stages, listeners) were built from
        self.change = ReloadChange()  # what the last swap did
        self.table = RouteTable.build(config, providers, strategies, self._states)
        self._mtime = self._stat()
        self._task: asyncio.Task[None] | None = None
        self.generation = 1
        # told of every reload that re-read the file: (source, result), source ``admin``,
        # ``file`` (the watcher) or ``sighup``, result the change's status or ``refused``
        self.on_reload: Callable[[str, str], None] = lambda source, result: None

    def subscribe(self, listener: Callable[[RouteTable], Iterable[str] | None]) -> None:
        """Call ``listener`` with each new table after it is swapped in; it may answer the
        names of the parts that could not take it (``ReloadChange.not_applied``)."""
        self._listeners.append(listener)

    def add_check(self, check: Callable[[GatewayConfig], None]) -> None:
        """Run ``check`` on every config before it is swapped in; its `ConfigError` refuses it."""
        self._checks.append(check)

    def add_resolver(self, resolver: Callable[[GatewayConfig], GatewayConfig]) -> None:
        """Rewrite every config applied from now on with ``resolver`` (then ``refresh()``)."""
        self._resolvers.append(resolver)

    def refresh(self) -> RouteTable:
        """Rebuild the table from the last config applied (a resolver's answer changed)."""
        return self.apply(self.source)

    def _stat(self) -> float:
        if self.path is None:
            return 0.0
        try:
            return self.path.stat().st_mtime
        except OSError:
            return 0.0

    def apply(self, config: GatewayConfig) -> RouteTable:
        """Swap in ``config``; raises `ConfigError` (and keeps the old table) if it can't."""
        for check in self._checks:
            check(config)
        resolved = config
        for resolve in self._resolvers:
            resolved = resolve(resolved)
        states = dict(self._states)
        table = RouteTable.build(resolved, self._providers, self._strategies, states)
        change = compare(self.source, config, self.started, self.reload_rules)
        self.source = config
        self._states.clear()
        self._states.update(states)
        self.table = table
        self.generation += 1
        failed = [name for listener in self._listeners for name in listener(table) or ()]
        self.change = ReloadChange(change.applied, change.restart_required, failed)
        log.info(
            "config applied (generation %d, %d aliases)", self.generation, len(table.aliases())
        )
        if change.restart_required:
            log.warning(
                "config: %s changed but takes effect at the next restart",
                ", ".join(change.restart_required),
            )
        return table

    def reload(self, source: str = "admin") -> RouteTable:
        """Re-read the config file (``on_reload`` is told, as ``source``, how it went)."""
        try:
            if self.path is None:
                raise ConfigError("no config file to reload")
            self._mtime = self._stat()
            table = self.apply(load_config(self.path))
        except FleetgateError:
            self.on_reload(source, "refused")
            raise
        self.on_reload(source, self.change.status)
        return table

    def try_reload(self, source: str = "sighup") -> bool:
        """`reload`, logging a refusal instead of raising it (SIGHUP, the file watcher)."""
        try:
            self.reload(source)
        except FleetgateError as exc:
            log.error("config reload refused, keeping the old config: %s", exc.message)
            return False
        return True

    async def _watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            mtime = self._stat()
            if mtime and mtime != self._mtime:
                self._mtime = mtime
                self.try_reload("file")

    async def start(self, interval: float = 1.0) -> None:
        """Watch the config file (if there is one) and reload it when it changes."""
        if self.path is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch(interval))

    async def aclose(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
