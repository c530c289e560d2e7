"""JWT bearer tokens for API callers: a token signed by a configured identity provider stands
in for a virtual key.

Its claims name the team (``team_claim``: a team id or name) and the user (``user_claim``);
the caller is billed and limited as that team (its budget and limits apply: the key cache
holds one entry per team for them, ``jwt:<team id>``), and ``aliases_claim`` (a list) may
narrow the aliases it may use. Validation answers from memory: the JWKS is fetched at start
and every ``refresh_s``.

Example (``extensions.console.jwt``)::

    jwt:
      jwks_url: https://idp.example.com/.well-known/jwks.json
      issuer: https://idp.example.com
      audience: fleetgate
"""

from __future__ import annotations

import logging

import jwt

from fleetgate.console.config import JwtConfig
from fleetgate.console.jwks import JwksKeys, validate
from fleetgate.contract.principal import Principal
from fleetgate.errors import AuthenticationFailed
from fleetgate.resources.outbound import OutboundHttp
from fleetgate.tasks import RunsInBackground, periodic
from fleetgate.tenancy.cache import KeyCache
from fleetgate.tenancy.model import TeamEntry, jwt_key_id

__all__ = ["JwtBearer"]

log = logging.getLogger("fleetgate.console.bearer")


class JwtBearer(RunsInBackground):
    """An `fleetgate.contract.principal.Authenticator` for JWTs (see the module docstring)."""

    def __init__(self, config: JwtConfig, cache: KeyCache, http: OutboundHttp) -> None:
        """``http``: the process's outbound session, for the JWKS (the resource owner closes
        it)."""
        self.config = config
        self.cache = cache
        self.keys = JwksKeys(config.jwks_url)
        self._http = http
        self._task = periodic(
            lambda: self.config.refresh_s,
            self._refresh,
            log,
            "jwt: JWKS refresh failed",
            level=logging.WARNING,
            name="console-jwks",
        )

    def authenticate(self, token: str) -> Principal:
        cfg = self.config
        try:
            claims = validate(
                token,
                self.keys,
                audience=cfg.audience,
                issuer=cfg.issuer,
                http=self._http.session(),
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationFailed("This token has expired.", code="expired_api_key") from None
        except (jwt.PyJWTError, ValueError) as exc:
            raise AuthenticationFailed(f"Invalid token: {exc}.") from None
        ref, user = claims.get(cfg.team_claim), claims.get(cfg.user_claim)
        team = self._team(ref) if isinstance(ref, str) else None
        if team is None:
            raise AuthenticationFailed(f"The token's '{cfg.team_claim}' names no team here.")
        aliases = claims.get(cfg.aliases_claim)
        allowed = (
            frozenset(a for a in aliases if isinstance(a, str))
            if isinstance(aliases, list)
            else None
        )
        return Principal(
            key_id=jwt_key_id(team.id),
            role="user",
            team_id=team.id,
            user_id=str(user)[:100] if user is not None else None,
            allowed_aliases=allowed,
            tags=team.tags,
            expires_ms=_expires_ms(claims.get("exp")),
        )

    def _team(self, ref: str) -> TeamEntry | None:
        snapshot = self.cache.snapshot
        found = snapshot.teams.get(ref)
        if found is None:
            found = next((t for t in snapshot.teams.values() if t.name == ref), None)
        return found

    async def start(self) -> None:
        try:
            await self._refresh()
        except Exception as exc:  # the gateway starts; JWTs are refused until a fetch works
            log.warning("jwt: JWKS %s not fetched at start: %s", self.config.jwks_url, exc)
        await super().start()

    async def _refresh(self) -> None:
        await self.keys.refresh(self._http.session())


def _expires_ms(exp: object) -> int | None:
    """The token's ``exp`` (seconds) in ms; validation already refused an expired one."""
    return int(exp * 1000) if isinstance(exp, int | float) and not isinstance(exp, bool) else None
