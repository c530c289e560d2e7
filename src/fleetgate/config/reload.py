"""What a config reload applies at once and what waits for a restart.

A reload (``POST /admin/config/reload``, the file watcher, SIGHUP) swaps in the new config and
tells every feature (``Feature.reconfigure``); some parts are read only when the gateway is
built (a section that adds a stage to the request path, a listener, a connection). `RULES`
decides, for every part of the config, which it is; `compare` turns two configs into the
sections each reload applied and the ones still waiting for a restart, so no answer says
"applied" for a section that is not in effect. The ground floor's sections have their rules
here (`RULES`); a feature declares its own with its section (``Section(..., reload=...,
presence_restart=...)``) and `ReloadRules.of` puts them together.

``restart_required`` is measured against the config the process *started* with: a change that
needs a restart stays listed on later reloads until the process restarts or the change is
undone.

Example::

    rules = ReloadRules.of(app.SECTIONS)
    change = compare(previous, new, started, rules)
    change.applied           # ["router.num_retries"]
    change.restart_required  # ["safety"]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.sections import Declared, Effect

__all__ = ["RULES", "ReloadChange", "ReloadRules", "compare", "restart_sections"]

RULES: dict[str, Effect] = {
    "models": "live",  # the route table is rebuilt; caches and KV-event feeds follow it
    "router": "live",
    "health": "live",
    "server": "restart",  # the listener, body limit, access log and tracer are built at start
    "server.body_timeout_s": "live",
    "tenancy": "live",
    "tenancy.enabled": "restart",
    "tenancy.redis_prefix": "restart",
    "routing": "live",
    "routing.redis_url": "restart",
    "routing.salt_secret": "restart",
    "extensions": "live",  # each plug-in feature reads its own in reconfigure
    # the old place of the console's section (its own rules are declared with it)
    "extensions.console.enabled": "restart",
    "extensions.console.oidc": "restart",
    "extensions.console.jwt": "restart",
}
"""Longest matching pattern wins; ``*`` matches any one name (a server, a key)."""


@dataclass(frozen=True)
class ReloadRules:
    """The rules a reload is judged by: the ground floor's (`RULES`) and the features'
    declared ones. ``presence``: paths whose appearance or removal needs a restart whatever
    the rule of their fields (a stage joins the request path, a server is connected, only
    when the gateway is built)."""

    rules: Mapping[str, Effect]
    presence: tuple[str, ...] = ()

    @classmethod
    def of(cls, sections: Iterable[Declared]) -> ReloadRules:
        rules = dict(RULES)
        presence: list[str] = []
        for d in sections:
            for path, effect in d.reload.items():
                rules[f"{d.name}.{path}" if path else d.name] = effect
            presence += [f"{d.name}.{p}" if p else d.name for p in d.presence_restart]
        return cls(rules, tuple(presence))


GROUND = ReloadRules(RULES)
"""The ground floor's rules alone (a feature's section then needs a restart)."""


@dataclass(frozen=True)
class ReloadChange:
    """What one reload did. ``applied``: parts changed and in effect now; ``restart_required``:
    parts that differ from the running process's and take effect at the next restart;
    ``not_applied``: features that failed to take the new config (they keep the old one)."""

    applied: list[str] = field(default_factory=list)
    restart_required: list[str] = field(default_factory=list)
    not_applied: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.not_applied:
            return "partly_applied"
        return "restart_required" if self.restart_required else "applied"

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "applied": self.applied,
            "restart_required": self.restart_required,
            "not_applied": self.not_applied,
        }


def compare(
    previous: GatewayConfig,
    new: GatewayConfig,
    started: GatewayConfig,
    rules: ReloadRules = GROUND,
) -> ReloadChange:
    """The parts of ``new`` applied live since ``previous``, and those that differ from
    ``started`` (what the process runs with) and need a restart."""
    applied = sorted({p for p, e in _changes(previous, new, rules) if e == "live"})
    return ReloadChange(applied=applied, restart_required=restart_sections(started, new, rules))


def restart_sections(
    started: GatewayConfig, new: GatewayConfig, rules: ReloadRules = GROUND
) -> list[str]:
    """The parts of ``new`` that differ from ``started`` and wait for a restart."""
    restart = {p for p, e in _changes(started, new, rules) if e == "restart"}
    if _follows_registry(new) and not _follows_registry(started):
        restart.add("models.registry")  # releases judges rollouts only from a restart
    return sorted(restart)


def _follows_registry(config: GatewayConfig) -> bool:
    return any(m.registry is not None for m in config.models)


def _changes(
    old: GatewayConfig, new: GatewayConfig, rules: ReloadRules
) -> Iterator[tuple[str, Effect]]:
    yield from _walk(old.model_dump(mode="json"), new.model_dump(mode="json"), (), rules)


def _walk(
    old: Any, new: Any, path: tuple[str, ...], rules: ReloadRules
) -> Iterator[tuple[str, Effect]]:
    if old == new:
        return
    if path and path[0] == "models":  # one part: the route table is rebuilt as a whole
        yield "models", RULES["models"]
        return
    if isinstance(old, Mapping) or isinstance(new, Mapping):
        if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
            if _matches_any(path, rules.presence):
                yield ".".join(path), "restart"
                return
        before = old if isinstance(old, Mapping) else {}
        after = new if isinstance(new, Mapping) else {}
        for key in sorted(set(before) | set(after)):
            if (key in before) != (key in after) and _matches_any((*path, key), rules.presence):
                yield ".".join((*path, key)), "restart"
            else:
                yield from _walk(before.get(key), after.get(key), (*path, key), rules)
        return
    yield ".".join(path), _effect(path, rules)


def _effect(path: tuple[str, ...], rules: ReloadRules) -> Effect:
    best: tuple[int, Effect] = (-1, "restart")  # anything no rule names: a restart
    for pattern, effect in rules.rules.items():
        parts = tuple(pattern.split("."))
        if len(parts) > best[0] and _prefix(parts, path):
            best = (len(parts), effect)
    return best[1]


def _prefix(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(pattern) <= len(path) and all(
        p == "*" or p == seg for p, seg in zip(pattern, path, strict=False)
    )


def _matches_any(path: tuple[str, ...], patterns: tuple[str, ...]) -> bool:
    return any(
        len(parts) == len(path) and _prefix(parts, path)
        for parts in (tuple(p.split(".")) for p in patterns)
    )
