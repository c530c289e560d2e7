"""Admin API of the registry (master key only; every change is recorded in the admin audit).

- ``POST /admin/registry/models`` ``{"name", "description"?}``: a model (201).
- ``GET /admin/registry/models``; ``GET /admin/registry/models/{model}``: with stages, versions.
- ``POST /admin/registry/models/{model}/versions``: an immutable version (201; see
  `fleetgate.releases.records.VersionSpec`). ``GET`` lists them.
- ``GET /admin/registry/models/{model}/versions/{version}``: the version and its eval runs.
- ``GET /admin/registry/models/{model}/versions/{version}/gate``: the gate's verdict now.
- ``POST /admin/registry/models/{model}/versions/{version}/evals``: store an eval run (201);
  ``GET`` lists the version's runs; ``GET /admin/registry/evals/{run}``: one run with items.
- ``POST /admin/registry/models/{model}/promote`` ``{"stage", "version", "expected"?,
  "force"?}``: move a stage (409 when ``expected`` no longer holds, or when promoting to
  production without a passing gate and without ``"force": true``).
- ``POST /admin/registry/models/{model}/rollback`` ``{"expected"?}``: production back to
  previous.
- ``GET /admin/registry/models/{model}/history?limit=``: the stage moves, newest first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from fleetgate.api.schemas import validate_request
from fleetgate.contract.principal import Principal
from fleetgate.errors import Conflict, InvalidRequest
from fleetgate.http import AdminAccess, json_reply, read_json
from fleetgate.releases.config import ReleasesConfig
from fleetgate.releases.evalstore import EvalStore, RunRecord
from fleetgate.releases.gates import GateResult, evaluate
from fleetgate.releases.records import ModelSpec, VersionSpec
from fleetgate.releases.registry import UNSET, Registry
from fleetgate.store.errors import store_unavailable_is_503

__all__ = ["RegistryAdmin"]

_PREFIX = "/admin/registry/models"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RegistryAdmin:
    def __init__(
        self,
        registry: Registry,
        evals: EvalStore,
        access: AdminAccess,
        config: Callable[[], ReleasesConfig],
        changed: Callable[[], Awaitable[None]],
        max_body_bytes: int,
        *,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.registry = registry
        self.evals = evals
        self.access = access
        self.config = config
        self.changed = changed  # follow a change made here at once
        self.max_body_bytes = max_body_bytes
        self.prepare = prepare  # the database migrated, before the first call uses it

    def routes(self) -> list[web.RouteDef]:
        def r(handler: Handler) -> Handler:
            return store_unavailable_is_503(self._prepared(handler))

        return [
            web.post(_PREFIX, r(self.create_model)),
            web.get(_PREFIX, r(self.list_models)),
            web.get(_PREFIX + "/{model}", r(self.show_model)),
            web.post(_PREFIX + "/{model}/versions", r(self.register)),
            web.get(_PREFIX + "/{model}/versions", r(self.list_versions)),
            web.get(_PREFIX + "/{model}/versions/{version}", r(self.show_version)),
            web.get(_PREFIX + "/{model}/versions/{version}/gate", r(self.show_gate)),
            web.post(_PREFIX + "/{model}/versions/{version}/evals", r(self.add_eval)),
            web.get(_PREFIX + "/{model}/versions/{version}/evals", r(self.list_evals)),
            web.get("/admin/registry/evals/{run}", r(self.show_eval)),
            web.post(_PREFIX + "/{model}/promote", r(self.promote)),
            web.post(_PREFIX + "/{model}/rollback", r(self.rollback)),
            web.get(_PREFIX + "/{model}/history", r(self.history)),
        ]

    def _prepared(self, handler: Handler) -> Handler:
        async def run(request: web.Request) -> web.StreamResponse:
            self.access.master(request)  # 401/403 before any database work
            if self.prepare is not None:
                await self.prepare()
            return await handler(request)

        return run

    async def _body(self, request: web.Request) -> dict[str, Any]:
        return await read_json(request, self.max_body_bytes)

    async def create_model(self, request: web.Request) -> web.Response:
        actor = self.access.master(request)
        spec = validate_request(ModelSpec, await self._body(request))
        assert isinstance(spec, ModelSpec)
        model = await self.registry.create_model(spec)
        await self.access.record(actor, "registry.model.create", spec.name, model)
        return json_reply(model, 201)

    async def list_models(self, request: web.Request) -> web.Response:
        self.access.master(request)
        return json_reply({"data": await self.registry.models()})

    async def show_model(self, request: web.Request) -> web.Response:
        self.access.master(request)
        return json_reply(await self.registry.model(request.match_info["model"]))

    async def register(self, request: web.Request) -> web.Response:
        actor = self.access.master(request)
        model = request.match_info["model"]
        spec = validate_request(VersionSpec, await self._body(request))
        assert isinstance(spec, VersionSpec)
        version = await self.registry.register(model, spec)
        await self.access.record(
            actor, "registry.version.register", f"{model}@{version['version']}",
            {"artifact_uri": spec.artifact_uri, "quantization": spec.quantization},
        )  # fmt: skip
        await self.changed()
        return json_reply(version, 201)

    async def list_versions(self, request: web.Request) -> web.Response:
        self.access.master(request)
        model = await self.registry.model(request.match_info["model"])
        return json_reply({"data": model["versions"]})

    async def show_version(self, request: web.Request) -> web.Response:
        self.access.master(request)
        model, version = request.match_info["model"], request.match_info["version"]
        found = await self.registry.version(model, version)
        return json_reply({**found, "evals": await self.evals.runs(model, version)})

    async def gate(self, model: str, version: str) -> GateResult:
        """The gate of ``model`` for ``version`` against production (and its parent)."""
        found = await self.registry.version(model, version)
        stages = await self.registry.stages(model)
        baselines = {"production": stages.get("production"), "parent": found["parent_version"]}
        candidate, measured = await self.evals.gate_metrics(model, version, baselines)
        gate = self.config().gates.get(model)
        return evaluate(gate.rules if gate else (), candidate, measured)

    async def show_gate(self, request: web.Request) -> web.Response:
        self.access.master(request)
        model, version = request.match_info["model"], request.match_info["version"]
        return json_reply(
            {"model": model, "version": version, **(await self.gate(model, version)).to_dict()}
        )

    async def add_eval(self, request: web.Request) -> web.Response:
        actor = self.access.master(request)
        model, version = request.match_info["model"], request.match_info["version"]
        record = validate_request(RunRecord, await self._body(request))
        assert isinstance(record, RunRecord)
        await self.registry.version(model, version)  # 404 for an unknown version
        run = await self.evals.add_run(model, version, record)
        await self.access.record(
            actor, "registry.eval.add", f"{model}@{version}",
            {"run": run["id"], "suite": record.suite, "metrics": record.metrics},
        )  # fmt: skip
        return json_reply(run, 201)

    async def list_evals(self, request: web.Request) -> web.Response:
        self.access.master(request)
        model, version = request.match_info["model"], request.match_info["version"]
        await self.registry.version(model, version)
        return json_reply({"data": await self.evals.runs(model, version)})

    async def show_eval(self, request: web.Request) -> web.Response:
        self.access.master(request)
        return json_reply(await self.evals.run(request.match_info["run"]))

    async def promote(self, request: web.Request) -> web.Response:
        actor = self.access.master(request)
        model = request.match_info["model"]
        body = await self._body(request)
        stage, version = _name(body, "stage"), _name(body, "version")
        expected = _expected(body)
        force = body.get("force", False)
        if not isinstance(force, bool):
            raise InvalidRequest("'force' must be true or false.", param="force")
        unknown = sorted(set(body) - {"stage", "version", "expected", "force"})
        if unknown:
            raise InvalidRequest(f"Unknown field(s): {', '.join(unknown)}.", param=unknown[0])
        return json_reply(await self.move(actor, model, stage, version, expected, force))

    async def move(
        self, actor: Principal, model: str, stage: str, version: str, expected: Any, force: bool
    ) -> dict[str, Any]:
        """Move ``stage`` of ``model`` to ``version`` (gated for production), audited and
        followed at once: what ``POST .../promote`` and the console's form do."""
        detail: dict[str, Any] = {}
        if stage == "production":
            gate = await self.gate(model, version)
            forced = force and gate.verdict != "pass"
            detail = {"gate": gate.verdict, "gate_reason": gate.reason, "forced": forced}
            if gate.verdict != "pass" and not force:
                raise Conflict(
                    f"The gate of '{model}' is {gate.verdict} for '{version}': {gate.reason}. "
                    'Fix it, or promote with "force": true (master key, audited).',
                    code=f"gate_{gate.verdict}",
                )
        moves = await self.registry.promote(
            model, stage, version, actor=actor.key_id, expected=expected, detail=detail
        )
        action = "registry.promote.forced" if detail.get("forced") else "registry.promote"
        reply = {"model": model, "stage": stage, "version": version,
                 "moves": [m.__dict__ for m in moves], **detail}  # fmt: skip
        await self.access.record(actor, action, f"{model}:{stage}", reply)
        await self.changed()
        return reply

    async def rollback(self, request: web.Request) -> web.Response:
        actor = self.access.master(request)
        model = request.match_info["model"]
        body = await self._body(request) if request.can_read_body else {}
        unknown = sorted(set(body) - {"expected"})
        if unknown:
            raise InvalidRequest(f"Unknown field(s): {', '.join(unknown)}.", param=unknown[0])
        return json_reply(await self.roll_back(actor, model, _expected(body)))

    async def roll_back(self, actor: Principal, model: str, expected: Any) -> dict[str, Any]:
        """Production of ``model`` back to ``previous``, audited and followed at once."""
        moves = await self.registry.rollback(model, actor=actor.key_id, expected=expected)
        reply = {"model": model, "moves": [m.__dict__ for m in moves]}
        await self.access.record(actor, "registry.rollback", f"{model}:production", reply)
        await self.changed()
        return reply

    async def history(self, request: web.Request) -> web.Response:
        self.access.master(request)
        raw = request.query.get("limit", "100")
        if not raw.isdigit() or not 1 <= int(raw) <= 1000:
            raise InvalidRequest("'limit' must be an integer within 1..1000.", param="limit")
        entries = await self.registry.history(request.match_info["model"], int(raw))
        return json_reply({"data": [e.to_dict() for e in entries]})


def _name(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value or len(value) > 64:
        raise InvalidRequest(f"'{field}' must be a non-empty string.", param=field)
    if not all(c.isalnum() or c in "._-" for c in value):
        raise InvalidRequest(f"'{field}' may hold letters, digits, '.', '_', '-'.", param=field)
    return value


def _expected(body: dict[str, Any]) -> Any:
    if "expected" not in body:
        return UNSET
    value = body["expected"]
    if value is not None and not isinstance(value, str):
        raise InvalidRequest("'expected' must be a version name or null.", param="expected")
    return value
