"""`Feature`: how a subsystem plugs into the gateway, and `Features`: the ordered set of them.

A feature is one subsystem (tenancy, the multimodal pipeline, guardrails, the semantic router,
canary splits, engine-aware routing, and every later one). It may put one
`fleetgate.contract.stages.Stage` on the request path, serve routes, follow config reloads and
run background work:

- ``name``: a short identifier (``docs/architecture.md`` lists features by it);
- ``stage``: its step of the request path, or ``None``;
- ``routes()``: its HTTP routes (registered once, when the app is built);
- ``reconfigure(config)``: a reloaded config was swapped in; apply what can change live;
- ``missing()``: what it still lacks to serve fully (a database not reached yet), for readiness;
- ``start()``: open connections, start tasks (called in order, before the first request);
- ``aclose()``: stop tasks, flush, close (called in reverse order at shutdown).

`fleetgate.app.create_app` builds one tuple of features; that tuple *is* the stage order:
stages run ``before`` in tuple order and ``after`` in reverse. Features that need each other
meet through typed ports (`fleetgate.core.Port`) when they are built: one provides
(``core.ports.provide``), a later one asks (``core.ports.get``); none looks another up at
request time. Every feature class has the same constructor for the app: ``build(core)``
(`BuildsFeature`), None when it cannot run (a port it needs is not provided).

One rule switches a feature off (`Switch`, declared on the class): its config section says
``enabled: false``, or, for an opt-in feature (``Switch("safety", opt_in=True)``), the
section is absent. The app then does not build it: no stage, no port, no task; the admin
routes the class declares (``admin_routes``) answer one OpenAI-style 503
(``code: feature_disabled``) that names the section to set (`switched_off_routes`).

A feature that keeps tables defines them in its own ``tables.py`` (on
`fleetgate.store.tables.metadata`) and names the folder of the Alembic revisions that create
them in ``migrations`` (a class attribute: the app collects them from the classes, built or
not, so a feature switched off still has its tables when it is turned on later)::

    class Notes(BaseFeature):
        migrations = (Path(__file__).parent / "migrations",)

A feature's first revision starts its own branch (``down_revision = None``,
``branch_labels = ("notes",)``, ``depends_on`` a revision it needs, if any); the store upgrades
to every branch's head.

Example, a feature that counts requests and serves the count::

    class Counting(BaseFeature):
        name = "counting"

        def __init__(self) -> None:
            self.seen = 0
            self.stage = self  # its own stage

        async def before(self, req: GatewayRequest) -> None:
            self.seen += 1

        def after(self, req: GatewayRequest, outcome: Outcome) -> None:
            pass

        def routes(self) -> list[web.RouteDef]:
            return [web.get("/admin/counting", self.show)]

        async def show(self, request: web.Request) -> web.Response:
            return web.json_response({"seen": self.seen})
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

from aiohttp import web

from fleetgate.config.schema import GatewayConfig
from fleetgate.config.sections import Declared, switched_on
from fleetgate.contract.stages import Stage
from fleetgate.core import Core
from fleetgate.errors import ServiceUnavailable
from fleetgate.http import AdminAccess

__all__ = [
    "BaseFeature",
    "BuildsFeature",
    "Feature",
    "Features",
    "StageFeature",
    "Switch",
    "migration_folders",
    "switched_off_routes",
]

log = logging.getLogger("fleetgate.features")


@runtime_checkable
class Feature(Protocol):
    """One subsystem of the gateway (see the module docstring)."""

    name: str

    @property
    def stage(self) -> Stage | None: ...

    def routes(self) -> Iterable[web.AbstractRouteDef]: ...

    def reconfigure(self, config: GatewayConfig) -> None: ...

    def missing(self) -> list[str]:
        """What it still lacks to serve fully (``/health/ready`` lists it); empty when ready."""
        ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Switch:
    """The config section that switches a feature off (the one rule: see the module doc).

    ``Switch("batches")``: on unless ``batches.enabled: false``; ``Switch("safety",
    opt_in=True)``: off unless a ``safety:`` section is there (and not ``enabled: false``).
    """

    section: str
    opt_in: bool = False

    def on(self, config: GatewayConfig) -> bool:
        return switched_on(config, self.section, opt_in=self.opt_in)

    def hint(self) -> str:
        """What to write in the config to switch it on."""
        if self.opt_in:
            return f"add a '{self.section}:' section (without 'enabled: false')"
        return f"set '{self.section}.enabled: true'"


class BuildsFeature(Protocol):
    """A feature class as `fleetgate.app.FEATURES` lists it: ``build(core)`` makes the feature
    from the core and the ports earlier features provided (and provides its own), or returns
    None when it cannot run. The app builds it only while its ``switch`` is on (None: always);
    off, its declared ``admin_routes`` answer 503 ``feature_disabled``.
    ``sections``: the config sections it declares (validated when the config is loaded);
    ``migrations``: the folders of the Alembic revisions creating its tables (none: no tables;
    collected from every class, on or off)."""

    @property
    def name(self) -> str: ...

    @property
    def sections(self) -> tuple[Declared, ...]: ...

    @property
    def migrations(self) -> tuple[Path, ...]: ...

    @property
    def switch(self) -> Switch | None: ...

    @property
    def admin_routes(self) -> tuple[tuple[str, str], ...]: ...

    def build(self, core: Core) -> Feature | None: ...


class BaseFeature:
    """Defaults for a `Feature`: no stage, no routes, nothing to reconfigure, start or close."""

    name = "feature"
    stage: Stage | None = None
    sections: ClassVar[tuple[Declared, ...]] = ()  # the config sections it declares
    migrations: ClassVar[tuple[Path, ...]] = ()  # folders of its tables' Alembic revisions
    switch: ClassVar[Switch | None] = None  # the section that switches it off (None: never)
    # (method, path) of its admin routes: switched off, each answers 503 feature_disabled
    admin_routes: ClassVar[tuple[tuple[str, str], ...]] = ()

    def routes(self) -> Iterable[web.AbstractRouteDef]:
        return ()

    def reconfigure(self, config: GatewayConfig) -> None:
        return None

    def missing(self) -> list[str]:
        return []

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


def migration_folders(features: Iterable[BuildsFeature]) -> tuple[Path, ...]:
    """The revision folders of ``features`` (feature classes), in order, each once: what the
    store migrates a database with (`fleetgate.store.Database`)."""
    folders: dict[Path, None] = {}
    for feature in features:
        folders.update(dict.fromkeys(feature.migrations))
    return tuple(folders)


def switched_off_routes(feature: BuildsFeature, access: AdminAccess) -> list[web.RouteDef]:
    """The admin routes ``feature`` declares, each answering the one 503 of a switched-off
    feature to an authenticated caller (401 to anyone else, as when it is on)::

        503 {"error": {"message": "The tenancy feature is switched off in this gateway's
             config: set 'tenancy.enabled: true' and restart to serve GET /admin/teams.",
             "type": "service_unavailable", "param": "tenancy", "code": "feature_disabled"}}
    """
    switch = feature.switch
    if switch is None:
        return []
    message = (
        f"The {feature.name} feature is switched off in this gateway's config: "
        f"{switch.hint()} and restart to serve"
    )

    def answer(where: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def off(request: web.Request) -> web.StreamResponse:
            access.authenticated(request)
            raise ServiceUnavailable(
                f"{message} {where}.", param=switch.section, code="feature_disabled"
            )

        return off

    return [
        web.route(method, path, answer(f"{method} {path}")) for method, path in feature.admin_routes
    ]


class StageFeature(BaseFeature):
    """A bare `Stage` as a feature (tests and plug-ins that only add a step to the path)."""

    def __init__(self, stage: Stage) -> None:
        self.name = stage.name
        self.stage = stage


class Features:
    """The gateway's features in request-path order: started in order, closed in reverse.

    A feature whose ``start`` fails leaves the ones started before it to be closed; ``aclose``
    errors are logged and do not stop the others from closing.
    """

    def __init__(self, features: Sequence[Feature]) -> None:
        names = [f.name for f in features]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"feature names must be unique: {', '.join(duplicates)}")
        self.all: tuple[Feature, ...] = tuple(features)
        self._started: list[Feature] = []

    def names(self) -> list[str]:
        return [f.name for f in self.all]

    def stages(self) -> list[Stage]:
        """The request path's stages, in order."""
        return [f.stage for f in self.all if f.stage is not None]

    def routes(self) -> list[web.AbstractRouteDef]:
        return [route for f in self.all for route in f.routes()]

    def missing(self) -> list[str]:
        """What the features still lack (``"tenancy: database"``), for readiness."""
        return [f"{f.name}: {m}" for f in self.all for m in f.missing()]

    def reconfigure(self, config: GatewayConfig) -> list[str]:
        """Tell every feature about a reloaded config (one failing does not stop the rest);
        the names of those that failed (they keep what they had), for the reload's answer."""
        failed: list[str] = []
        for feature in self.all:
            try:
                feature.reconfigure(config)
            except Exception:
                log.exception("feature %s could not apply the reloaded config", feature.name)
                failed.append(feature.name)
        return failed

    async def start(self) -> None:
        for feature in self.all:
            await feature.start()
            self._started.append(feature)

    async def aclose(self) -> None:
        started, self._started = self._started, []
        for feature in reversed(started):
            try:
                await feature.aclose()
            except Exception:
                log.exception("feature %s did not close cleanly", feature.name)

    async def lifespan(self, app: web.Application) -> AsyncIterator[None]:
        """For ``app.cleanup_ctx``: start everything, serve, close everything."""
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        yield
        await self.aclose()
