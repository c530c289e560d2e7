"""Models and deployments: health, cooldowns, in-flight, canary splits and rollout state, the
canary split control the admin API has (``PUT/DELETE /admin/aliases/{alias}/split``), and, with
the disclosure feature on, each alias's registered model name and filing number (read at each
request from the `DISCLOSURE` port, so a reloaded section shows at once)."""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from aiohttp import web

from fleetgate.console.core import ADMINS, Console
from fleetgate.console.forms import NOT_REFUSED, Refusal
from fleetgate.console.sessions import Session
from fleetgate.disclosure.current import Disclosures
from fleetgate.errors import ClientError, InvalidRequest, NotFound, ServiceUnavailable
from fleetgate.routing.canary import Split

__all__ = ["ModelPages", "Rollouts", "placeholder"]

log = logging.getLogger("fleetgate.console")


class Rollouts(Protocol):
    """What the page reads of the releases feature's rollouts."""

    async def all(self) -> list[Any]: ...


def _weights(raw: str) -> dict[str, float]:
    """``v1=90, v2=10`` -> ``{"v1": 90.0, "v2": 10.0}``."""
    out: dict[str, float] = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        version, sep, value = part.partition("=")
        try:
            out[version.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not version.strip():
            raise InvalidRequest("weights are written version=percent, ...", param="weights")
    return out


def placeholder(versions: list[str]) -> str:
    """An example split over the alias's real versions: the first keeps the most traffic
    (``v1=90, v2=10``; ``a=80, b=10, c=10``; one version: ``v1=100``)."""
    if not versions:
        return ""
    rest = 10 if len(versions) <= 10 else 100 // len(versions)
    first = 100 - rest * (len(versions) - 1)
    return ", ".join(f"{v}={first if i == 0 else rest}" for i, v in enumerate(versions))


class ModelPages:
    def __init__(
        self, console: Console, rollouts: Rollouts | None, disclosures: Disclosures | None = None
    ) -> None:
        self.console = console
        self.rollouts = rollouts
        self.disclosures = disclosures  # None: the disclosure feature is off

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui/models", self.page),
            web.post("/ui/models/{alias}/split", self.set_split),
            web.post("/ui/models/{alias}/split/clear", self.clear_split),
        ]

    async def _rollouts(self) -> dict[str, dict[str, Any]]:
        if self.rollouts is None:
            return {}
        try:
            return {r.alias: r.to_dict() for r in await self.rollouts.all()}
        except Exception as exc:  # the registry's store is optional: the page still renders
            log.warning("console: rollouts unavailable: %s", exc)
            return {}

    def _aliases(self, session: Session) -> list[dict[str, Any]]:
        table = self.console.tables.table
        canary = self.console.canary
        now = time.monotonic()
        principal = session.principal
        aliases: dict[str, dict[str, Any]] = {}
        for d in table.deployments():
            if not principal.may_use(d.alias):
                continue
            entry = aliases.setdefault(d.alias, {"alias": d.alias, "deployments": []})
            s = d.state
            entry["deployments"].append({
                "id": d.id, "version": d.version, "healthy": s.healthy(now),
                "cooldown_s": max(0.0, s.cooldown_until - now), "in_flight": s.in_flight,
                "ttft_ms": None if s.ewma_ttft_s is None else s.ewma_ttft_s * 1000,
                "failures": s.consecutive_failures, "last_failure": s.last_failure,
                "requests": s.requests,
            })  # fmt: skip
        for alias, entry in aliases.items():
            split = canary.get(alias) if canary is not None else None
            entry["split"] = split.to_dict() if split is not None else None
            entry["versions"] = sorted({d["version"] for d in entry["deployments"]})
            entry["placeholder"] = placeholder(entry["versions"])
            entry["disclosure"] = (
                self.disclosures.get(alias) if self.disclosures is not None else None
            )
        return sorted(aliases.values(), key=lambda e: e["alias"])

    async def _page(
        self, request: web.Request, session: Session, refusal: Refusal = NOT_REFUSED
    ) -> web.Response:
        return self.console.page(
            request, session, "models.html", refusal.status, aliases=self._aliases(session),
            rollouts=await self._rollouts(), error=refusal.error, refused=refusal.values,
            controls=session.principal.is_master and self.console.canary is not None,
        )  # fmt: skip

    async def page(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        return await self._page(request, session)

    def _alias(self, request: web.Request) -> tuple[str, set[str]]:
        """The alias of the URL and its deployments' versions (404 for no such alias)."""
        alias = request.match_info["alias"]
        versions = {d.version for d in self.console.tables.table.deployments() if d.alias == alias}
        if not versions:
            raise NotFound(f"No alias '{alias}'.", param="alias")
        return alias, versions

    async def set_split(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ("master",))
        canary = self.console.canary
        if canary is None:
            raise ServiceUnavailable("Canary splits are off in this gateway's config.")
        alias, versions = self._alias(request)
        form = await self.console.form(request)
        try:
            split = Split(_weights(form.get("weights", "")), sticky=form.get("sticky") == "on")
            unknown = sorted(set(split.weights) - versions)
            if unknown:
                raise InvalidRequest(
                    f"alias '{alias}' has no deployment of version(s) {', '.join(unknown)}",
                    param="weights",
                )
            split = await canary.set(alias, split)
        except ClientError as exc:
            kept = {"alias": alias, "weights": form.get("weights", ""),
                    "sticky": form.get("sticky", "")}  # fmt: skip
            return await self._page(request, session, Refusal.of(exc, kept))
        await self.console.record(session.principal, "canary.split.put", alias, split.to_dict())
        await self.console.flash(session, f"Split of {alias} set.")
        raise web.HTTPFound("/ui/models")

    async def clear_split(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ("master",))
        canary = self.console.canary
        if canary is None:
            raise ServiceUnavailable("Canary splits are off in this gateway's config.")
        alias, _ = self._alias(request)
        ask = await self.console.confirmed(
            request, session, question=f"Clear the canary split of {alias}?",
            button=f"Clear split of {alias}", back="/ui/models",
        )  # fmt: skip
        if ask is not None:
            return ask
        await canary.clear(alias)
        await self.console.record(session.principal, "canary.split.delete", alias, {})
        await self.console.flash(session, f"Split of {alias} cleared.")
        raise web.HTTPFound("/ui/models")
