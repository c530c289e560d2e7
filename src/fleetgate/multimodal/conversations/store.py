"""The conversation store interface."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from fleetgate.messages_text import content_text

__all__ = ["ConversationStore", "StoredTurn"]


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """One message of a conversation. ``content`` is text or OpenAI content parts."""

    role: str
    content: str | list[dict[str, Any]]

    def text(self) -> str:
        """The text of the turn (text parts joined; images and audio left out)."""
        return content_text(self.content, coerce=True)


@runtime_checkable
class ConversationStore(Protocol):
    """Durable conversations, owned by a tenant and a user within it (``user``: an owner such
    as `fleetgate.contract.principal.Principal.owner`; ``None``: shared by the tenant). Every
    call names both, and a conversation of another tenant or owner is "not found"."""

    async def create(
        self, *, tenant: str, user: str | None = None, conversation_id: str | None = None
    ) -> str:
        """Start a conversation; returns its id (``conversation_id`` if given)."""
        ...

    async def append(
        self,
        conversation_id: str,
        turns: Sequence[StoredTurn],
        *,
        tenant: str,
        user: str | None = None,
        request_id: str | None = None,
    ) -> None:
        """Add turns at the end. Replaying the same ``request_id`` adds nothing."""
        ...

    async def history(
        self,
        conversation_id: str,
        *,
        tenant: str,
        user: str | None = None,
        limit: int | None = None,
    ) -> list[StoredTurn]:
        """Turns oldest first (the newest ``limit`` when given)."""
        ...

    async def delete(self, conversation_id: str, *, tenant: str, user: str | None = None) -> None:
        """Remove a conversation and its turns."""
        ...
