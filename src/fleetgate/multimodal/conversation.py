"""Conversations in the request path: load history by ``x-conversation-id``, assemble the
prompt, capture the reply, store both turns after the response.

The client sends only the new turn. Conversation ids are scoped to the caller's tenant and, by
default (``conversations.scope: user``), to its owner (`conversation_owner`: the user a key is
bound to, an identity provider's subject, else the key): the stored id is a hash of tenant,
owner and id, so two teams, or two users of a team, using the same id never meet, and the
store checks the tenant and owner it recorded on every read and write besides. ``scope:
team`` lets every key of a team continue the team's conversations.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetgate.contract.principal import Principal
from fleetgate.contract.request import FilterResult
from fleetgate.errors import InvalidRequest, NotFound
from fleetgate.messages_text import content_text
from fleetgate.multimodal.conversations.store import ConversationStore, StoredTurn
from fleetgate.multimodal.prompt.assembler import AssembledPrompt, PromptAssembler

__all__ = [
    "ConversationTurn",
    "ReplyCapture",
    "assemble_request",
    "conversation_key",
    "conversation_owner",
    "load_history",
]


# Ids of conversations stored before owners were checked (and bound users validated) hashed
# no version: those are not continued, since who made them cannot be told any more.
_KEY_VERSION = "owned"


def conversation_owner(principal: Principal, scope: str) -> str | None:
    """Who owns the conversations ``principal`` starts: `Principal.owner`, or ``None`` (the
    whole tenant) with ``scope: team``."""
    return None if scope == "team" else principal.owner


def conversation_key(tenant: str, conversation_id: str, owner: str | None = None) -> str:
    """The stored id of ``conversation_id`` within ``tenant`` and, unless shared by the team
    (``None``), its ``owner`` (`conversation_owner`): another key of the team cannot read it."""
    if not 0 < len(conversation_id) <= 128 or not conversation_id.isprintable():
        raise InvalidRequest(
            "x-conversation-id must be 1-128 printable characters", param="x-conversation-id"
        )
    parts = [_KEY_VERSION, tenant, *([owner] if owner else []), conversation_id]
    scope = "\0".join(parts)
    return hashlib.sha256(scope.encode("utf-8", "surrogatepass")).hexdigest()[:40]


async def load_history(
    store: ConversationStore, key: str, *, tenant: str, user: str | None, limit: int
) -> list[StoredTurn]:
    """The stored turns (newest ``limit``) of ``user``'s conversation (``None``: the tenant's),
    creating the conversation on its first turn."""
    try:
        return await store.history(key, tenant=tenant, user=user, limit=limit)
    except NotFound:
        try:
            await store.create(tenant=tenant, user=user, conversation_id=key)
        except InvalidRequest:
            pass  # created by a concurrent first turn
        return []


@dataclass(slots=True)
class ConversationTurn:
    """What `after` stores: the question and (filled by `ReplyCapture`) the reply."""

    key: str
    tenant: str
    question: StoredTurn
    reply: list[str] = field(default_factory=list)
    owner: str | None = None  # the conversation's owner within ``tenant`` (None: the tenant)


class ReplyCapture:
    """Collects the assistant's text, from a stream (``StreamFilter``) or a whole response
    (``ResponseFilter``), into ``turn.reply``; passes everything through unchanged."""

    def __init__(self, turn: ConversationTurn) -> None:
        self.turn = turn

    async def feed(self, chunk: dict[str, Any]) -> FilterResult:
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                delta = choice.get("delta")
                text = delta.get("content") if isinstance(delta, dict) else None
                if isinstance(text, str):
                    self.turn.reply.append(text)
        return FilterResult([chunk])

    async def finish(self) -> FilterResult:
        return FilterResult([])

    async def apply(self, response: dict[str, Any]) -> dict[str, Any]:
        choices = response.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            text = message.get("content") if isinstance(message, dict) else None
            if isinstance(text, str):
                self.turn.reply.append(text)
        return response


def _text(content: Any) -> str:
    return content_text(content, coerce=True)


async def assemble_request(
    assembler: PromptAssembler,
    messages: Sequence[dict[str, Any]],
    *,
    stored: Sequence[StoredTurn],
    image_tokens: Sequence[int],
    profile: str | None,
    team: str | None,
    context_window: int | None,
    retrieve: bool | None = None,
) -> AssembledPrompt:
    """Assemble the prompt for a request whose last message is the current question.

    History is ``stored`` plus the request's earlier non-system messages; the request's system
    message is used when the alias config has no system prompt. The images of the question go
    back into its message, after the text with its ``<image_N>`` placeholders.
    """
    if not messages or messages[-1].get("role") != "user":
        raise InvalidRequest("the last message must be the user's question", param="messages")
    current = messages[-1]
    systems = [_text(m.get("content")) for m in messages[:-1] if m.get("role") == "system"]
    earlier = [
        StoredTurn(str(m.get("role")), _text(m.get("content")))
        for m in messages[:-1]
        if m.get("role") in ("user", "assistant")
    ]
    if systems and not assembler.config.system_prompt:
        config = assembler.config.model_copy(update={"system_prompt": "\n\n".join(systems)})
        assembler = PromptAssembler(config, counter=assembler.counter, index=assembler.index)
    prompt = await assembler.assemble(
        question=_text(current.get("content")),
        history=[*stored, *earlier],
        profile=profile,
        team=team,
        image_tokens=image_tokens,
        context_window=context_window,
        retrieve=retrieve,
    )
    content = current.get("content")
    images = (
        [p for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
        if isinstance(content, list)
        else []
    )
    if images:
        last = prompt.messages[-1]
        last["content"] = [{"type": "text", "text": str(last["content"])}, *images]
    return prompt
