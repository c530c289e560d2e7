"""The model registry (master only, like ``/admin/registry``): models with their stages and
rollouts (``/ui/registry``); one model's versions with their stage, status and eval gate
verdict, the rollout of each alias that follows it, quality by version (requests, feedback,
negative rate over the last day) and the stage history (``/ui/registry/{model}``); and the
admin API's controls: promote a version to a stage (gated for production, ``force`` audited)
and roll production back, through the same `RegistryAdmin` service as
``POST /admin/registry/models/{model}/promote`` and ``.../rollback``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import quote

from aiohttp import web

from fleetgate.console.core import Console
from fleetgate.console.forms import NOT_REFUSED, Refusal, page_number, page_of
from fleetgate.console.sessions import Session
from fleetgate.contract.principal import Principal
from fleetgate.errors import ClientError, InvalidRequest
from fleetgate.releases.admin_routes import RegistryAdmin
from fleetgate.releases.feedback_routes import FeedbackRoutes
from fleetgate.releases.pipeline_store import PipelineStore
from fleetgate.releases.records import DEFAULT_STAGES
from fleetgate.releases.registry import UNSET, Registry
from fleetgate.releases.rollouts import RolloutStore

__all__ = ["RegistryPages", "Releases"]

MASTER = ("master",)
QUALITY_WINDOW_S = 86400
HISTORY_ROWS = 20


class Releases(Protocol):
    """What the pages use of the releases feature (`fleetgate.releases.feature`)."""

    registry: Registry
    admin: RegistryAdmin
    rollouts: RolloutStore
    feedback: FeedbackRoutes
    pipelines: PipelineStore


_LABELS = {"stage": "Stage", "version": "Version"}  # the promote form's fields, as labelled


def _name(form: dict[str, str], field: str) -> str:
    value = form.get(field, "").strip()
    if not value or len(value) > 64 or not all(c.isalnum() or c in "._-" for c in value):
        raise InvalidRequest(
            f"{_LABELS[field]} must be a name of letters, digits, '.', '_', '-'.", param=field
        )
    return value


def _expected(form: dict[str, str]) -> Any:
    """The stage's version the form was drawn with (compare-and-set): "" = empty stage."""
    if "expected" not in form:
        return UNSET
    return form["expected"].strip() or None


class RegistryPages:
    def __init__(self, console: Console, releases: Releases | None) -> None:
        self.console = console
        self.releases = releases

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui/registry", self.index),
            web.get("/ui/registry/{model}", self.model),
            web.post("/ui/registry/{model}/promote", self.promote),
            web.post("/ui/registry/{model}/rollback", self.rollback),
        ]

    async def _ready(self) -> Releases | None:
        releases = self.releases
        if releases is not None and releases.admin.prepare is not None:
            await releases.admin.prepare()  # the registry's tables, before the first read
        return releases

    async def index(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, MASTER)
        page = page_number(request.query.get("page"))
        releases = await self._ready()
        if releases is None:
            return self.console.page(
                request, session, "registry.html", off=True, models=[], page=1, more=False,
                query="",
            )  # fmt: skip
        size = self.console.config.page_size
        models = await releases.registry.models()
        shown, more = page_of(models, page, size)
        rollouts: dict[str, list[dict[str, Any]]] = {}
        for r in await releases.rollouts.all():
            rollouts.setdefault(r.model, []).append(r.to_dict())
        for m in shown:
            m["rollouts"] = rollouts.get(m["name"], [])
            m["stage_list"] = _stage_list(m["stages"])
        return self.console.page(
            request, session, "registry.html", off=False, models=shown, page=page,
            more=more, query="",
        )  # fmt: skip

    async def model(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, MASTER)
        return await self._model_page(request, session)

    async def _model_page(
        self, request: web.Request, session: Session, refusal: Refusal = NOT_REFUSED
    ) -> web.Response:
        """The model's page; after a refused form, the refusal in words and the form's values
        (a refused promotion shows the stage and the force box as they were sent)."""
        releases = await self._ready()
        if releases is None:
            return self.console.page(
                request, session, "registry.html", refusal.status, off=True, models=[], page=1,
                more=False, query="",
            )  # fmt: skip
        name = request.match_info["model"]
        page = page_number(request.query.get("page"))
        size = self.console.config.page_size
        found = await releases.registry.model(name)  # 404 for an unknown model
        stages: dict[str, str | None] = found["stages"]
        held: dict[str, list[str]] = {}
        for stage, version in stages.items():
            if version is not None:
                held.setdefault(version, []).append(stage)
        versions, more = page_of(found["versions"], page, size)
        runs = {p.version for p in await releases.pipelines.all(name)}
        for v in versions:
            v["pipeline"] = v["version"] in runs  # a link to its run's timeline
            v["stages"] = sorted(held.get(v["version"], []))
            v["gate"] = (
                (await releases.admin.gate(name, v["version"])).to_dict()
                if v["status"] == "ready" else None
            )  # fmt: skip
        following = sorted(
            m.alias for m in self.console.tables.source.models
            if m.registry is not None and m.registry.model == name
        )  # fmt: skip
        rollouts = [r.to_dict() for r in await releases.rollouts.all() if r.model == name]
        aliases = set(following) | {r["alias"] for r in rollouts}
        quality = [
            q for q in await releases.feedback.store.quality(
                since_ms=int((time.time() - QUALITY_WINDOW_S) * 1000),
                regen_window_s=releases.feedback.regen_window_s(),
            )
            if q["alias"] in aliases
        ]  # fmt: skip
        history = [h.to_dict() for h in await releases.registry.history(name, HISTORY_ROWS)]
        return self.console.page(
            request, session, "registry_model.html", refusal.status, model=found,
            versions=versions,
            stages=stages, stage_list=_stage_list(stages), choices=_choices(stages),
            following=following, rollouts=rollouts, quality=quality, history=history,
            error=refusal.error, page=page, more=more, query="",
            quality_hours=QUALITY_WINDOW_S // 3600, values=refusal.values,
        )  # fmt: skip

    async def promote(self, request: web.Request) -> web.Response:
        async def move(releases: Any, principal: Principal, name: str, form: Any) -> None:
            stage, version = _name(form, "stage"), _name(form, "version")
            await releases.admin.move(
                principal, name, stage, version, _expected(form), force=form.get("force") == "on"
            )

        return await self._act(request, move)

    async def rollback(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, MASTER)
        name = request.match_info["model"]
        ask = await self.console.confirmed(
            request, session, question=f"Roll production of {name} back?",
            button=f"Roll production of {name} back", back=f"/ui/registry/{quote(name)}",
        )  # fmt: skip
        if ask is not None:
            return ask

        async def roll_back(releases: Any, principal: Principal, name: str, form: Any) -> None:
            await releases.admin.roll_back(principal, name, _expected(form))

        return await self._act(request, roll_back)

    async def _act(
        self,
        request: web.Request,
        action: Callable[[Any, Principal, str, Any], Awaitable[None]],
    ) -> web.Response:
        """A control on a model's page (master only, CSRF-checked form): back to the page, or
        the page again with the refusal (a failing gate, a stale form) and its status."""
        session = await self.console.require(request, MASTER)
        releases = await self._ready()
        name = request.match_info["model"]
        if releases is None:
            raise web.HTTPFound("/ui/registry")
        form = await self.console.form(request)
        try:
            await action(releases, session.principal, name, form)
        except ClientError as exc:
            return await self._model_page(request, session, Refusal.of(exc, dict(form)))
        await self.console.flash(session, f"Done: {name} updated.")
        raise web.HTTPFound(f"/ui/registry/{quote(name)}")


def _stage_list(stages: dict[str, str | None]) -> list[tuple[str, str | None]]:
    """Production first, then the other stages by name."""
    order = {"production": 0, "previous": 1}
    return sorted(stages.items(), key=lambda kv: (order.get(kv[0], 2), kv[0]))


def _choices(stages: dict[str, str | None]) -> list[str]:
    """Stages a version may be promoted to (``previous`` moves with production)."""
    names = set(stages) | set(DEFAULT_STAGES) | {"candidate"}
    return sorted(names - {"previous"}, key=lambda s: (s != "production", s))
