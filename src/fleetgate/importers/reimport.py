"""What a re-import may change in a team or key that fleetgate already holds.

An import runs again and again while a migration from LiteLLM goes on; between runs operators
revoke keys, lower budgets and narrow allowlists in fleetgate. A re-import may tighten a row
(LiteLLM blocked the key, lowered a limit) but never loosens one, field by field:

========================  ================================================================
``revoked_ms``            never cleared; set when LiteLLM blocks the key (earliest kept)
``expires_ms``            the earlier of the two (None: never expires)
``rpm``/``tpm``/          the lower of the two (None: unlimited)
``max_parallel``
budget                    the lower, when both count over the same period; else fleetgate's
``aliases``               the models both allow (None: every model); never widened
``role``                  the lesser (``user`` below ``team_admin``)
``team_id``/``user_id``   fleetgate's (a move or user binding made there stands)
team ``name``,            fleetgate's
``log_payloads``
``tags``                  LiteLLM's added to fleetgate's (descriptive only)
``key_hint``              LiteLLM's (descriptive only)
========================  ================================================================

Each value kept over a looser one from LiteLLM is named in a note, so the operator sees what
to raise in fleetgate if the loosening was meant.

Example::

    row, notes = merge_key(existing, imported)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["merge_key", "merge_team"]

_ROLE_RANK = {"user": 0, "team_admin": 1}
_LIMITS = ("rpm", "tpm", "max_parallel")


def _lower(old: int | None, new: int | None) -> int | None:
    """The tighter of two limits where None means no limit."""
    if old is None:
        return new
    if new is None:
        return old
    return min(old, new)


class _Merge:
    def __init__(self, old: Mapping[str, Any], new: dict[str, Any], where: str) -> None:
        self.old = old
        self.row = dict(new)
        self.where = where
        self.notes: list[str] = []

    def keep(self, column: str) -> None:
        self.row[column] = self.old[column]

    def tighter(self, column: str) -> None:
        wanted = self.row[column]
        self.row[column] = _lower(self.old[column], wanted)
        if self.row[column] != wanted:
            self._kept(column, wanted)

    def budget(self) -> None:
        old, new = self.old["max_budget_nusd"], self.row["max_budget_nusd"]
        same_period = self.old["budget_period"] == self.row["budget_period"]
        if new is None or old is not None and (not same_period or old < new):
            if (new, self.row["budget_period"]) != (old, self.old["budget_period"]):
                self._kept("budget", new)
            self.keep("max_budget_nusd")
            self.keep("budget_period")

    def tags(self) -> None:
        self.row["tags"] = {**(self.old["tags"] or {}), **(self.row["tags"] or {})}

    def _kept(self, what: str, wanted: Any) -> None:
        self.notes.append(
            f"{self.where}: fleetgate's {what} kept (LiteLLM has {wanted!r}; "
            "a re-import never loosens what fleetgate holds)"
        )


def merge_key(
    old: Mapping[str, Any], new: dict[str, Any], where: str
) -> tuple[dict[str, Any], list[str]]:
    """The key row to write over ``old`` (its current row) from ``new`` (the import's)."""
    m = _Merge(old, new, where)
    for column in ("id", "created_ms", "team_id", "user_id"):
        m.keep(column)
    for column in (*_LIMITS, "expires_ms"):
        m.tighter(column)
    m.budget()
    m.tags()
    if old["revoked_ms"] is not None:
        m.keep("revoked_ms")  # a revoked key stays revoked
    if _ROLE_RANK.get(old["role"], 0) < _ROLE_RANK.get(new["role"], 0):
        m.keep("role")
    m.row["aliases"] = _narrower(old["aliases"], new["aliases"])
    if m.row["aliases"] != new["aliases"]:
        m._kept("model allowlist", new["aliases"])
    return m.row, m.notes


def merge_team(
    old: Mapping[str, Any], new: dict[str, Any], where: str
) -> tuple[dict[str, Any], list[str]]:
    """The team row to write over ``old`` from ``new``."""
    m = _Merge(old, new, where)
    for column in ("id", "created_ms", "name", "log_payloads"):
        m.keep(column)
    for column in _LIMITS:
        m.tighter(column)
    m.budget()
    m.tags()
    return m.row, m.notes


def _narrower(old: list[str] | None, new: list[str] | None) -> list[str] | None:
    """The models both lists allow (None: every model)."""
    if old is None:
        return new
    if new is None:
        return list(old)
    allowed = set(new)
    return [m for m in old if m in allowed]
