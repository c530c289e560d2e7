"""Which limit scopes a request counts against: its key, its team and its alias."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from fleetgate.config.schema import AliasLimits
from fleetgate.limits.base import Scope
from fleetgate.tenancy.model import KeyEntry, Limits, TeamEntry
from fleetgate.tenancy.periods import period_bounds

__all__ = ["ScopeBook", "scope_for"]


def scope_for(name: str, limits: Limits, now_ms: int) -> Scope | None:
    """The `Scope` of some limits now, or ``None`` when nothing is limited."""
    if (
        limits.rpm is None
        and limits.tpm is None
        and limits.max_parallel is None
        and limits.budget_nusd is None
    ):
        return None
    start, end = period_bounds(limits.budget_period, now_ms)
    return Scope(name, limits.rpm, limits.tpm, limits.max_parallel, limits.budget_nusd, start, end)


def team_scope(team: TeamEntry, now_ms: int) -> Scope | None:
    return scope_for(f"team:{team.id}", team.limits, now_ms)


class ScopeBook:
    """Builds and caches the scopes of each (key, alias) until the cache or period changes."""

    def __init__(
        self,
        alias_limits: Mapping[str, AliasLimits],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._cache: dict[tuple[int, str], tuple[int, tuple[Scope, ...]]] = {}
        self._alias: dict[str, Limits] = {}
        self.set_alias_limits(alias_limits)

    def set_alias_limits(self, alias_limits: Mapping[str, AliasLimits]) -> None:
        """Replace the per-alias limits (a config reload)."""
        self._alias = {
            name: Limits(rpm=v.rpm, tpm=v.tpm, max_parallel=v.max_parallel)
            for name, v in alias_limits.items()
        }
        self._cache.clear()

    def scopes(self, entry: KeyEntry | None, alias: str) -> tuple[Scope, ...]:
        now = int(self._clock() * 1000)
        cache_key = (id(entry), alias)
        hit = self._cache.get(cache_key)
        if hit is not None and hit[0] > now:
            return hit[1]
        found: list[Scope] = []
        if entry is not None:
            for scope in (
                scope_for(f"key:{entry.id}", entry.limits, now),
                team_scope(entry.team, now),
            ):
                if scope is not None:
                    found.append(scope)
        limits = self._alias.get(alias)
        if limits is not None:
            scope = scope_for(f"alias:{alias}", limits, now)
            if scope is not None:
                found.append(scope)
        result = tuple(found)
        valid_until = min([s.period_end_ms for s in result] + [now + 60_000])
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[cache_key] = (valid_until, result)
        return result

    def clear(self) -> None:
        """Forget cached scopes (call after the key cache reloads)."""
        self._cache.clear()
