"""The check registry: maps a config ``type`` to a factory. Built-ins register like anyone else.

Example (a third-party check)::

    registry = builtin_registry(http=resources.http)
    registry.register("no_shouting", lambda name, options: NoShouting(name=name, **options))
    guardrails = Guardrails(config, registry=registry)

The gateway passes the process's shared parts to `builtin_registry`: the side-service HTTP
session (guard models, moderation), the MiniLM embedder (classifier) and the worker process
that checks long texts off the event loop (words, pii, classifier), so every check built from
config uses them instead of opening its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from importlib import import_module
from pathlib import Path
from typing import Any

from fleetgate.errors import ConfigError
from fleetgate.resources.embedder import Embedder
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.safety.base import Action, Check
from fleetgate.safety.classifier.gloss import Glosser
from fleetgate.safety.config import CheckConfig
from fleetgate.safety.offload import TextWorker

__all__ = ["CheckFactory", "CheckRegistry", "builtin_registry"]

CheckFactory = Callable[[str, Mapping[str, Any]], Check]
"""``factory(name, options) -> Check``; raises ConfigError, TypeError or ValueError if bad."""


class CheckRegistry:
    """Check types by name."""

    def __init__(self) -> None:
        self._factories: dict[str, CheckFactory] = {}

    def register(self, type_name: str, factory: CheckFactory, *, replace: bool = False) -> None:
        if type_name in self._factories and not replace:
            raise ConfigError(f"safety check type {type_name!r} registered twice")
        self._factories[type_name] = factory

    def types(self) -> list[str]:
        return sorted(self._factories)

    def create(self, name: str, config: CheckConfig) -> Check:
        """Build the check called ``name`` from its config."""
        factory = self._factories.get(config.type)
        if factory is None:
            raise ConfigError(
                f"safety.checks.{name}: unknown type {config.type!r} (known: {self.types()})"
            )
        options = dict(config.options)
        if config.type in _HAS_ON_ERROR:
            options.setdefault("on_error", config.on_error)
        try:
            return factory(name, options)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"safety.checks.{name}: {exc}") from exc


# The checks that call a service over HTTP: type -> (module under fleetgate.safety.checks, class).
_HTTP_CHECKS: Mapping[str, tuple[str, str]] = {
    "llama_guard": ("llama_guard", "LlamaGuardCheck"),
    "qwen3guard": ("qwen3guard", "Qwen3GuardCheck"),
    "policy_guard": ("policy_guard", "PolicyGuardCheck"),
    "moderation": ("moderation", "ModerationCheck"),
}

# The types whose check takes the config's ``on_error``: the HTTP checks and the cascade.
_HAS_ON_ERROR = {*_HTTP_CHECKS, "cascade"}


def _words(worker: TextWorker | None) -> CheckFactory:
    return lambda name, options: _word_check(name, options, worker)


def _word_check(name: str, options: Mapping[str, Any], worker: TextWorker | None) -> Check:
    from fleetgate.safety.checks.words import (
        WordListCheck,
        default_reply_word_lists,
        default_word_lists,
    )

    opts = dict(options)
    defaults = bool(opts.pop("include_defaults", True))
    lists: dict[str, list[str]] = default_word_lists() if defaults else {}
    for category, entries in dict(opts.pop("lists", {})).items():
        lists.setdefault(str(category), []).extend(str(e) for e in entries)
    for path in opts.pop("files", []):
        try:
            data = json.loads(Path(path).read_text("utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"safety.checks.{name}: cannot read word list {path}: {exc}") from exc
        for category, entries in data.items():
            if not str(category).startswith("_"):
                lists.setdefault(str(category), []).extend(str(e) for e in entries)
    if opts:
        raise ConfigError(f"safety.checks.{name}: unknown options {sorted(opts)}")
    reply = default_reply_word_lists() if defaults else None
    return WordListCheck(lists, name=name, reply_lists=reply, worker=worker)


def _pii(worker: TextWorker | None) -> CheckFactory:
    def build(name: str, options: Mapping[str, Any]) -> Check:
        from fleetgate.safety.checks.pii import PIICheck

        return PIICheck(name=name, worker=worker, **options)

    return build


def _classifier(embedder: Embedder | None, worker: TextWorker | None) -> CheckFactory:
    glosser = Glosser()  # one dictionary for all classifier checks, parsed on first use

    def build(name: str, options: Mapping[str, Any]) -> Check:
        from fleetgate.safety.checks.classifier import ClassifierCheck

        opts = dict(options)
        for key in ("model_path", "cache_path"):
            if opts.get(key) is not None:
                opts[key] = Path(opts[key])
        return ClassifierCheck(name=name, embedder=embedder, glosser=glosser, worker=worker, **opts)

    return build


def _http_check(kind: str, http: OutboundHttp | None) -> CheckFactory:
    """A factory for one of `_HTTP_CHECKS`: ``on_error`` parsed, the process's shared session
    passed in; the module is imported on first build. Without a session it refuses to build
    (a check never opens a session of its own)."""
    module, cls = _HTTP_CHECKS[kind]

    def build(name: str, options: Mapping[str, Any]) -> Check:
        if http is None:
            raise ConfigError(
                f"safety.checks.{name}: a {kind} check calls a service over HTTP; build the "
                "registry with the process's outbound session (builtin_registry(http=...))"
            )
        check_cls = getattr(import_module(f"fleetgate.safety.checks.{module}"), cls)
        opts = dict(options)
        opts["on_error"] = Action(opts.get("on_error", "allow"))
        check: Check = check_cls(name=name, http=http, **opts)
        return check

    return build


def _cascade(registry: CheckRegistry) -> CheckFactory:
    """Stages are built by the same registry: ``stages: [{type, options, uncertain, name}]``."""

    def build(name: str, options: Mapping[str, Any]) -> Check:
        from fleetgate.safety.checks.cascade import CascadeCheck, CascadeStage

        opts = dict(options)
        raw = opts.pop("stages", None)
        on_error = Action(opts.pop("on_error", "allow"))
        if opts:
            raise ValueError(f"unknown cascade options: {sorted(opts)}")
        if not isinstance(raw, list):
            raise ValueError("a cascade needs 'stages': a list of {type, options, uncertain}")
        stages: list[CascadeStage] = []
        for i, item in enumerate(raw):
            if not isinstance(item, dict) or "type" not in item:
                raise ValueError(f"stages[{i}] must be an object with a 'type'")
            if item["type"] == "cascade":
                raise ValueError(f"stages[{i}]: a cascade cannot contain a cascade")
            extra = set(item) - {"type", "options", "uncertain", "name", "on_error"}
            if extra:
                raise ValueError(f"stages[{i}]: unknown keys {sorted(extra)}")
            stage_name = str(item.get("name") or item["type"])
            band = item.get("uncertain")
            if band is not None:
                ok = isinstance(band, list | tuple) and len(band) == 2
                if not ok or not all(isinstance(v, int | float) for v in band):
                    raise ValueError(f"stages[{i}].uncertain must be [low, high]")
                band = (float(band[0]), float(band[1]))
            sub = CheckConfig(type=item["type"], options=item.get("options") or {},
                              on_error=item.get("on_error", "allow"))  # fmt: skip
            check = registry.create(f"{name}.{stage_name}", sub)
            stages.append(CascadeStage(stage_name, check, band))
        return CascadeCheck(name=name, stages=stages, on_error=on_error)

    return build


def builtin_registry(
    *,
    http: OutboundHttp | None = None,
    embedder: Embedder | None = None,
    worker: TextWorker | None = None,
) -> CheckRegistry:
    """A new registry holding the built-in check types: ``words``, ``pii``, ``classifier``,
    ``llama_guard``, ``qwen3guard``, ``policy_guard``, ``moderation``, ``cascade``.

    ``http``: the process's outbound session the HTTP checks use (the resource owner closes
    it; without one those types refuse to build); ``embedder``: the shared MiniLM embedder of
    classifier checks; ``worker``: the process the text checks run long texts in (the caller
    closes it). Without those two each check makes its own.
    """
    registry = CheckRegistry()
    registry.register("words", _words(worker))
    registry.register("pii", _pii(worker))
    registry.register("classifier", _classifier(embedder, worker))
    for kind in _HTTP_CHECKS:
        registry.register(kind, _http_check(kind, http))
    registry.register("cascade", _cascade(registry))
    return registry
