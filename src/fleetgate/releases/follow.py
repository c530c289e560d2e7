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
  through the gateway;
- while a rollout of the alias is running or paused, the candidate's deployments are added to
  the alias's, and `RolloutPicker` sends the rollout's percent of requests to them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from fleetgate.config.schema import AliasConfig, DeploymentConfig, GatewayConfig
from fleetgate.releases.outcomes import PICKED
from fleetgate.releases.registry import Registry, ServingView
from fleetgate.releases.rollouts import Rollout, RolloutStore
from fleetgate.routing.context import RouteContext
from fleetgate.routing.deployment import Deployment
from fleetgate.routing.dispatch import VersionPicker
from fleetgate.routing.reload import TableManager
from fleetgate.tasks import RunsInBackground, periodic

__all__ = ["RegistryFollower", "RolloutPicker"]

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


class RegistryFollower(RunsInBackground):
    """Keeps the route table's registry-following aliases on the registry's stages."""

    def __init__(
        self,
        registry: Registry,
        tables: TableManager,
        *,
        poll_interval_s: float = 0.5,
        version_aliases: bool = True,
        rollouts: RolloutStore | None = None,
    ) -> None:
        self.registry = registry
        self.rollout_store = rollouts
        self.rollouts: dict[str, Rollout] = {}  # active rollouts by alias
        self.tables = tables
        self.poll_interval_s = poll_interval_s
        self.version_aliases = version_aliases
        self.view: ServingView | None = None
        self._served: Served = {}
        self._task = periodic(
            lambda: self.poll_interval_s,
            self._poll,
            log,
            "registry poll failed",
            level=logging.DEBUG,
            name="registry-poll",
        )
        self._loading = asyncio.Lock()
        self.loads = 0
        tables.add_resolver(self.resolve)

    async def load(self) -> bool:
        """Read the registry; rebuild the table when it changed. True when it did."""
        async with self._loading:
            view = await self.registry.serving_view()
            if self.view is not None and view.counter == self.view.counter:
                return False
            active: dict[str, Rollout] = {}
            if self.rollout_store is not None:
                active = {r.alias: r for r in await self.rollout_store.all() if r.active}
            self.view, self._served, self.rollouts = view, _deployments(view), active
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
            rollout = self.rollouts.get(alias.alias)
            if serving and rollout is not None and rollout.model == ref.model:
                serving = (*serving, *self._served.get((ref.model, rollout.candidate), ()))
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

    async def _poll(self) -> None:
        """Every ``poll_interval_s``: load again when the registry changed (a failure, the
        store away, keeps serving what we have)."""
        if self.view is None or await self.registry.counter() != self.view.counter:
            await self.load()


class RolloutPicker:
    """The dispatcher's version picker: a running rollout's percent goes to its candidate,
    the rest to its baseline; aliases without one are left to ``then`` (canary splits)."""

    def __init__(
        self,
        follower: RegistryFollower,
        then: VersionPicker | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.follower = follower
        self.then = then
        self._rng = rng or random.Random()

    def narrow(
        self, alias: str, candidates: Sequence[Deployment], ctx: RouteContext
    ) -> list[Deployment]:
        rollout = self.follower.rollouts.get(alias)
        if rollout is None:
            return self.then.narrow(alias, candidates, ctx) if self.then else list(candidates)
        chosen = rollout.candidate if self._rng.uniform(0, 100) < rollout.percent else None
        version = chosen or rollout.baseline
        now = time.monotonic()
        pinned = [d for d in candidates if d.version == version]
        if not any(d.state.healthy(now) for d in pinned):
            version = rollout.baseline
            pinned = [d for d in candidates if d.version == version] or list(candidates)
        state = getattr(ctx.request, "state", None)
        if state is not None:  # the version of a request whose every attempt fails
            state[PICKED] = version
        return pinned

    def retry_version(self, alias: str, failed: Deployment) -> str | None:
        """After the candidate failed an attempt, the request's retries go to the baseline:
        a failing candidate costs a client nothing while another version can answer."""
        rollout = self.follower.rollouts.get(alias)
        if rollout is None:
            return self.then.retry_version(alias, failed) if self.then else None
        return rollout.baseline if failed.version == rollout.candidate else None
