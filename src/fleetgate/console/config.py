"""The console's config section, ``extensions.console`` in the gateway's YAML.

Example::

    extensions:
      console:
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

from pydantic import BaseModel, ConfigDict, Field

from fleetgate.errors import ConfigError

__all__ = ["ConsoleConfig", "JwtConfig", "OidcConfig", "console_config"]


class OidcConfig(BaseModel):
    """OpenID Connect sign-in (authorization code with PKCE)."""

    model_config = ConfigDict(extra="forbid")

    issuer: str
    client_id: str
    client_secret: str | None = None
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile", "email", "groups"])
    groups_claim: str = "groups"
    # IdP group -> console role (master, finance_viewer) and IdP group -> team (its team admin)
    roles: dict[str, Literal["master", "finance_viewer"]] = Field(default_factory=dict)
    teams: dict[str, str] = Field(default_factory=dict)
    discovery_timeout_s: float = 5.0


class JwtConfig(BaseModel):
    """JWT bearer tokens for API callers, validated against a JWKS (read at start-up)."""

    model_config = ConfigDict(extra="forbid")

    jwks_url: str
    issuer: str | None = None
    audience: str | None = None
    team_claim: str = "team"
    user_claim: str = "sub"
    aliases_claim: str = "aliases"
    refresh_s: float = Field(default=300.0, ge=5)


class ConsoleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    session_ttl_s: int = Field(default=8 * 3600, ge=60, le=30 * 86400)
    # Open sessions in all; past it the principal holding the most gives up its oldest, and
    # when everyone holds one the sign-in is refused (no one's only session is ended).
    max_sessions: int = Field(default=10_000, ge=1)
    # Open sessions of one key or IdP subject; past it that principal's own oldest ends.
    max_sessions_per_principal: int = Field(default=10, ge=1)
    # Secure cookies: always, never (plain-HTTP test rigs), or "auto": unless served over plain
    # HTTP on a loopback address.
    secure_cookie: bool | Literal["auto"] = "auto"
    page_size: int = Field(default=50, ge=5, le=500)
    oidc: OidcConfig | None = None
    jwt: JwtConfig | None = None


def console_config(extensions: dict[str, Any]) -> ConsoleConfig:
    """The ``console`` section of ``extensions`` (defaults when absent)."""
    raw = extensions.get("console") or {}
    try:
        return ConsoleConfig.model_validate(raw)
    except ValueError as exc:
        raise ConfigError(f"extensions.console: {exc}") from None
