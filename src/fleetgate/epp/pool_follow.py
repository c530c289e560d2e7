"""`PoolFollower`: the alias an InferencePool serves gets one deployment per ready pod.

The operator writes the alias in fleetgate's config with ONE deployment, the template of every
pod's (model, provider, price, settings); ``fleetgate epp --pool-name ... --pool-alias chat``
says its engines are the pool's pods. The follower is a resolver of the route table
(`fleetgate.routing.reload.TableManager.add_resolver`, as the releases feature's registry
stages are): every table built from then on has, for that alias, one copy of the template per
endpoint of the pool, its ``api_base`` at the pod (``http://<podIP>:<port>/v1``: the template's
scheme and path, the endpoint's address), named after the pod, and its ``kv_events`` sockets,
if any, at the pod's IP. An endpoint set that changed rebuilds the table through the config
reload path (``refresh``): a deployment that stays keeps its state (health, in-flight, rate
windows), a new one starts fresh, a gone one is dropped, and the table's listeners (the KV
index's subscriptions, the engine scrapers) follow as on a reload. Until the first list, the
alias has no deployment: the template itself never serves.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

from fleetgate.config.schema import AliasConfig, DeploymentConfig, GatewayConfig
from fleetgate.epp.pool import Endpoint
from fleetgate.errors import ConfigError
from fleetgate.routing.reload import TableManager

__all__ = ["PoolFollower", "deployment_at", "template_of"]

log = logging.getLogger("fleetgate.epp")


def template_of(config: GatewayConfig, alias: str) -> DeploymentConfig:
    """The one deployment of ``alias``: the template of the pool's; `ConfigError` otherwise."""
    found = [m for m in config.models if m.alias == alias]
    if not found:
        raise ConfigError(f"--pool-alias {alias!r}: no such alias in the config")
    if len(found[0].deployments) != 1:
        raise ConfigError(
            f"--pool-alias {alias!r}: write exactly one deployment, the template of each pod's "
            f"(it has {len(found[0].deployments)})"
        )
    return found[0].deployments[0]


def _at(url: str, host: str, port: int | None = None) -> str:
    parts = urlsplit(url)
    where = f"{host}:{parts.port if port is None else port}"
    return urlunsplit((parts.scheme, where, parts.path, parts.query, parts.fragment))


def deployment_at(template: DeploymentConfig, endpoint: Endpoint) -> DeploymentConfig:
    """``template`` serving from ``endpoint``."""
    update: dict[str, object] = {
        "api_base": _at(template.api_base, endpoint.host, endpoint.port),
        "name": endpoint.name,
    }
    kv = template.kv_events
    if kv is not None and kv.endpoint.startswith("tcp://"):
        host = endpoint.host
        replay = kv.replay_endpoint
        update["kv_events"] = kv.model_copy(update={
            "endpoint": _at(kv.endpoint, host),
            "replay_endpoint": _at(replay, host) if replay and replay.startswith("tcp://")
            else replay,
        })  # fmt: skip
    return template.model_copy(update=update)


class PoolFollower:
    """Keeps ``alias`` on the pool's endpoints (see the module docstring)."""

    def __init__(self, tables: TableManager, alias: str) -> None:
        template_of(tables.source, alias)  # refused before anything is swapped
        self.alias = alias
        self.endpoints: tuple[Endpoint, ...] = ()
        self._tables = tables
        tables.add_check(self.check)
        tables.add_resolver(self.resolve)
        tables.refresh()  # the template never serves: no deployment until the first list

    def check(self, config: GatewayConfig) -> None:
        """A reloaded config still has the alias, with one template deployment."""
        template_of(config, self.alias)

    def resolve(self, config: GatewayConfig) -> GatewayConfig:
        models: list[AliasConfig] = []
        for alias in config.models:
            if alias.alias == self.alias and alias.deployments:
                template = alias.deployments[0]
                deps = tuple(deployment_at(template, e) for e in self.endpoints)
                alias = alias.model_copy(update={"deployments": deps})
            models.append(alias)
        return config.model_copy(update={"models": tuple(models)})

    def update(self, endpoints: tuple[Endpoint, ...]) -> None:
        """The pool's endpoints now: the table is rebuilt when they changed."""
        if endpoints == self.endpoints:
            return
        before, self.endpoints = self.endpoints, endpoints
        try:
            self._tables.refresh()
        except Exception:
            self.endpoints = before  # the table still serves those
            raise
        log.info("alias %s: %d deployments from the pool", self.alias, len(endpoints))
