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

A built-in feature's section written under ``extensions.<name>`` (the old form, before the
feature declared it) is still read, with a deprecation line in the log each time the config
is loaded or reloaded; written both ways it is refused.

`switched_on` is the one rule that switches a feature off (`fleetgate.feature.Switch`): its
section says ``enabled: false``, or, for an opt-in feature, the section is absent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from fleetgate.config.schema import AliasConfig, GatewayConfig
from fleetgate.config.sectioned import section_problems
from fleetgate.errors import ConfigError

__all__ = [
    "Effect",
    "AliasSection",
    "Declared",
    "OptionalSection",
    "Section",
    "check_sections",
    "switched_on",
]

log = logging.getLogger("fleetgate.config")

M = TypeVar("M", bound=BaseModel)
_BOOL = TypeAdapter(bool)


def _legacy(config: GatewayConfig, name: str) -> Any:
    """The section ``name`` as written under ``extensions`` (the old form), else None."""
    return config.extensions.get(name) if name not in config.sections else None


def _read_section(config: GatewayConfig, name: str, model: type[M], *, optional: bool) -> Any:
    legacy = _legacy(config, name)
    if legacy is None:
        return config.read_section(name, model, optional=optional)
    try:
        return model.model_validate(legacy)
    except ValidationError as exc:
        problems = section_problems(f"extensions.{name}", legacy, exc)
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems)) from None


def switched_on(config: GatewayConfig, name: str, *, opt_in: bool = False) -> bool:
    """Whether the feature whose section is ``name`` is on: off when the section says
    ``enabled: false``, or, with ``opt_in``, when it is absent; on otherwise. ``name`` may be
    a ground-floor section (``tenancy``) or a feature's (``safety``, or the old
    ``extensions.<name>`` form)."""
    if name in type(config).model_fields:
        return bool(getattr(getattr(config, name), "enabled", True))
    raw = config.sections.get(name)
    if raw is None:
        raw = _legacy(config, name)
    if raw is None:
        return not opt_in
    if not isinstance(raw, Mapping):
        return True  # not a mapping: its declaration refuses it when the config is checked
    try:
        return _BOOL.validate_python(raw.get("enabled", True))
    except ValidationError:
        return True  # refused by its declaration, naming the field


Effect = Literal["live", "restart"]
"""How a config reload applies a change: at once (``live``) or at the next restart."""


@dataclass(frozen=True)
class _Declaration(Generic[M]):
    name: str
    model: type[M]
    # A check against the rest of the config (an alias it names must be configured); raises
    # `ValueError`, reported under the section's name.
    check: Callable[[M, GatewayConfig], None] | None = None
    # How a reload applies a change inside the section, by path within it ("" the section
    # itself, "servers.*" any one server); the longest matching path decides, and a section
    # naming none needs a restart (`fleetgate.config.reload`).
    reload: Mapping[str, Effect] = field(default_factory=dict)
    # Paths (as in ``reload``) whose appearance or removal needs a restart whatever the rule
    # of their fields ("": the section itself, when adding it adds a stage at build)
    presence_restart: tuple[str, ...] = ()

    @property
    def optional(self) -> bool:
        return False


@dataclass(frozen=True)
class Section(_Declaration[M]):
    """A top-level section; absent: the model's defaults."""

    def of(self, config: GatewayConfig) -> M:
        value: M = _read_section(config, self.name, self.model, optional=False)
        return value


@dataclass(frozen=True)
class OptionalSection(_Declaration[M]):
    """A top-level section that switches its feature on: absent, ``of`` is None."""

    @property
    def optional(self) -> bool:
        return True

    def of(self, config: GatewayConfig) -> M | None:
        value: M | None = _read_section(config, self.name, self.model, optional=True)
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
    problems = _unknown("", config.sections, top) + _moved(config, top)
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


def _moved(config: GatewayConfig, top: Mapping[str, object]) -> list[str]:
    """Log each built-in section still written under ``extensions`` (deprecated); a section
    written both there and at the top level is a problem (which one would count?)."""
    problems = []
    for name in sorted(set(config.extensions) & set(top)):
        if name in config.sections:
            problems.append(f"extensions.{name}: also given as the top-level '{name}:'; keep one")
        else:
            log.warning(
                "config: 'extensions.%s' is deprecated; write it as the top-level '%s:' section",
                name, name,
            )  # fmt: skip
    return problems


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
