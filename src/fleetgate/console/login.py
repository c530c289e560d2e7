"""Signing in with a key (master, team admin, finance viewer or plain key) and signing out.

The sign-in form has no session yet, so its CSRF protection is a double-submit token: a
random value in an HTTP-only ``SameSite=Strict`` cookie that the form must echo.
"""

from __future__ import annotations

import secrets

from aiohttp import web

from fleetgate.console.core import Console, home
from fleetgate.console.sessions import COOKIE, LOGIN_COOKIE, SessionsFull
from fleetgate.errors import AuthenticationFailed

__all__ = ["LoginPages", "safe_next"]


def safe_next(value: str | None) -> str | None:
    """A same-site path to go to after signing in (never another origin)."""
    if (
        value
        and len(value) <= 500
        and value.startswith("/ui/")
        and value.isascii()
        and value.isprintable()
        and not any(c in value for c in " \\")
    ):
        return value
    return None


class LoginPages:
    def __init__(self, console: Console) -> None:
        self.console = console

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui", self.root),
            web.get("/ui/", self.root),
            web.get("/ui/login", self.show),
            web.post("/ui/login", self.login),
            web.post("/ui/logout", self.logout),
        ]

    async def root(self, request: web.Request) -> web.Response:
        session = await self.console.session(request)
        if session is None:
            raise web.HTTPFound("/ui/login")
        raise web.HTTPFound(home(session.principal.role))

    def login_form(
        self, request: web.Request, error: str | None = None, status: int = 200
    ) -> web.Response:
        token = secrets.token_urlsafe(24)
        response = self.console.renderer.html(
            "login.html",
            status,
            csrf=token,
            error=error,
            next=safe_next(request.query.get("next")) or "",
            oidc=self.console.config.oidc is not None,
            session=None,
            nav=[],
            here=request.path,
        )
        response.set_cookie(
            LOGIN_COOKIE,
            token,
            path="/ui",
            httponly=True,
            samesite="Strict",
            secure=self.console.secure_cookies(request),
        )
        return response

    async def show(self, request: web.Request) -> web.Response:
        return self.login_form(request)

    async def login(self, request: web.Request) -> web.Response:
        expected = request.cookies.get(LOGIN_COOKIE, "")
        if not expected:
            return self.login_form(request, "Your sign-in form expired; try again.", 403)
        await self.console.check_csrf(request, expected)
        form = await self.console.form(request)
        key = form.get("key", "").strip()
        try:
            principal = self.console.core.auth.authenticate(key)
        except AuthenticationFailed:
            return self.login_form(request, "That key is not valid.", 401)
        name = "master key" if principal.is_master else f"{principal.role} {principal.key_id}"
        try:
            session = await self.console.sessions.open(principal, key, "key", name)
        except SessionsFull as exc:
            return self.login_form(request, exc.message, exc.status)
        await self.console.record(principal, "console.login", principal.key_id, {"via": "key"})
        target = safe_next(form.get("next")) or home(principal.role)
        response = web.HTTPFound(target)
        self.console.set_session_cookie(request, response, session)
        response.del_cookie(LOGIN_COOKIE, path="/ui")
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        session = await self.console.require(request)
        await self.console.sessions.close(session.id)
        response = web.HTTPFound("/ui/login")
        response.del_cookie(COOKIE, path="/")
        raise response
