"""`SafetyRuntime`: guardrails, the audit queue and the stage of one gateway process.

Built by the app from the ``safety:`` config section; the lifespan calls :meth:`start` (audit
workers, model warm-up in the background, watching the policy overrides) and :meth:`aclose`.

Policies change at run time in two ways, both swapping in a new `Guardrails` between requests
(checks whose config did not change are reused, so the classifier is not reloaded):

- a config reload (``/admin/config/reload``, SIGHUP, the file watcher): :meth:`set_base`;
- the admin API: :meth:`put_policy` / :meth:`map_alias` / :meth:`map_team` store *overrides*
  in the database (``fg_shared_state``, kind ``safety_overrides``, one row per policy or
  mapping); every replica follows them through `fleetgate.resources.SharedStates` (within a
  quarter second). An overrides file left by an older version
  (``<data_dir>/safety-policies.json``) is imported once, then renamed ``*.imported``.
  Without a database (tests, embedding) overrides stay in this process.

Checks built from config use the process's shared parts (`fleetgate.resources.Resources`): the
side-service HTTP session (guard model, moderation, the audit webhook) and the one MiniLM
(classifier checks).

Example::

    rt = SafetyRuntime(SAFETY_SECTION.of(cfg), metrics.registry, data_dir=settings.data_dir,
                       sink=audit_log.write, on_suspend=suspend_key, resources=resources,
                       database=resources.databases.get(settings.database_url, settings.data_dir))
    # rt.stage joins the request path through fleetgate.safety.feature.SafetyFeature
    await rt.start(); ...; await rt.aclose()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleetgate.errors import ConfigError
from fleetgate.resources import MiniLMEmbedder, Resources
from fleetgate.safety.audit import AuditQueue, Hook
from fleetgate.safety.base import Check, close_check
from fleetgate.safety.config import CheckConfig, PolicyConfig, SafetyConfig
from fleetgate.safety.metrics import SafetyMetrics
from fleetgate.safety.offload import TextWorker
from fleetgate.safety.policy import Guardrails
from fleetgate.safety.registry import builtin_registry
from fleetgate.safety.stage import SafetyStage
from fleetgate.safety.strikes import StrikeCounter
from fleetgate.store.database import Database
from fleetgate.store.errors import not_stored
from fleetgate.tasks import cancel_and_wait
from fleetgate.telemetry.registry import Registry

__all__ = ["SafetyRuntime", "localize"]

log = logging.getLogger("fleetgate.safety")

OVERRIDES_FILE = "safety-policies.json"  # where overrides lived before the database
OVERRIDES_KIND = "safety_overrides"
MAX_NAME = 128  # policy, alias and team names in overrides
RETIRE_AFTER_S = 900.0  # longer than any request (upstream total timeout: 600 s by default)
_SECTIONS = ("policies", "aliases", "teams")


def localize(config: SafetyConfig, data_dir: Path) -> SafetyConfig:
    """Point classifier checks without a model or cache path at ``<data_dir>/safety/``."""
    checks: dict[str, CheckConfig] = {}
    for name, check in config.checks.items():
        opts = check.options
        if check.type == "classifier" and not opts.get("model_path") and not opts.get("cache_path"):
            path = data_dir / "safety" / f"classifier-{name}.npz"
            check = check.model_copy(update={"options": {**opts, "cache_path": str(path)}})
        checks[name] = check
    return config.model_copy(update={"checks": checks})


def _merge(base: SafetyConfig, overrides: Mapping[str, Any]) -> SafetyConfig:
    data = base.model_dump(mode="json")
    for section in _SECTIONS:
        data[section] = {**data[section], **overrides.get(section, {})}
    try:
        return SafetyConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"safety policy change refused: {exc}") from None


class SafetyRuntime:
    """Owns the live `Guardrails` (swapped on change), the `AuditQueue` and the `SafetyStage`."""

    def __init__(
        self,
        config: SafetyConfig,
        registry: Registry,
        *,
        data_dir: Path,
        sink: Hook | None = None,
        on_suspend: Hook | None = None,
        team_name: Callable[[str], str | None] | None = None,
        checks: Mapping[str, Check] | None = None,
        resources: Resources,
        database: Database | None = None,
    ) -> None:
        """``checks``: pre-built instances used for those names (tests, embedding);
        ``resources``: the process's shared owner (which closes what it holds after the
        runtime's `aclose`); ``database``: where overrides and strike counts are shared
        between replicas (None: this process only)."""
        self.base = config
        self.resources = resources
        # long texts are checked in one worker process shared by all checks (off the loop)
        self.text_worker = TextWorker()
        self._registry = builtin_registry(
            http=self.resources.http,
            embedder=MiniLMEmbedder(self.resources.minilm, quantize=True, with_max=True),
            worker=self.text_worker,
        )
        self.data_dir = data_dir
        self.metrics = SafetyMetrics(registry)
        self._fixed = dict(checks or {})
        self.overrides: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
        self._database = database
        self._shared = (
            self.resources.shared.state(database, OVERRIDES_KIND) if database is not None else None
        )
        self.guardrails = self._build(config, {})
        # Checks a config change replaced, with when: in-flight requests may still use them, so
        # they are closed once older than RETIRE_AFTER_S (longer than any request may run).
        self._retired: list[tuple[float, list[Check]]] = []
        a = config.audit
        self.audit: AuditQueue | None = None
        if a.enabled:
            self.audit = AuditQueue(
                [], metrics=self.metrics, sink=sink, webhook_url=a.webhook_url,
                webhook_timeout_s=a.webhook_timeout_s, suspend_after=a.suspend_after,
                on_suspend=on_suspend, queue_size=a.queue_size, workers=a.workers,
                http=self.resources.http,
                strikes=StrikeCounter(database) if database is not None else None,
            )  # fmt: skip
        self.stage = SafetyStage(self.guardrails, self.audit, team_name=team_name, events=sink)
        self._tasks: list[asyncio.Task[None]] = []

    # -- building and swapping ---------------------------------------------------------------

    def _build(self, config: SafetyConfig, reuse: Mapping[str, Check]) -> Guardrails:
        local = localize(config, self.data_dir)
        return Guardrails(
            local, registry=self._registry, metrics=self.metrics, checks={**reuse, **self._fixed}
        )

    @property
    def config(self) -> SafetyConfig:
        """The safety config in force (the config file's section plus admin overrides)."""
        return self.guardrails.config

    def _apply(self, config: SafetyConfig) -> Guardrails:
        old = self.guardrails
        new_local = localize(config, self.data_dir)
        reuse = {
            name: check for name, check in old.checks.items()
            if old.config.checks.get(name) == new_local.checks.get(name)
        }  # fmt: skip
        new = self._build(config, reuse)
        kept = {id(c) for c in new.checks.values()}
        replaced = [c for c in old.checks.values() if id(c) not in kept]
        now = time.monotonic()
        due = [c for at, checks in self._retired if now - at > RETIRE_AFTER_S for c in checks]
        self._retired = [(at, cs) for at, cs in self._retired if now - at <= RETIRE_AFTER_S]
        if replaced:
            self._retired.append((now, replaced))
        if due:
            self._spawn_close(due)
        self.guardrails = self.stage.guardrails = new
        return new

    def retired_checks(self) -> int:
        """Replaced checks not closed yet (bounded: closed RETIRE_AFTER_S after replacement)."""
        return sum(len(cs) for _, cs in self._retired)

    def _spawn_close(self, checks: list[Check]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a reload outside the loop (tests): close at aclose
            self._retired.append((time.monotonic(), checks))
            return
        task = loop.create_task(_close_checks(checks), name="fg-safety-retire")
        self._tasks.append(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    def set_base(self, config: SafetyConfig) -> None:
        """The config file's ``safety:`` section changed (a reload); overrides stay on top."""
        self.base = config
        try:
            self._apply(_merge(config, self.overrides))
        except ConfigError as exc:
            log.warning("safety overrides no longer fit the config, dropped: %s", exc.message)
            self._apply(config)

    # -- admin overrides ---------------------------------------------------------------------

    async def _change(self, section: str, key: str, value: Any) -> SafetyConfig:
        if not 0 < len(key) <= MAX_NAME or "\x00" in key:
            raise ConfigError(f"names have 1-{MAX_NAME} characters and no NUL ({len(key)} given)")
        previous = self.overrides
        overrides = {s: dict(previous.get(s, {})) for s in _SECTIONS}
        if value is None:
            overrides[section].pop(key, None)
        else:
            overrides[section][key] = value
        config = _merge(self.base, overrides)  # ConfigError: refused, nothing changed
        self._apply(config)  # may raise ConfigError for bad check options; then unchanged
        self.overrides = overrides
        if self._shared is None:
            return config
        name = f"{section}:{key}"
        try:
            if value is None:
                await self._shared.delete(name)
            else:
                await self._shared.put(name, value)
        except Exception as exc:  # not stored: not in force here either
            self.overrides = previous
            self._apply(_merge(self.base, previous))
            raise not_stored("the safety change was not made", exc) from None
        return config

    async def put_policy(self, name: str, policy: Mapping[str, Any]) -> PolicyConfig:
        """Create or replace policy ``name``; raises ConfigError when it is invalid."""
        try:
            parsed = PolicyConfig.model_validate(dict(policy))
        except ValidationError as exc:
            raise ConfigError(f"invalid policy: {exc}") from None
        config = await self._change("policies", name, parsed.model_dump(mode="json"))
        return config.policies[name]

    async def map_alias(self, alias: str, policy: str | None) -> None:
        """Use ``policy`` for requests to ``alias`` (None: drop the admin mapping)."""
        await self._change("aliases", alias, policy)

    async def map_team(self, team: str, policy: str | None) -> None:
        """Use ``policy`` for a team (id or name; None: drop the admin mapping)."""
        await self._change("teams", team, policy)

    def _follow(self, rows: dict[str, Any]) -> None:
        """The shared overrides changed (on any replica): put them in force here."""
        overrides: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
        for name, value in rows.items():
            section, _, key = name.partition(":")
            if section in overrides and key:
                overrides[section][key] = value
        if overrides == self.overrides:
            return
        try:
            self._apply(_merge(self.base, overrides))
        except ConfigError as exc:
            log.warning("shared safety overrides refused: %s", exc.message)
            return
        self.overrides = overrides

    async def _import_file(self) -> None:
        """Move an overrides file of an older version into the database, once."""
        path = self.data_dir / OVERRIDES_FILE
        if self._shared is None or not path.exists():
            return
        try:
            data = json.loads(path.read_text("utf-8"))
            rows = {
                f"{section}:{key}": value
                for section in _SECTIONS
                for key, value in dict(data.get(section) or {}).items()
            }
            assert self._database is not None
            await self.resources.databases.migrate(self._database)
            _, stored = await self._shared.load()
            if rows and not stored:
                await self._shared.put_many(rows)
            path.rename(path.with_name(f"{OVERRIDES_FILE}.imported"))
            log.warning("imported %d safety overrides from %s into the database", len(rows), path)
        except Exception as exc:  # an unreadable file or no database yet: try at the next start
            log.warning("could not import %s: %s", path, exc)

    # -- lifespan ----------------------------------------------------------------------------

    async def _warm_up(self) -> None:
        try:
            await self.guardrails.warm_up()
        except Exception:  # a model that cannot load fails its checks (counted), not startup
            log.exception("safety warm-up failed")

    async def start(self) -> None:
        """Start audit workers, follow the shared overrides, warm up models in the background."""
        if self.audit is not None:
            await self.audit.start()
        if self._shared is not None:
            await self._import_file()
            await self.resources.shared.follow(self._shared, self._follow)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._warm_up(), name="fg-safety-warm-up"))

    async def aclose(self) -> None:
        """Drain the audit queue, stop background tasks, close every check once."""
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()
        if self.audit is not None:
            await self.audit.aclose()
        unique: dict[int, Check] = {}
        for checks in [*(cs for _, cs in self._retired), list(self.guardrails.checks.values())]:
            unique.update((id(c), c) for c in checks)
        self._retired.clear()
        await _close_checks(list(unique.values()))
        self.text_worker.close()


async def _close_checks(checks: list[Check]) -> None:
    """Close each check's clients and worker threads; one failing does not stop the rest."""
    for check in checks:
        with contextlib.suppress(Exception):
            await close_check(check)
