"""`Console`: what every page handler shares: sessions, roles, CSRF checks and rendering.

Roles (`fleetgate.contract.principal.Role`): the master key sees every page and team; a team
admin sees and manages only its own team; a finance viewer sees spend only; a plain key may
use the playground.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from fleetgate.console.config import ConsoleConfig
from fleetgate.console.names import Names
from fleetgate.console.render import Renderer
from fleetgate.console.sessions import COOKIE, Session, Sessions, cookie_is_secure, same_token
from fleetgate.contract.principal import Principal
from fleetgate.core import Core, Ports
from fleetgate.errors import (
    AuthenticationFailed,
    FleetgateError,
    PayloadTooLarge,
    PermissionDenied,
)
from fleetgate.http.form import read_form
from fleetgate.routing.ports import CANARY, ENGINE_ROUTING, TABLES
from fleetgate.scheduling.ports import SCHEDULER
from fleetgate.store.errors import is_unreachable
from fleetgate.tenancy.ports import TENANCY
from fleetgate.tenancy.runtime import Tenancy

__all__ = ["ADMINS", "ALL", "Console", "NAV"]

_FORM = web.RequestKey("console_form", dict)  # the posted form, read once per request

ADMINS = ("master", "team_admin")
ALL = ("master", "team_admin", "finance_viewer", "user")

# (path, label, roles that see it)
NAV: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("/ui/overview", "Overview", ADMINS),
    ("/ui/teams", "Teams & keys", ADMINS),
    ("/ui/spend", "Spend", ("master", "team_admin", "finance_viewer")),
    ("/ui/models", "Models", ADMINS),
    ("/ui/registry", "Registry", ("master",)),
    ("/ui/pipelines", "Pipelines", ("master",)),
    ("/ui/queues", "Queues", ADMINS),
    ("/ui/routing", "Routing", ("master",)),
    ("/ui/audit", "Audit log", ADMINS),
    ("/ui/guardrails", "Guardrails", ("master",)),
    ("/ui/insights", "Insights", ADMINS),
    ("/ui/playground", "Playground", ("master", "team_admin", "user")),
)


def home(role: str) -> str:
    """The first page a role may see."""
    return next(path for path, _, roles in NAV if role in roles)


class Console:
    def __init__(self, core: Core, config: ConsoleConfig, ports: Ports) -> None:
        """Takes what it shows from the ports, once: `TENANCY` (needed), the route `TABLES`,
        the `SCHEDULER`'s queues, the `CANARY` splits and `ENGINE_ROUTING` (each None when
        off); signs callers in through ``core``'s authenticator chain and audits through its
        admin access."""
        self.core = core
        self.tables = ports.require(TABLES)
        self.max_request_bytes = core.config.server.max_request_bytes
        self.config = config
        self._tenancy = ports.require(TENANCY)
        self.scheduler = ports.get(SCHEDULER)
        self.canary = ports.get(CANARY)
        self.engine_routing = ports.get(ENGINE_ROUTING)
        self.sessions = Sessions(
            self._tenancy.db,
            config.session_ttl_s,
            config.max_sessions,
            per_principal=config.max_sessions_per_principal,
        )
        self.renderer = Renderer()

    @property
    def tenancy(self) -> Tenancy:
        return self._tenancy

    async def session(self, request: web.Request) -> Session | None:
        """The request's open session (from the database: any replica may have opened it),
        re-checked: a key that was revoked (or expired) since the sign-in ends the session."""
        session = await self.sessions.get(request.cookies.get(COOKIE))
        if session is None or session.via != "key":
            return session
        try:
            principal = self.core.auth.authenticate(session.token)
        except AuthenticationFailed:
            await self.sessions.close(session.id)
            return None
        session.principal = principal
        return session

    async def require(self, request: web.Request, roles: Collection[str] = ALL) -> Session:
        """The session of a caller in one of ``roles``: a page without one redirects to the
        sign-in; a request for data (POST, CSV, fragments) is a 401; a wrong role is a 403."""
        session = await self.session(request)
        if session is None:
            if request.method == "GET" and "HX-Request" not in request.headers:
                raise web.HTTPFound("/ui/login?" + urlencode({"next": request.rel_url.path_qs}))
            raise AuthenticationFailed("Sign in to the console first.")
        if session.principal.role not in roles:
            raise PermissionDenied("Your role may not open this page.")
        if request.method not in ("GET", "HEAD"):
            await self.check_csrf(request, session.csrf)
        elif session.has_flash and "HX-Request" not in request.headers:
            session.flash = await self.sessions.take_flash(session.id)  # shown by this page only
        return session

    async def flash(self, session: Session, message: str, **extra: Any) -> None:
        """A message for the page the next redirect lands on, kept server-side in the session
        (never in the URL) and shown once: a reload does not show it again."""
        await self.sessions.set_flash(session.id, {"message": message, **extra})

    async def confirmed(
        self,
        request: web.Request,
        session: Session,
        *,
        question: str,
        button: str,
        back: str,
    ) -> web.Response | None:
        """None when the posted form says ``confirmed=yes``; else a page asking ``question``
        whose form posts the same fields again, confirmed (no JavaScript needed), with a
        way ``back``."""
        form = await self.form(request)
        if form.get("confirmed") == "yes":
            return None
        fields = {k: v for k, v in form.items() if k not in ("csrf", "confirmed")}
        return self.page(
            request, session, "confirm.html", question=question, button=button, back=back,
            action=request.path, fields=fields,
        )  # fmt: skip

    async def check_csrf(self, request: web.Request, expected: str) -> None:
        """403 unless the request carries ``expected`` (header or form field ``csrf``)."""
        given = request.headers.get("X-CSRF-Token")
        if given is None and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            given = str((await self.form(request)).get("csrf", ""))
        if not same_token(given, expected):
            raise PermissionDenied("Missing or wrong CSRF token; reload the page.")

    async def form(self, request: web.Request) -> dict[str, str]:
        """The posted form's text fields (read once, kept on the request)."""
        if _FORM not in request:
            if (request.content_length or 0) > 1 << 20:
                raise PayloadTooLarge("The form exceeds 1 MiB.")
            request[_FORM] = await read_form(request)  # 400 for a form that cannot be read
        form: dict[str, str] = request[_FORM]
        return form

    def page(
        self,
        request: web.Request,
        session: Session,
        template: str,
        status: int = 200,
        **context: Any,
    ) -> web.Response:
        role = session.principal.role
        return self.renderer.html(
            template,
            status,
            session=session,
            principal=session.principal,
            nav=[(p, label) for p, label, roles in NAV if role in roles],
            here=request.path,
            csrf=session.csrf,
            names=self.names(),
            flash=session.flash,
            **context,
        )

    def names(self) -> Names:
        """Team and key names (with their ids on hover) from the key cache."""
        return Names(self._tenancy.cache.snapshot)

    async def error_page(self, request: web.Request, exc: FleetgateError) -> web.Response:
        """A refused page as a page (the same status), for people rather than programs."""
        try:
            session = await self.sessions.get(request.cookies.get(COOKIE))
        except Exception as err:  # the database is away (the 503 being rendered): no navigation
            if not is_unreachable(err):
                raise
            session = None
        titles = {401: "Sign in first", 403: "Not for your role", 404: "Not found"}
        context: dict[str, Any] = {"session": None, "nav": [], "principal": None, "csrf": "",
                                   "names": self.names(), "flash": None}  # fmt: skip
        if session is not None:
            role = session.principal.role
            context = {
                "session": session, "principal": session.principal, "csrf": session.csrf,
                "nav": [(p, label) for p, label, roles in NAV if role in roles],
                "names": self.names(), "flash": None,
            }  # fmt: skip
        response = self.renderer.html(
            "error.html", exc.status, code=exc.status, here=request.path,
            title=titles.get(exc.status, "Something went wrong"), message=exc.message, **context,
        )  # fmt: skip
        response.headers.update(exc.headers or {})
        return response

    async def record(self, actor: Principal, action: str, target: str, detail: Any) -> None:
        """An entry in the admin audit log (when tenancy keeps one)."""
        await self.core.access.record(actor, action, target, detail)

    def set_session_cookie(
        self, request: web.Request, response: web.StreamResponse, session: Session
    ) -> None:
        response.set_cookie(
            COOKIE,
            session.id,
            max_age=int(self.config.session_ttl_s),
            path="/",
            httponly=True,
            samesite="Lax",
            secure=self.secure_cookies(request),
        )

    def secure_cookies(self, request: web.Request) -> bool:
        """Whether the console's cookies get the ``Secure`` flag (from configuration, else the
        connection: never from the request's Host header alone)."""
        return cookie_is_secure(request, self.config.secure_cookie, self.config.public_url)


def scoped_team(principal: Principal) -> str | None:
    """The team a principal's pages are limited to (None: every team)."""
    return None if principal.is_master or principal.role == "finance_viewer" else principal.team_id
