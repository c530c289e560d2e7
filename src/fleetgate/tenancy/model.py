"""The in-memory view of teams and keys that the request path reads (never the database)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

from fleetgate.contract.principal import Principal

__all__ = [
    "KEY_PREFIX", "KeyEntry", "Limits", "TeamEntry", "hash_key", "jwt_key_id", "key_hint",
    "new_key",
]  # fmt: skip

KEY_PREFIX = "sk-fg-"


def new_key() -> str:
    """A fresh virtual key; it is shown once and only its hash is stored."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """The stored form of a key: hex sha256."""
    return hashlib.sha256(key.encode()).hexdigest()


def jwt_key_id(team_id: str) -> str:
    """The key id that JWT bearer callers of a team are limited and billed under (the key
    cache has an entry for it: no key limits of its own, the team's limits and budget)."""
    return "jwt:" + team_id


def key_hint(key: str) -> str:
    """A recognisable but useless fragment for listings: ``sk-fg-AbCd…wxyz``."""
    return f"{key[: len(KEY_PREFIX) + 4]}...{key[-4:]}"


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits of one scope; ``None`` means unlimited. Budgets are nano-USD per period."""

    rpm: int | None = None
    tpm: int | None = None
    max_parallel: int | None = None
    budget_nusd: int | None = None
    budget_period: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> Limits:
        return cls(
            rpm=row.rpm,
            tpm=row.tpm,
            max_parallel=row.max_parallel,
            budget_nusd=row.max_budget_nusd,
            budget_period=row.budget_period,
        )


@dataclass(frozen=True, slots=True)
class TeamEntry:
    id: str
    name: str
    limits: Limits
    log_payloads: bool = False
    tags: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """A usable key: its principal, its own limits and its team."""

    id: str
    principal: Principal
    limits: Limits
    team: TeamEntry
    expires_ms: int | None = None
    tags: dict[str, str] = field(default_factory=dict)
