"""`SafetyRuntime`: guardrails, the audit queue and the stage of one gateway process.

Built by the app from the ``safety:`` config section; the lifespan calls :meth:`start` (audit
workers, model warm-up in the background, watching the policy overrides) and :meth:`aclose`.

Policies change at run time in two ways, both swapping in a new `Guardrails` between requests
(checks whose config did not change are reused, so the classifier is not reloaded):

- a config reload (``/admin/config/reload``, SIGHUP, the file watcher): :meth:`set_base`;
- the admin API: :meth:`put_policy` / :meth:`map_alias` / :meth:`map_team` store *overrides*
  in ``<data_dir>/safety-policies.json``; every process using that data directory (the workers
  of one ``fleetgate serve``) notices the file change within ``poll_interval_s``.

Checks built from config use the process's shared parts (`fleetgate.resources.Resources`): the
side-service HTTP session (guard model, moderation, the audit webhook) and the one MiniLM
(classifier checks).

Example::

    rt = SafetyRuntime(cfg.safety, metrics.registry, data_dir=settings.data_dir,
                       sink=audit_log.write, on_suspend=suspend_key, resources=resources)
    # rt.stage joins the request path through fleetgate.safety.feature.SafetyFeature
    await rt.start(); ...; await rt.aclose()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleetgate.errors import ConfigError
from fleetgate.resources import MiniLMEmbedder, Resources
from fleetgate.safety.audit import AuditQueue, Hook
from fleetgate.safety.base import Check
from fleetgate.safety.config import CheckConfig, PolicyConfig, SafetyConfig
from fleetgate.safety.metrics import SafetyMetrics
from fleetgate.safety.policy import Guardrails
from fleetgate.safety.registry import builtin_registry
from fleetgate.safety.stage import SafetyStage
from fleetgate.tasks import cancel_and_wait
from fleetgate.telemetry.registry import Registry

__all__ = ["SafetyRuntime", "localize"]

log = logging.getLogger("fleetgate.safety")

OVERRIDES_FILE = "safety-policies.json"
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
        poll_interval_s: float = 1.0,
        resources: Resources | None = None,
    ) -> None:
        """``checks``: pre-built instances used for those names (tests, embedding);
        ``resources``: the process's shared owner (without one the runtime makes its own and
        closes it in `aclose`)."""
        self.base = config
        self._own_resources = resources is None
        self.resources = resources or Resources()
        self._registry = builtin_registry(
            http=self.resources.http, embedder=MiniLMEmbedder(self.resources.minilm)
        )
        self.data_dir = data_dir
        self.overrides_path = data_dir / OVERRIDES_FILE
        self.poll_interval_s = poll_interval_s
        self.metrics = SafetyMetrics(registry)
        self._fixed = dict(checks or {})
        self._overrides_mtime = self._mtime()
        self.overrides = self._read_overrides()
        try:
            effective = _merge(config, self.overrides)
        except ConfigError as exc:
            log.warning("ignoring %s: %s", self.overrides_path, exc.message)
            self.overrides, effective = {}, config
        self.guardrails = self._build(effective, {})
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
            )  # fmt: skip
        self.stage = SafetyStage(self.guardrails, self.audit, team_name=team_name)
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

    def _mtime(self) -> float | None:
        try:
            return self.overrides_path.stat().st_mtime
        except OSError:
            return None

    def _read_overrides(self) -> dict[str, Any]:
        try:
            data = json.loads(self.overrides_path.read_text("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s: %s", self.overrides_path, exc)
            return {}
        return {s: dict(data.get(s) or {}) for s in _SECTIONS} if isinstance(data, dict) else {}

    def _write_overrides(self) -> None:
        self.overrides_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.overrides_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.overrides, indent=2, ensure_ascii=False), "utf-8")
        os.replace(tmp, self.overrides_path)
        self._overrides_mtime = self._mtime()

    async def _change(self, section: str, key: str, value: Any) -> SafetyConfig:
        overrides = {s: dict(self.overrides.get(s, {})) for s in _SECTIONS}
        if value is None:
            overrides[section].pop(key, None)
        else:
            overrides[section][key] = value
        config = _merge(self.base, overrides)  # ConfigError: refused, nothing changed
        self._apply(config)  # may raise ConfigError for bad check options; then unchanged
        self.overrides = overrides
        await asyncio.to_thread(self._write_overrides)
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

    def _reload_if_changed(self) -> None:
        mtime = self._mtime()
        if mtime == self._overrides_mtime:
            return
        self._overrides_mtime = mtime
        overrides = self._read_overrides()
        try:
            self._apply(_merge(self.base, overrides))
        except ConfigError as exc:
            log.warning("safety overrides from another process refused: %s", exc.message)
            return
        self.overrides = overrides

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            self._reload_if_changed()

    # -- lifespan ----------------------------------------------------------------------------

    async def _warm_up(self) -> None:
        try:
            await self.guardrails.warm_up()
        except Exception:  # a model that cannot load fails its checks (counted), not startup
            log.exception("safety warm-up failed")

    async def start(self) -> None:
        """Start audit workers; warm up models and watch overrides in the background."""
        if self.audit is not None:
            await self.audit.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._warm_up(), name="fg-safety-warm-up"))
        self._tasks.append(loop.create_task(self._watch(), name="fg-safety-overrides"))

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
        if self._own_resources:
            await self.resources.aclose()


async def _close_checks(checks: list[Check]) -> None:
    """Close each check's clients and worker threads; one failing does not stop the rest."""
    for check in checks:
        with contextlib.suppress(Exception):
            aclose = getattr(check, "aclose", None)
            if aclose is not None:
                await aclose()
                continue
            close = getattr(check, "close", None)
            if close is not None:
                close()
