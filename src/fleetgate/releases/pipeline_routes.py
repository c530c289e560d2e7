"""Admin API of release pipelines (master key; starting one is audited, as each step is).

- ``POST /admin/pipelines`` ``{"model", "version"}``: start the pipeline of a registered
  version (201); 400 for a model with no ``pipelines.models`` entry, 404 for an unknown
  version, 409 if the version already has a run.
- ``GET /admin/pipelines?model=chat``: every run (oldest first), with its steps.
- ``GET /admin/pipelines/{model}/{version}``: one run, its steps with their timings, the
  gate's verdict and the engines it launched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from fleetgate.api.schemas import validate_request
from fleetgate.config.schema import NAME_PATTERN
from fleetgate.errors import InvalidRequest
from fleetgate.http import AdminAccess, json_reply, read_json
from fleetgate.releases.pipeline_config import PipelinesConfig
from fleetgate.releases.pipeline_store import PipelineStore
from fleetgate.releases.registry import Registry
from fleetgate.store.errors import store_unavailable_is_503

__all__ = ["PipelineAdmin", "PipelineSpec"]

_PREFIX = "/admin/pipelines"


class PipelineSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(pattern=NAME_PATTERN)
    version: str = Field(pattern=NAME_PATTERN)


class PipelineAdmin:
    def __init__(
        self,
        store: PipelineStore,
        registry: Registry,
        access: AdminAccess,
        config: Callable[[], PipelinesConfig],
        prepare: Callable[[], Awaitable[None]],
        max_body_bytes: int,
    ) -> None:
        self.store = store
        self.registry = registry
        self.access = access
        self.config = config
        self.prepare = prepare
        self.max_body_bytes = max_body_bytes

    def routes(self) -> list[web.RouteDef]:
        r = store_unavailable_is_503
        return [
            web.post(_PREFIX, r(self.start)),
            web.get(_PREFIX, r(self.list)),
            web.get(_PREFIX + "/{model}/{version}", r(self.show)),
        ]

    async def start(self, request: web.Request) -> web.Response:
        actor = self.access.master(request)
        spec = validate_request(PipelineSpec, await read_json(request, self.max_body_bytes))
        assert isinstance(spec, PipelineSpec)
        mp = self.config().models.get(spec.model)
        if mp is None:
            raise InvalidRequest(
                f"'{spec.model}' has no pipeline (pipelines.models in the config).",
                param="model",
            )
        await self.prepare()
        await self.registry.version(spec.model, spec.version)  # 404 when unknown
        run = await self.store.create(spec.model, spec.version, mp.alias)
        await self.access.record(actor, "pipeline.start", f"{spec.model}@{spec.version}", {})
        return json_reply(run.to_dict(), 201)

    async def list(self, request: web.Request) -> web.Response:
        self.access.master(request)
        await self.prepare()
        model = request.query.get("model") or None
        return json_reply({"data": [r.to_dict() for r in await self.store.all(model)]})

    async def show(self, request: web.Request) -> web.Response:
        self.access.master(request)
        await self.prepare()
        run = await self.store.get(request.match_info["model"], request.match_info["version"])
        return json_reply(run.to_dict())
