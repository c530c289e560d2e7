"""`Grant`: what the caller that created a batch was allowed, kept with the batch.

A batch's lines run long after the request that created it, as the key that created it
(`fleetgate.batches.execute`). A caller may be narrower than its key's cache entry: a JWT
bearer is limited and billed as its team (``jwt:<team>``) but its token may name fewer aliases
(``aliases_claim``), a user, and an expiry. The grant keeps that narrowing with the batch (the
``principal`` column) and each line is checked against it through the same check a direct
call passes (`fleetgate.api.state.GatewayState.check_model`), so a line can never reach what
its creator could not: an alias outside the token's is a 404 in the error file, and once the
token has expired the batch stops (its remaining lines fail with ``expired_api_key``).

Example::

    grant = Grant.of(principal)            # when the batch is created
    row["principal"] = grant.to_json()
    ...
    caller = Grant.from_json(row["principal"]).narrow(entry.principal)  # for each line
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fleetgate.contract.principal import Principal

__all__ = ["Grant"]


@dataclass(frozen=True, slots=True)
class Grant:
    allowed_aliases: frozenset[str] | None = None  # None: every alias the key may use
    user_id: str | None = None
    expires_ms: int | None = None  # None: the credential carries no expiry of its own

    @classmethod
    def of(cls, principal: Principal) -> Grant:
        return cls(principal.allowed_aliases, principal.user_id, principal.expires_ms)

    def to_json(self) -> dict[str, Any]:
        aliases = None if self.allowed_aliases is None else sorted(self.allowed_aliases)
        return {"aliases": aliases, "user": self.user_id, "expires_ms": self.expires_ms}

    @classmethod
    def from_json(cls, value: Any) -> Grant | None:
        """The stored grant; None for a batch created before grants were stored."""
        if not isinstance(value, dict):
            return None
        aliases, user, expires = value.get("aliases"), value.get("user"), value.get("expires_ms")
        return cls(
            None if aliases is None else frozenset(str(a) for a in aliases),
            None if user is None else str(user),
            None if expires is None else int(expires),
        )

    def expired(self, now_ms: int) -> bool:
        return self.expires_ms is not None and now_ms >= self.expires_ms

    def narrow(self, principal: Principal) -> Principal:
        """``principal`` (the key's entry now: revocation, team and limits as they are) with
        no more than this grant allowed: the aliases both allow, the grant's user."""
        allowed = principal.allowed_aliases
        if self.allowed_aliases is not None:
            allowed = self.allowed_aliases if allowed is None else allowed & self.allowed_aliases
        expires = principal.expires_ms
        if self.expires_ms is not None:
            expires = self.expires_ms if expires is None else min(expires, self.expires_ms)
        return dataclasses.replace(
            principal,
            allowed_aliases=allowed,
            user_id=self.user_id if self.user_id is not None else principal.user_id,
            expires_ms=expires,
        )
