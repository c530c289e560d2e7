"""Admin API of the guardrails (master key only).

- ``GET /admin/safety/policies``: every policy in force, the alias and team mappings, and
  which of them are admin overrides (the rest come from the config file).
- ``GET|PUT /admin/safety/policies/{name}``: read, create or replace a policy (the body is a
  policy as in the config: ``{"input": [...], "stream": [...], "actions": {...}, ...}``).
- ``PUT|DELETE /admin/safety/aliases/{alias}``, ``PUT|DELETE /admin/safety/teams/{team}``:
  ``{"policy": "name"}`` attaches a policy (a team by id or name); DELETE drops the override.
- ``GET /admin/safety/audit?limit=100&key_id=&flagged=true``: the newest audit verdicts.

Changes apply to this process at once and to the other workers sharing its data directory
within a second; an invalid change is refused (400) and nothing changes.
"""

from __future__ import annotations

from aiohttp import web

from fleetgate.contract.principal import Principal
from fleetgate.errors import ConfigError, InvalidRequest, NotFound
from fleetgate.http import AdminAccess, json_reply, read_json
from fleetgate.safety.runtime import SafetyRuntime
from fleetgate.safety.sinks import AuditLog

__all__ = ["SafetyAdmin"]

_json = json_reply


async def _policy_ref(request: web.Request) -> str | None:
    body = await read_json(request, 1 << 16)
    policy = body.get("policy")
    if not isinstance(policy, str) or not policy:
        raise InvalidRequest("'policy' must be a policy name", param="policy")
    return policy


class SafetyAdmin:
    """The routes (built only while safety is on: off, the app answers them 503
    ``feature_disabled``, `fleetgate.feature.switched_off_routes`)."""

    def __init__(self, runtime: SafetyRuntime, audit_log: AuditLog, access: AdminAccess) -> None:
        self.runtime = runtime
        self.audit_log = audit_log
        self.access = access

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/safety/policies", self.list_policies),
            web.get("/admin/safety/policies/{name}", self.get_policy),
            web.put("/admin/safety/policies/{name}", self.put_policy),
            web.put("/admin/safety/aliases/{target}", self.put_alias),
            web.delete("/admin/safety/aliases/{target}", self.delete_alias),
            web.put("/admin/safety/teams/{target}", self.put_team),
            web.delete("/admin/safety/teams/{target}", self.delete_team),
            web.get("/admin/safety/audit", self.get_audit),
        ]

    def _runtime(self, request: web.Request) -> tuple[SafetyRuntime, Principal]:
        return self.runtime, self.access.master(request)

    async def list_policies(self, request: web.Request) -> web.Response:
        runtime, _ = self._runtime(request)
        cfg = runtime.config
        return _json({
            "default_policy": cfg.default_policy,
            "policies": {n: p.model_dump(mode="json") for n, p in cfg.policies.items()},
            "aliases": cfg.aliases, "teams": cfg.teams, "overrides": runtime.overrides,
        })  # fmt: skip

    async def get_policy(self, request: web.Request) -> web.Response:
        runtime, _ = self._runtime(request)
        name = request.match_info["name"]
        policy = runtime.config.policies.get(name)
        if policy is None:
            raise NotFound(f"No safety policy '{name}'.")
        return _json({"name": name, **policy.model_dump(mode="json")})

    async def put_policy(self, request: web.Request) -> web.Response:
        runtime, actor = self._runtime(request)
        name = request.match_info["name"]
        body = await read_json(request, 1 << 20)
        try:
            policy = await runtime.put_policy(name, body)
        except ConfigError as exc:
            raise InvalidRequest(exc.message) from None
        await self.access.record(actor, "safety.policy.put", name, body)
        return _json({"name": name, **policy.model_dump(mode="json")})

    async def _map(self, request: web.Request, section: str, value: str | None) -> web.Response:
        runtime, actor = self._runtime(request)
        target = request.match_info["target"]
        change = runtime.map_alias if section == "aliases" else runtime.map_team
        try:
            await change(target, value)
        except ConfigError as exc:
            raise InvalidRequest(exc.message, param="policy") from None
        await self.access.record(actor, f"safety.{section}.put", target, {"policy": value})
        current = getattr(runtime.config, section).get(target)
        return _json({section[:-1]: target, "policy": current})

    async def put_alias(self, request: web.Request) -> web.Response:
        return await self._map(request, "aliases", await _policy_ref(request))

    async def delete_alias(self, request: web.Request) -> web.Response:
        return await self._map(request, "aliases", None)

    async def put_team(self, request: web.Request) -> web.Response:
        return await self._map(request, "teams", await _policy_ref(request))

    async def delete_team(self, request: web.Request) -> web.Response:
        return await self._map(request, "teams", None)

    async def get_audit(self, request: web.Request) -> web.Response:
        """The newest safety audit verdicts (categories, per-check verdicts, failures)."""
        self._runtime(request)
        q = request.query
        try:
            limit = max(1, min(int(q.get("limit", "100")), 1000))
        except ValueError:
            raise InvalidRequest("'limit' must be an integer", param="limit") from None
        flagged = {"true": True, "false": False}.get(q.get("flagged", "").lower())
        key_id = q.get("key_id") or None
        if key_id is not None and "\x00" in key_id:  # no key id has one; PostgreSQL refuses it
            raise InvalidRequest("'key_id' is not a key id", param="key_id")
        rows = await self.audit_log.recent(limit=limit, key_id=key_id, flagged=flagged)
        return _json({"data": rows})
