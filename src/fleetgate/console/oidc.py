"""OpenID Connect sign-in: authorization code flow with PKCE (S256), state and nonce.

``/ui/oidc/start`` sends the browser to the identity provider with a fresh ``state``, ``nonce``
and PKCE challenge; what the callback needs (verifier, nonce, where to go next, expiry) travels
in an HTTP-only cookie sealed (AES-GCM) under a key derived from ``state``, so the callback may
reach any replica (no sign-in state is kept in a process) and opens only in the browser that
started it, with the ``state`` the provider sends back. ``/ui/oidc/callback`` trades the code
(with the verifier) for tokens, validates the ID token against the provider's JWKS (signature,
issuer, audience, expiry, nonce) and maps the user's groups to a console role: ``roles``
(master, finance_viewer) first, else ``teams`` (the team admin of that team). No mapped group:
no session.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
import jwt
import orjson
from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from fleetgate.console.config import OidcConfig
from fleetgate.console.core import Console, home
from fleetgate.console.jwks import JwksKeys, validate
from fleetgate.console.login import safe_next
from fleetgate.contract.principal import Principal
from fleetgate.errors import (
    AuthenticationFailed,
    NotFound,
    PermissionDenied,
    ServiceUnavailable,
)
from fleetgate.resources.outbound import OutboundHttp

__all__ = ["OidcPages", "map_groups"]

STATE_COOKIE = "fg_oidc_state"
PENDING_TTL_S = 600.0


@dataclass(frozen=True, slots=True)
class _Pending:
    verifier: str
    nonce: str
    next: str | None
    redirect_uri: str
    expires_at: float  # wall clock (replicas share it; a monotonic clock is per process)


def _pending_key(state: str) -> bytes:
    return hashlib.sha256(b"fleetgate-oidc-pending:" + state.encode()).digest()


def seal_pending(state: str, pending: _Pending) -> str:
    """The cookie value for a sign-in in progress (URL-safe base64 of nonce + ciphertext)."""
    nonce = os.urandom(12)
    sealed = AESGCM(_pending_key(state)).encrypt(nonce, orjson.dumps(asdict(pending)), None)
    return base64.urlsafe_b64encode(nonce + sealed).decode()


def open_pending(state: str, cookie: str | None) -> _Pending | None:
    """The sign-in sealed in ``cookie`` for ``state``; None when absent, forged, for another
    state, or expired."""
    if not cookie or not state:
        return None
    try:
        raw = base64.urlsafe_b64decode(cookie.encode())
        plain = AESGCM(_pending_key(state)).decrypt(raw[:12], raw[12:], None)
        pending = _Pending(**orjson.loads(plain))
    except (InvalidTag, ValueError, TypeError, binascii.Error, orjson.JSONDecodeError):
        return None
    return pending if pending.expires_at >= time.time() else None


def _challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def map_groups(config: OidcConfig, groups: list[str]) -> tuple[str, str | None] | None:
    """``(role, team ref)`` for a user's groups: the strongest mapped role, else the first
    mapped team's admin; None when no group maps."""
    roles = {config.roles[g] for g in groups if g in config.roles}
    for role in ("master", "finance_viewer"):
        if role in roles:
            return role, None
    team = next((config.teams[g] for g in groups if g in config.teams), None)
    return ("team_admin", team) if team is not None else None


class OidcPages:
    def __init__(self, console: Console, http: OutboundHttp) -> None:
        """``http``: the process's outbound session, for the identity provider (the resource
        owner closes it)."""
        self.console = console
        self._discovery: dict[str, Any] | None = None
        self._keys: JwksKeys | None = None
        self._http = http

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui/oidc/start", self.start),
            web.get("/ui/oidc/callback", self.callback),
        ]

    def _config(self) -> OidcConfig:
        config = self.console.config.oidc
        if config is None:
            raise NotFound("Single sign-on is not configured (extensions.console.oidc).")
        return config

    async def _provider(self, config: OidcConfig) -> dict[str, Any]:
        """The provider's discovery document (fetched once) and its JWKS."""
        http = self._http.session()
        if self._discovery is None or self._discovery.get("issuer") != config.issuer:
            url = config.issuer.rstrip("/") + "/.well-known/openid-configuration"
            try:
                timeout = aiohttp.ClientTimeout(total=config.discovery_timeout_s)
                async with http.get(url, timeout=timeout) as resp:
                    resp.raise_for_status()
                    doc = await resp.json(content_type=None)
                self._keys = JwksKeys(str(doc["jwks_uri"]))
                await self._keys.refresh(http)
            except (aiohttp.ClientError, TimeoutError, KeyError, ValueError) as exc:
                raise ServiceUnavailable(
                    f"The identity provider could not be reached: {exc}"
                ) from None
            self._discovery = doc
        return self._discovery

    def _redirect_uri(self) -> str:
        """Where the provider sends the browser back: from ``public_url`` (configuration),
        never from the request's Host header, which the client chooses."""
        public_url = self.console.config.public_url
        if public_url is None:  # the config refuses oidc without it; kept for a hand-made one
            raise ServiceUnavailable("Single sign-on needs extensions.console.public_url.")
        return public_url + "/ui/oidc/callback"

    async def start(self, request: web.Request) -> web.Response:
        config = self._config()
        provider = await self._provider(config)
        state, verifier, nonce = (secrets.token_urlsafe(32) for _ in range(3))
        redirect_uri = self._redirect_uri()
        pending = _Pending(
            verifier, nonce, safe_next(request.query.get("next")), redirect_uri,
            time.time() + PENDING_TTL_S,
        )  # fmt: skip
        query = urlencode({
            "response_type": "code", "client_id": config.client_id,
            "redirect_uri": redirect_uri, "scope": " ".join(config.scopes), "state": state,
            "nonce": nonce, "code_challenge": _challenge(verifier),
            "code_challenge_method": "S256",
        })  # fmt: skip
        response = web.HTTPFound(f"{provider['authorization_endpoint']}?{query}")
        response.set_cookie(
            STATE_COOKIE, seal_pending(state, pending), max_age=int(PENDING_TTL_S),
            path="/ui/oidc", httponly=True,
            samesite="Lax", secure=self.console.secure_cookies(request),
        )  # fmt: skip
        raise response

    async def callback(self, request: web.Request) -> web.Response:
        config = self._config()
        q = request.query
        if "error" in q:
            raise AuthenticationFailed(f"The identity provider refused: {q['error']}.")
        pending = open_pending(q.get("state", ""), request.cookies.get(STATE_COOKIE))
        if pending is None:
            raise AuthenticationFailed("Unknown or expired sign-in; start again.")
        provider = await self._provider(config)
        tokens = await self._exchange(config, provider, q.get("code", ""), pending)
        assert self._keys is not None
        try:
            claims = validate(
                str(tokens.get("id_token", "")),
                self._keys,
                audience=config.client_id,
                issuer=config.issuer,
                http=self._http.session(),
            )
        except (jwt.PyJWTError, ValueError) as exc:
            raise AuthenticationFailed(f"The ID token is not valid: {exc}.") from None
        if claims.get("nonce") != pending.nonce:
            raise AuthenticationFailed("The ID token's nonce does not match this sign-in.")
        principal, name = await self._principal(config, claims)
        # The playground calls the API with the provider's access token (a JWT bearer).
        token = str(tokens.get("access_token") or tokens.get("id_token"))
        session = await self.console.sessions.open(principal, token, "oidc", name)
        await self.console.record(principal, "console.login", name, {"via": "oidc"})
        response = web.HTTPFound(pending.next or home(principal.role))
        self.console.set_session_cookie(request, response, session)
        response.del_cookie(STATE_COOKIE, path="/ui/oidc")
        raise response

    async def _exchange(
        self, config: OidcConfig, provider: dict[str, Any], code: str, pending: _Pending
    ) -> dict[str, Any]:
        form = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": pending.redirect_uri, "client_id": config.client_id,
                "code_verifier": pending.verifier}  # fmt: skip
        if config.client_secret:
            form["client_secret"] = config.client_secret
        try:
            timeout = aiohttp.ClientTimeout(total=config.discovery_timeout_s)
            async with self._http.session().post(
                str(provider["token_endpoint"]), data=form, timeout=timeout
            ) as resp:
                body = await resp.json(content_type=None)
                if resp.status != 200 or not isinstance(body, dict):
                    raise AuthenticationFailed(f"The identity provider refused the code: {body}")
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ServiceUnavailable(f"The identity provider could not be reached: {exc}") from None
        return body

    async def _principal(self, config: OidcConfig, claims: dict[str, Any]) -> tuple[Principal, str]:
        raw = claims.get(config.groups_claim) or []
        groups = [g for g in raw if isinstance(g, str)] if isinstance(raw, list) else []
        mapped = map_groups(config, groups)
        subject = str(claims.get("sub", ""))
        name = str(claims.get("email") or claims.get("name") or subject)
        if mapped is None:
            raise PermissionDenied(f"{name}: none of your groups has a console role.")
        role, team_ref = mapped
        team_id = None
        if team_ref is not None:
            try:
                team_id = await self.console.tenancy.service.team_id(team_ref)
            except NotFound:
                raise PermissionDenied(f"Your group's team '{team_ref}' does not exist.") from None
        principal = Principal(
            key_id=("oidc:" + subject)[:40],
            role=role,  # type: ignore[arg-type]
            team_id=team_id,
            user_id=subject[:100] or None,
        )
        return principal, name
