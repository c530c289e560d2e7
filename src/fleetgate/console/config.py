"""The console's config section, ``console:`` in the gateway's YAML (`CONSOLE_SECTION`; the
old place, ``extensions.console``, is still read, with a deprecation line in the log).

Example::

    console:
      public_url: https://gateway.example.com   # as browsers reach it (needed with oidc)
      session_ttl_s: 28800
      oidc:                       # sign-in through an identity provider (optional)
        issuer: https://idp.example.com
        client_id: fleetgate
        roles: {platform-admins: master, finance: finance_viewer}
        teams: {team-search: search}      # group -> team (id or name): its team admin
      jwt:                        # JWT bearer tokens for API callers (optional)
        jwks_url: https://idp.example.com/jwks
        audience: fleetgate
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fleetgate.config.sections import Section
from fleetgate.errors import ConfigError

__all__ = ["CONSOLE_SECTION", "ConsoleConfig", "JwtConfig", "OidcConfig", "console_config"]


class OidcConfig(BaseModel):
    """OpenID Connect sign-in (authorization code with PKCE)."""

    model_config = ConfigDict(extra="forbid")

    # the identity provider's issuer URL (its discovery document is read from it)
    issuer: str
    # the console's client id at the identity provider
    client_id: str
    # the client secret, for a confidential client
    client_secret: str | None = None
    # scopes asked for at sign-in
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile", "email", "groups"])
    # the ID token claim that lists the user's groups
    groups_claim: str = "groups"
    # IdP group -> console role (master, finance_viewer)
    roles: dict[str, Literal["master", "finance_viewer"]] = Field(default_factory=dict)
    # IdP group -> team: members become that team's admin
    teams: dict[str, str] = Field(default_factory=dict)
    # time limit of reading the provider's discovery document
    discovery_timeout_s: float = 5.0


class JwtConfig(BaseModel):
    """JWT bearer tokens for API callers, validated against a JWKS (read at start-up)."""

    model_config = ConfigDict(extra="forbid")

    # where the signing keys (JWKS) are read
    jwks_url: str
    # the required `iss` claim (none: not checked)
    issuer: str | None = None
    # the required `aud` claim (none: not checked)
    audience: str | None = None
    # the claim naming the caller's team
    team_claim: str = "team"
    # the claim naming the caller
    user_claim: str = "sub"
    # the claim listing the aliases the caller may use
    aliases_claim: str = "aliases"
    # seconds between re-reads of the JWKS
    refresh_s: float = Field(default=300.0, ge=5)


class ConsoleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # serve the web console at /ui (read at start)
    enabled: bool = True
    # seconds a console session lasts
    session_ttl_s: int = Field(default=8 * 3600, ge=60, le=30 * 86400)
    # Open sessions in all; past it the principal holding the most gives up its oldest, and
    # when everyone holds one the sign-in is refused (no one's only session is ended).
    max_sessions: int = Field(default=10_000, ge=1)
    # Open sessions of one key or IdP subject; past it that principal's own oldest ends.
    max_sessions_per_principal: int = Field(default=10, ge=1)
    # The console's address as browsers reach it (behind a proxy or load balancer: its public
    # name), e.g. https://gateway.example.com. The OIDC redirect URI is built from it (so it
    # is required with ``oidc``) and, with ``secure_cookie: auto``, the cookies' Secure flag
    # follows its scheme; neither ever comes from a request's Host header.
    public_url: str | None = None
    # Secure cookies: always, never (plain-HTTP test rigs), or "auto": the scheme of
    # ``public_url``; without it, Secure unless the connection came in over plain HTTP on a
    # loopback socket (a developer's machine).
    secure_cookie: bool | Literal["auto"] = "auto"
    # rows per page of the console's tables
    page_size: int = Field(default=50, ge=5, le=500)
    # OpenID Connect sign-in; none: sign-in with a key only (read at start)
    oidc: OidcConfig | None = None
    # JWT bearer tokens for API callers; none: keys only (read at start)
    jwt: JwtConfig | None = None

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            url = urlsplit(value)
            port_ok = url.port is None or url.port > 0
        except ValueError:
            port_ok = False
        if not (
            port_ok
            and url.scheme in ("http", "https")
            and url.hostname
            and url.username is None
            and url.password is None
            and not url.query
            and not url.fragment
            and value.isascii()
            and value.isprintable()
        ):
            raise ValueError(
                "public_url must be an http(s) URL such as https://gateway.example.com "
                "(no user, query or fragment)"
            )
        return value.rstrip("/")

    @model_validator(mode="after")
    def _oidc_needs_public_url(self) -> ConsoleConfig:
        if self.oidc is not None and self.public_url is None:
            raise ValueError(
                "oidc needs public_url: the redirect URI the identity provider sends browsers "
                "back to is built from it (never from a request's Host header)"
            )
        return self


CONSOLE_SECTION = Section(
    "console",
    ConsoleConfig,
    reload={"": "live", "enabled": "restart", "oidc": "restart", "jwt": "restart"},
)
"""The ``console`` section (absent: the defaults; ``enabled: false`` switches it off)."""


def console_config(extensions: dict[str, Any]) -> ConsoleConfig:
    """The ``console`` section of a mapping of sections (defaults when absent)."""
    raw = extensions.get("console") or {}
    try:
        return ConsoleConfig.model_validate(raw)
    except ValueError as exc:
        raise ConfigError(f"extensions.console: {exc}") from None
