"""Teams and keys: list and create teams (master), create keys (shown once) and revoke them.

Every form answers with a redirect (POST-redirect-GET): a reload never creates a second key.
A created key is shown once through the session's flash (server-side, never in the URL). A
refused form comes back with every value kept and the field named by its label; a revoke asks
for confirmation first (`Console.confirmed`, no JavaScript needed).

Everything goes through `fleetgate.tenancy.service.TenancyService`, so the rules (a team admin
manages only its own team, only the master key makes admin keys) and the audit are the admin
API's own.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from fleetgate.console.core import ADMINS, Console
from fleetgate.console.forms import (
    NOT_REFUSED,
    Refusal,
    in_words,
    page_number,
    page_of,
    service_body,
)
from fleetgate.console.sessions import Session
from fleetgate.errors import ClientError

__all__ = ["KeyPages"]


class KeyPages:
    def __init__(self, console: Console) -> None:
        self.console = console

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui/teams", self.teams),
            web.post("/ui/teams", self.create_team),
            web.get("/ui/teams/{team}", self.team),
            web.post("/ui/teams/{team}/keys", self.create_key),
            web.post("/ui/keys/{key_id}/revoke", self.revoke_key),
            web.post("/ui/teams/{team}/limits", self.team_limits),
            web.post("/ui/keys/{key_id}/limits", self.key_limits),
        ]

    async def _teams_page(
        self, request: web.Request, session: Session, refusal: Refusal = NOT_REFUSED
    ) -> web.Response:
        teams = await self.console.tenancy.service.list_teams(session.principal)
        return self.console.page(
            request, session, "teams.html", refusal.status, teams=teams, error=refusal.error,
            values=refusal.values,
        )  # fmt: skip

    async def teams(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        return await self._teams_page(request, session)

    async def create_team(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ("master",))
        form = await self.console.form(request)
        try:
            body = service_body(form, "name")
            team = await self.console.tenancy.service.create_team(session.principal, body)
        except ClientError as exc:
            return await self._teams_page(request, session, Refusal.of(exc, form))
        await self.console.flash(session, f"Team {team['name']} created.")
        raise web.HTTPFound(f"/ui/teams/{team['id']}")

    async def _team_page(
        self,
        request: web.Request,
        session: Session,
        ref: str,
        status: int = 200,
        **extra: Any,
    ) -> web.Response:
        service = self.console.tenancy.service
        team = await service.get_team(session.principal, ref)  # 404: not this admin's team
        keys = await service.list_keys(session.principal, team["id"])
        keys.reverse()  # newest first
        size = self.console.config.page_size
        page = page_number(request.query.get("page"))
        shown, more = page_of(keys, page, size)
        context: dict[str, Any] = {"error": None, "refused": None, "values": None, **extra}
        return self.console.page(
            request, session, "team.html", status, team=team, keys=shown, page=page,
            more=more, total=len(keys), **context,
        )  # fmt: skip

    async def team(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        return await self._team_page(request, session, request.match_info["team"])

    async def create_key(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        ref = request.match_info["team"]
        form = await self.console.form(request)
        try:
            body = service_body(form, "role", "aliases", "user")
            body["team"] = ref
            created = await self.console.tenancy.service.create_key(session.principal, body)
        except ClientError as exc:
            return await self._refused(request, session, ref, exc, "create-key", form)
        # The key is in the flash the next page takes (sealed, then cleared) and nowhere else
        # (only its hash is stored).
        await self.console.flash(
            session,
            f"Key {created['id']} created. Copy it now: it is shown this once and never again.",
            new_key=created["key"],
        )
        raise web.HTTPFound(f"/ui/teams/{created['team_id']}")

    async def _refused(
        self,
        request: web.Request,
        session: Session,
        ref: str,
        exc: ClientError,
        which: str,
        form: dict[str, str],
    ) -> web.Response:
        """The team's page again with the refusal in words and the refused form's values."""
        return await self._team_page(
            request, session, ref, exc.status, error=in_words(exc), refused=which, values=form
        )

    async def team_limits(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ("master",))
        ref = request.match_info["team"]
        form = await self.console.form(request)
        try:
            await self.console.tenancy.service.set_limits(
                session.principal, "team", ref, service_body(form)
            )
        except ClientError as exc:
            return await self._refused(request, session, ref, exc, "team-limits", form)
        await self.console.flash(session, "Team limits saved.")
        raise web.HTTPFound(f"/ui/teams/{ref}")

    async def key_limits(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        form = await self.console.form(request)
        team = _team_ref(form)
        key_id = request.match_info["key_id"]
        try:
            await self.console.tenancy.service.set_limits(
                session.principal, "key", key_id, service_body(form)
            )
        except ClientError as exc:
            if team is None or exc.status == 404:
                raise
            return await self._refused(request, session, team, exc, f"key-limits-{key_id}", form)
        await self.console.flash(session, f"Limits of {key_id} saved.")
        raise web.HTTPFound(f"/ui/teams/{team}" if team else "/ui/teams")

    async def revoke_key(self, request: web.Request) -> web.Response:
        session = await self.console.require(request, ADMINS)
        key_id = request.match_info["key_id"]
        form = await self.console.form(request)
        team = _team_ref(form)
        back = f"/ui/teams/{team}" if team else "/ui/teams"
        ask = await self.console.confirmed(
            request, session, question=f"Revoke key {key_id}?", button=f"Revoke key {key_id}",
            back=back,
        )  # fmt: skip
        if ask is not None:
            return ask
        await self.console.tenancy.service.revoke_key(session.principal, key_id)
        await self.console.flash(session, f"Key {key_id} revoked: it is refused from now on.")
        raise web.HTTPFound(back)


def _team_ref(form: dict[str, str]) -> str | None:
    """The team id a form came from (to go back to its page), if it is one."""
    team = form.get("team", "")
    return team if team.startswith("team_") and team[5:].isalnum() else None
