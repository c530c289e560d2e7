"""Admin API of progressive rollouts (master key; audited).

- ``POST /admin/registry/rollouts`` ``{"alias", "to", "steps"?: [10, 50, 100],
  "interval_s"?: 300, "min_samples"?: 50, "force"?: false}``: start moving an alias that
  follows a registry ``production`` stage to version ``to`` (201). The candidate needs a
  passing gate unless ``force``; 409 while another rollout of the alias is active.
- ``GET /admin/registry/rollouts``; ``GET /admin/registry/rollouts/{alias}``: state and every
  decision with its numbers.
- ``POST /admin/registry/rollouts/{alias}/pause`` | ``resume`` | ``abort``: abort sends the
  candidate's traffic to 0% on every replica at once.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, field_validator

from fleetgate.api.schemas import validate_request
from fleetgate.config.schema import NAME_PATTERN, GatewayConfig
from fleetgate.errors import Conflict, InvalidRequest
from fleetgate.http import AdminAccess, json_reply, read_json
from fleetgate.releases.admin_routes import RegistryAdmin
from fleetgate.releases.rollouts import Rollout, RolloutStore
from fleetgate.store.errors import store_unavailable_is_503

__all__ = ["RolloutAdmin", "RolloutSpec"]

_PREFIX = "/admin/registry/rollouts"


class RolloutSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    alias: str = Field(min_length=1, max_length=200)
    to: str = Field(pattern=NAME_PATTERN)
    steps: list[float] = Field(default_factory=lambda: [10.0, 50.0, 100.0], min_length=1,
                               max_length=20)  # fmt: skip
    interval_s: float = Field(300.0, ge=0.1, le=86400)
    min_samples: int = Field(50, ge=1, le=1_000_000)
    force: bool = False

    @field_validator("steps")
    @classmethod
    def _rising_to_100(cls, steps: list[float]) -> list[float]:
        if any(not 0 < s <= 100 for s in steps) or steps != sorted(set(steps)):
            raise ValueError("steps must be rising percents within (0, 100]")
        if steps[-1] != 100:
            raise ValueError("the last step must be 100")
        return steps


class RolloutAdmin:
    def __init__(
        self,
        store: RolloutStore,
        registry_admin: RegistryAdmin,
        access: AdminAccess,
        config: Callable[[], GatewayConfig],
        changed: Callable[[], Awaitable[None]],
        prepare: Callable[[], Awaitable[None]],
        max_body_bytes: int,
    ) -> None:
        self.store = store
        self.registry_admin = registry_admin
        self.access = access
        self.config = config  # the config as written (aliases and their registry stage)
        self.changed = changed
        self.prepare = prepare
        self.max_body_bytes = max_body_bytes

    def routes(self) -> list[web.RouteDef]:
        r = store_unavailable_is_503
        return [
            web.post(_PREFIX, r(self.start)),
            web.get(_PREFIX, r(self.list)),
            web.get(_PREFIX + "/{alias}", r(self.show)),
            web.post(_PREFIX + "/{alias}/{action:pause|resume|abort}", r(self.act)),
        ]

    async def start(self, request: web.Request) -> web.Response:
        actor = self.access.master(request)
        spec = validate_request(RolloutSpec, await read_json(request, self.max_body_bytes))
        assert isinstance(spec, RolloutSpec)
        await self.prepare()
        alias = self.config().alias(spec.alias)
        if alias is None or alias.registry is None or alias.registry.stage != "production":
            raise InvalidRequest(
                f"'{spec.alias}' is not an alias that follows a registry production stage.",
                param="alias",
            )
        model = alias.registry.model
        registry = self.registry_admin.registry
        version = await registry.version(model, spec.to)
        baseline = (await registry.stages(model)).get("production")
        if baseline is None or baseline == spec.to:
            raise Conflict(f"'{model}' needs a production version other than '{spec.to}'.")
        if version["status"] != "ready":
            raise Conflict(f"The version '{spec.to}' is {version['status']}.")
        gate = await self.registry_admin.gate(model, spec.to)
        if gate.verdict != "pass" and not spec.force:
            raise Conflict(
                f"The gate of '{model}' is {gate.verdict} for '{spec.to}': {gate.reason}.",
                code=f"gate_{gate.verdict}",
            )
        rollout = await self.store.start(
            alias=spec.alias, model=model, baseline=baseline, candidate=spec.to,
            steps=spec.steps, interval_s=spec.interval_s, min_samples=spec.min_samples,
        )  # fmt: skip
        detail = {**_brief(rollout), "gate": gate.verdict, "forced": spec.force}
        await self.access.record(actor, "rollout.start", spec.alias, detail)
        await self.changed()
        return json_reply(rollout.to_dict(), 201)

    async def list(self, request: web.Request) -> web.Response:
        self.access.master(request)
        await self.prepare()
        return json_reply({"data": [r.to_dict() for r in await self.store.all()]})

    async def show(self, request: web.Request) -> web.Response:
        self.access.master(request)
        await self.prepare()
        return json_reply((await self.store.get(request.match_info["alias"])).to_dict())

    async def act(self, request: web.Request) -> web.Response:
        actor = self.access.master(request)
        await self.prepare()
        alias, action = request.match_info["alias"], request.match_info["action"]
        for _ in range(20):
            current = await self.store.get(alias)
            values = _transition(current, action)
            changed = await self.store.change(current, **values)
            if changed is not None:
                await self.access.record(actor, f"rollout.{action}", alias, _brief(changed))
                await self.changed()
                return json_reply(changed.to_dict())
        raise Conflict(f"The rollout of '{alias}' kept changing; try again.")


def _transition(r: Rollout, action: str) -> dict[str, Any]:
    if action == "pause" and r.status == "running":
        return {"status": "paused"}
    if action == "resume" and r.status == "paused":
        # marked in the decisions: inconclusive verdicts before it no longer count (driver.py)
        mark = {"at_ms": int(time.time() * 1000), "step": r.step, "percent": r.percent,
                "verdict": "resumed", "reason": "resumed by an operator"}  # fmt: skip
        return {"status": "running", "decisions": [*r.decisions, mark][-100:]}
    if action == "abort" and r.active:
        return {"status": "aborted", "percent": 0.0, "reason": "aborted by an operator"}
    raise Conflict(f"Cannot {action} a {r.status} rollout.", code="rollout_state")


def _brief(r: Rollout) -> dict[str, Any]:
    return {"candidate": r.candidate, "baseline": r.baseline, "status": r.status,
            "percent": r.percent, "step": r.step, "reason": r.reason}  # fmt: skip
