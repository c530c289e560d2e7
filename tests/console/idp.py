"""A small OpenID Connect provider for the tests: discovery, an authorize endpoint that signs
in a preset user at once, a token endpoint that checks the PKCE verifier, RS256 tokens and a
JWKS endpoint."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.tenancy.support import served

__all__ = ["LocalIdP", "running_idp"]


@dataclass
class LocalIdP:
    client_id: str = "fleetgate-console"
    audience: str = "fleetgate-api"
    user: dict[str, Any] = field(default_factory=dict)  # the claims of who signs in next
    url: str = ""
    kid: str = "test-key-1"
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    token_requests: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def sign(self, claims: dict[str, Any], *, key: Any = None, kid: str | None = None) -> str:
        now = int(time.time())
        body = {"iss": self.url, "iat": now, "exp": now + 300, **claims}
        return jwt.encode(
            body, key or self.private_key, algorithm="RS256", headers={"kid": kid or self.kid}
        )

    def access_token(self, **claims: Any) -> str:
        return self.sign({"aud": self.audience, "sub": "svc-1", **claims})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self.discovery)
        app.router.add_get("/authorize", self.authorize)
        app.router.add_post("/token", self.token)
        app.router.add_get("/jwks", self.jwks)
        return app

    async def discovery(self, request: web.Request) -> web.Response:
        return web.json_response({
            "issuer": self.url, "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token", "jwks_uri": f"{self.url}/jwks",
            "code_challenge_methods_supported": ["S256"],
        })  # fmt: skip

    async def jwks(self, request: web.Request) -> web.Response:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private_key.public_key()))
        return web.json_response({"keys": [{**public, "kid": self.kid, "use": "sig"}]})

    async def authorize(self, request: web.Request) -> web.Response:
        q = request.query
        assert q["response_type"] == "code" and q["client_id"] == self.client_id
        assert q["code_challenge_method"] == "S256"
        code = secrets.token_urlsafe(16)
        self.codes[code] = {"challenge": q["code_challenge"], "nonce": q["nonce"],
                            "redirect_uri": q["redirect_uri"], "user": dict(self.user)}  # fmt: skip
        raise web.HTTPFound(f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q['state']})}")

    async def token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.token_requests.append(form)
        grant = self.codes.pop(form.get("code", ""), None)
        if grant is None or form.get("redirect_uri") != grant["redirect_uri"]:
            return web.json_response({"error": "invalid_grant"}, status=400)
        digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != grant["challenge"]:
            return web.json_response({"error": "invalid_grant", "why": "pkce"}, status=400)
        user = grant["user"]
        id_token = self.sign({"aud": self.client_id, "nonce": grant["nonce"], **user})
        access = self.access_token(**{k: v for k, v in user.items() if k != "groups"})
        return web.json_response({"access_token": access, "id_token": id_token,
                                  "token_type": "Bearer", "expires_in": 300})  # fmt: skip


@asynccontextmanager
async def running_idp() -> AsyncIterator[LocalIdP]:
    idp = LocalIdP()
    async with served(idp.app()) as url:
        idp.url = url
        yield idp
