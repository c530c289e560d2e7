"""`RegistryFollower`: every replica serves what the registry's stages say, within a second.

Each replica polls the registry's change counter every ``poll_interval_s`` (one indexed
single-row read); when it moved, it reads the stages and the ready versions' deployments and
rebuilds the route table through `fleetgate.routing.reload.TableManager` (the config reload
path: requests in flight finish on the table they started with). The replica that made a
change reloads at once (``changed()``). The request path never waits on any of this.

What it rewrites (``resolve``), for each alias with ``registry: {model, stage}``:

- the alias's deployments become those of the version now at that stage (their ``version``
  label set to the registry version, so metrics and canary splits see it); an empty stage
  leaves the deployments written in the config, if any;
- with ``releases.version_aliases``, one extra alias ``<alias>@<version>`` per ready version of
  the model, which is how ``fleetgate eval run --target chat@v2`` reaches exactly that version
  through the gateway.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import ValidationError

from fleetgate.config.schema import AliasConfig, DeploymentConfig, GatewayConfig
from fleetgate.releases.registry import Registry, ServingView
from fleetgate.routing.reload import TableManager
from fleetgate.tasks import cancel_and_wait

__all__ = ["RegistryFollower"]

log = logging.getLogger("fleetgate.releases")

Served = dict[tuple[str, str], tuple[DeploymentConfig, ...]]


def _deployments(view: ServingView) -> Served:
    out: Served = {}
    for (model, version), raw in view.deployments.items():
        try:
            out[(model, version)] = tuple(
                DeploymentConfig.model_validate({**d, "version": version}) for d in raw
            )
        except ValidationError as exc:
            log.error("registry %s@%s: its deployments are not valid now: %s", model, version, exc)
    return out


class RegistryFollower:
    """Keeps the route table's registry-following aliases on the registry's stages."""

    def __init__(
        self,
        registry: Registry,
        tables: TableManager,
        *,
        poll_interval_s: float = 0.5,
        version_aliases: bool = True,
    ) -> None:
        self.registry = registry
        self.tables = tables
        self.poll_interval_s = poll_interval_s
        self.version_aliases = version_aliases
        self.view: ServingView | None = None
        self._served: Served = {}
        self._task: asyncio.Task[None] | None = None
        self._loading = asyncio.Lock()
        self.loads = 0
        tables.add_resolver(self.resolve)

    async def load(self) -> bool:
        """Read the registry; rebuild the table when it changed. True when it did."""
        async with self._loading:
            view = await self.registry.serving_view()
            if self.view is not None and view.counter == self.view.counter:
                return False
            self.view, self._served = view, _deployments(view)
            self.loads += 1
        self.tables.refresh()
        return True

    async def changed(self) -> None:
        """After a change made here: follow it now rather than at the next poll."""
        await self.load()

    def resolve(self, config: GatewayConfig) -> GatewayConfig:
        """``config`` with registry-following aliases filled (see the module docstring)."""
        if self.view is None or not any(m.registry for m in config.models):
            return config
        names = {m.alias for m in config.models}
        models: list[AliasConfig] = []
        pinned: list[AliasConfig] = []
        for alias in config.models:
            ref = alias.registry
            if ref is None:
                models.append(alias)
                continue
            version = self.view.stages.get(ref.model, {}).get(ref.stage)
            serving = self._served.get((ref.model, version)) if version else None
            models.append(alias.model_copy(update={"deployments": serving}) if serving else alias)
            if self.version_aliases:
                pinned.extend(self._pinned(alias, ref.model, names))
        return config.model_copy(update={"models": (*models, *pinned)})

    def _pinned(self, alias: AliasConfig, model: str, taken: set[str]) -> list[AliasConfig]:
        out = []
        for (m, version), deployments in self._served.items():
            name = f"{alias.alias}@{version}"
            if m != model or name in taken:
                continue
            taken.add(name)
            update: dict[str, Any] = {
                "alias": name,
                "deployments": deployments,
                "registry": None,
                "fallbacks": (),
                "description": f"{model} version {version} (registry)",
            }
            out.append(alias.model_copy(update=update))
        return out

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._poll(), name="registry-poll")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                if self.view is None or await self.registry.counter() != self.view.counter:
                    await self.load()
            except Exception as exc:  # the store may be away: keep serving what we have
                log.debug("registry poll failed: %s", exc)
