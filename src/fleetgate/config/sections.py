"""A feature's config section, declared in the feature's own package.

`fleetgate.config` holds only the ground floor (models, router, health, server, tenancy,
routing, extensions) and keeps every other top-level key raw (``GatewayConfig.sections``), as
it keeps ``extensions``. A feature declares its section next to its model; the feature list
(`fleetgate.app.SECTIONS`) hands the declarations to the loader, which validates them when the
config is loaded or reloaded, so a bad section is refused at load time naming the field
(``safety.checks.words.type: ...``). A section no feature declares is refused the same way.

Example (a feature's ``config.py``)::

    class QuotaConfig(BaseModel):
        per_day: int = Field(100, description="Requests a key may send per day.")

    SECTION = Section("quota", QuotaConfig)        # absent: the defaults
    SECTION.of(config).per_day

    SAFETY = OptionalSection("safety", SafetyConfig)  # absent: None (the feature is off)
    CACHE = AliasSection("cache", CacheConfig)         # per alias: models[].cache
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from fleetgate.config.schema import AliasConfig, GatewayConfig
from fleetgate.errors import ConfigError

__all__ = ["AliasSection", "Declared", "OptionalSection", "Section", "check_sections"]

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class _Declaration(Generic[M]):
    name: str
    model: type[M]
    # A check against the rest of the config (an alias it names must be configured); raises
    # `ValueError`, reported under the section's name.
    check: Callable[[M, GatewayConfig], None] | None = None

    @property
    def optional(self) -> bool:
        return False


@dataclass(frozen=True)
class Section(_Declaration[M]):
    """A top-level section; absent: the model's defaults."""

    def of(self, config: GatewayConfig) -> M:
        value: M = config.read_section(self.name, self.model, optional=False)
        return value


@dataclass(frozen=True)
class OptionalSection(_Declaration[M]):
    """A top-level section that switches its feature on: absent, ``of`` is None."""

    @property
    def optional(self) -> bool:
        return True

    def of(self, config: GatewayConfig) -> M | None:
        value: M | None = config.read_section(self.name, self.model, optional=True)
        return value


@dataclass(frozen=True)
class AliasSection(_Declaration[M]):
    """A key of each alias (``models[].cache``); absent on an alias: None for that alias."""

    @property
    def optional(self) -> bool:
        return True

    def of(self, alias: AliasConfig) -> M | None:
        value: M | None = alias.read_section(self.name, self.model, optional=True)
        return value


Declared = Section[Any] | OptionalSection[Any] | AliasSection[Any]
"""Any declaration, as the feature list hands them over."""


def check_sections(config: GatewayConfig, declared: Iterable[Declared]) -> None:
    """Validate every declared section of ``config`` (and refuse one no feature declares);
    one `ConfigError` names every bad field, as the loader does for the ground floor."""
    top: dict[str, Section[Any] | OptionalSection[Any]] = {}
    per_alias: dict[str, AliasSection[Any]] = {}
    for d in declared:
        if isinstance(d, AliasSection):
            per_alias[d.name] = d
        else:
            top[d.name] = d
    problems = _unknown("", config.sections, top)
    for section in top.values():
        problems += _read(partial(section.of, config))
    for i, alias in enumerate(config.models):
        where = f"models[{i}](alias={alias.alias})."
        problems += _unknown(where, alias.sections, per_alias)
        for each in per_alias.values():
            problems += [where + line for line in _read(partial(each.of, alias))]
    for decl in (*top.values(), *per_alias.values()):
        problems += _cross_check(config, decl)
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))


def _unknown(where: str, raw: dict[str, Any], known: Mapping[str, object]) -> list[str]:
    return [f"{where}{name}: Extra inputs are not permitted" for name in raw if name not in known]


def _read(read: Callable[[], object]) -> list[str]:
    """The ``path: message`` lines of the `ConfigError` that reading a section raised."""
    try:
        read()
    except ConfigError as exc:
        return exc.message.split("\n  ")[1:]
    return []


def _cross_check(config: GatewayConfig, decl: Declared) -> list[str]:
    if decl.check is None:
        return []
    try:
        values = (
            [decl.of(a) for a in config.models]
            if isinstance(decl, AliasSection)
            else [decl.of(config)]
        )
    except ConfigError:
        return []  # already named by its own validation
    problems = []
    for value in values:
        if value is None:
            continue
        try:
            decl.check(value, config)
        except ValueError as exc:
            problems.append(f"(root): Value error, {exc}")
    return problems
