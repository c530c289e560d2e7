"""The guardrail interface: checks, verdicts, check points and the context a check sees.

A check is anything with an async ``check(text, ctx) -> Verdict`` and a ``name``; built-in
and third-party checks are the same kind of object (see :mod:`fleetgate.safety.registry`).

Example::

    class NoShouting:
        name = "no_shouting"

        async def check(self, text: str, ctx: CheckContext) -> Verdict:
            if text.isupper():
                return Verdict.block(self.name, ["style"], detail="all caps")
            return Verdict.allow(self.name)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from fleetgate.errors import ContentBlocked

__all__ = [
    "Action",
    "Check",
    "CheckContext",
    "CheckPoint",
    "PolicyDecision",
    "TextTurn",
    "Verdict",
    "close_check",
    "flagged_categories",
    "strongest",
]


class Action(StrEnum):
    """What a verdict asks the caller to do, weakest first."""

    ALLOW = "allow"
    MASK = "mask"
    BLOCK = "block"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Action.ALLOW: 0, Action.MASK: 1, Action.BLOCK: 2}


class CheckPoint(StrEnum):
    """Where in a request's life a check runs (a point of the safety stage, not a
    `fleetgate.contract.stages.Stage`)."""

    INPUT = "input"  # before the upstream call; may block or mask
    STREAM = "stream"  # incrementally over generated text
    OUTPUT = "output"  # over a whole non-streamed response
    AUDIT = "audit"  # asynchronously after the response; never delays the user


@dataclass(frozen=True, slots=True)
class TextTurn:
    """One message of the conversation: ``role`` is ``user`` or ``assistant``."""

    role: str
    content: str


@dataclass(frozen=True, slots=True)
class CheckContext:
    """What a check may know besides the text.

    ``role`` is whose text is checked (``user`` for input, ``assistant`` for output);
    ``history`` holds the earlier turns (guard models judge the last turn in context).
    """

    stage: CheckPoint = CheckPoint.INPUT
    role: str = "user"
    history: Sequence[TextTurn] = ()
    alias: str | None = None
    team: str | None = None
    key_id: str | None = None
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The result of one check on one text.

    ``masked_text`` is set when ``action`` is ``mask``; ``error`` marks a check that could not
    decide (endpoint down, timeout) -- its ``action`` is then the policy's fail mode.
    """

    action: Action
    check: str
    categories: tuple[str, ...] = ()
    score: float = 0.0
    masked_text: str | None = None
    detail: str = ""
    error: bool = False

    @classmethod
    def allow(cls, check: str, *, score: float = 0.0, detail: str = "") -> Verdict:
        return cls(Action.ALLOW, check, score=score, detail=detail)

    @classmethod
    def block(
        cls, check: str, categories: Iterable[str], *, score: float = 1.0, detail: str = ""
    ) -> Verdict:
        return cls(Action.BLOCK, check, tuple(categories), score=score, detail=detail)

    @classmethod
    def mask(
        cls, check: str, categories: Iterable[str], masked_text: str, *, detail: str = ""
    ) -> Verdict:
        return cls(Action.MASK, check, tuple(categories), 1.0, masked_text, detail)

    @classmethod
    def failed(cls, check: str, detail: str, *, action: Action = Action.ALLOW) -> Verdict:
        """A check that could not decide; the caller counts it and applies ``action``."""
        return cls(action, check, ("error",), detail=detail, error=True)

    @property
    def flagged(self) -> bool:
        """True when the check found something (mask or block), errors excluded."""
        return not self.error and self.action is not Action.ALLOW

    def with_action(self, action: Action) -> Verdict:
        return replace(self, action=action)

    def to_dict(self) -> dict[str, Any]:
        """The verdict as audit records and their sinks show it (no score, no masked text)."""
        return {
            "check": self.check,
            "action": self.action.value,
            "categories": list(self.categories),
            "error": self.error,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The outcome of a policy's checks at one check point: the action, the (maybe masked)
    text and every verdict (``reason``: the one that blocked)."""

    action: Action
    text: str
    verdicts: tuple[Verdict, ...] = ()
    reason: Verdict | None = None
    canned_reply: str = ""

    @property
    def blocked(self) -> bool:
        return self.action is Action.BLOCK

    @property
    def categories(self) -> list[str]:
        return flagged_categories(self.verdicts)

    def raise_if_blocked(self) -> None:
        """Raise ContentBlocked (400, code ``content_filter``) when a check blocked."""
        if self.blocked:
            check = self.reason.check if self.reason else "policy"
            cats = ", ".join(self.reason.categories) if self.reason else ""
            raise ContentBlocked(f"Blocked by content policy ({check}: {cats}).")


@runtime_checkable
class Check(Protocol):
    """A guardrail check. Must not raise for content reasons; must not block the loop."""

    name: str

    async def check(self, text: str, ctx: CheckContext) -> Verdict:
        """Judge ``text`` (the newest turn, by ``ctx.role``) and return a verdict."""
        ...


def strongest(verdicts: Iterable[Verdict]) -> Verdict | None:
    """The verdict with the strongest action (first one wins ties), or None if empty."""
    best: Verdict | None = None
    for v in verdicts:
        if best is None or v.action.rank > best.action.rank:
            best = v
    return best


def flagged_categories(verdicts: Iterable[Verdict]) -> list[str]:
    """The categories of the flagged ``verdicts``, each once, in the order they came."""
    out: list[str] = []
    for v in verdicts:
        if v.flagged:
            out.extend(c for c in v.categories if c not in out)
    return out


async def close_check(check: Check) -> None:
    """Close ``check``'s clients and worker threads: its ``aclose`` or its ``close``, if any."""
    aclose = getattr(check, "aclose", None)
    if aclose is not None:
        await aclose()
        return
    close = getattr(check, "close", None)
    if close is not None:
        close()
