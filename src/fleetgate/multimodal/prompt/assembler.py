"""Assemble the model prompt from its parts and fit it into the context window.

Order: system message (system prompt, user profile, retrieved context), the conversation
history, then the current question with its image placeholders. When the window is tight the
history loses its oldest turns first; the system prompt and the question are always kept, and
retrieved context is shed (lowest score first) before the request is refused.

With ``retrieval.mode: document_set`` the system message is the system prompt, then the team's
whole document set, then the profile: every request of the team starts with the same text (its
`shared_prefix`), which an engine's prefix cache serves; a set that does not fit the window
falls back to the top-k chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetgate.errors import ContextWindowExceeded
from fleetgate.multimodal.conversations.store import StoredTurn
from fleetgate.multimodal.prompt.config import PromptConfig
from fleetgate.multimodal.prompt.retrieval import DocumentIndex, DocumentSet, RetrievedChunk
from fleetgate.multimodal.prompt.tokens import ApproxTokenCounter, TokenCounter

__all__ = ["AssembledPrompt", "PromptAssembler"]


@dataclass(slots=True)
class AssembledPrompt:
    """The messages to send, with the accounting behind them."""

    messages: list[dict[str, Any]]
    prompt_tokens: int
    image_tokens: int
    kept_turns: int
    dropped_turns: int
    retrieved: list[RetrievedChunk] = field(default_factory=list)
    context_window: int = 0
    document_set: DocumentSet | None = None  # the team's whole set leads the prompt

    def debug(self) -> dict[str, Any]:
        """What a client sees with the debug flag: every part and its token cost."""
        return {
            "messages": self.messages,
            "prompt_tokens": self.prompt_tokens,
            "image_tokens": self.image_tokens,
            "context_window": self.context_window,
            "history": {"kept_turns": self.kept_turns, "dropped_turns": self.dropped_turns},
            "retrieved": [
                {"doc_id": c.doc_id, "score": round(c.score, 4), "text": c.text}
                for c in self.retrieved
            ],
            "document_set": None
            if self.document_set is None
            else {
                "team": self.document_set.team,
                "version": self.document_set.version,
                "documents": [d for d, _ in self.document_set.documents],
            },
        }


class PromptAssembler:
    """Builds prompts per :class:`PromptConfig`.

    Example::

        assembler = PromptAssembler(config, index=document_index)
        prompt = await assembler.assemble(question="And tomorrow?", history=turns,
                                          profile="Lives in Oslo", team="team-a",
                                          image_tokens=[256], context_window=4096)
        upstream_body["messages"] = prompt.messages
    """

    def __init__(
        self,
        config: PromptConfig,
        *,
        counter: TokenCounter | None = None,
        index: DocumentIndex | None = None,
    ) -> None:
        self.config = config
        self.counter = counter or ApproxTokenCounter()
        self.index = index

    def _tokens(self, message: dict[str, Any]) -> int:
        return self.counter.count(str(message["content"])) + self.counter.message_overhead()

    async def _retrieve(
        self, team: str | None, question: str, wanted: bool | None = None
    ) -> list[RetrievedChunk]:
        cfg = self.config.retrieval
        enabled = cfg.enabled if wanted is None else wanted
        if not enabled or self.index is None or team is None:
            return []
        return await self.index.search(team, question, k=cfg.top_k, min_score=cfg.min_score)

    async def _document_set(self, team: str | None, wanted: bool | None) -> DocumentSet | None:
        cfg = self.config.retrieval
        enabled = cfg.enabled if wanted is None else wanted
        if cfg.mode != "document_set" or not enabled or self.index is None or team is None:
            return None
        return await self.index.document_set(team)

    def _prefix_text(self, doc_set: DocumentSet) -> str:
        """The system message's leading text in document-set mode (the cacheable prefix)."""
        parts = [self.config.system_prompt] if self.config.system_prompt else []
        return "\n\n".join([*parts, _set_block(self.config.retrieval.header, doc_set)])

    async def shared_prefix(self, team: str) -> tuple[DocumentSet, list[dict[str, Any]]] | None:
        """The team's document set and the messages every request of the team starts with
        (document-set mode; None otherwise or without documents), for a KV prewarm."""
        doc_set = await self._document_set(team, None)
        if doc_set is None:
            return None
        return doc_set, [{"role": "system", "content": self._prefix_text(doc_set)}]

    def _system_message(
        self,
        profile: str | None,
        chunks: Sequence[RetrievedChunk],
        doc_set: DocumentSet | None = None,
    ) -> dict[str, Any] | None:
        cfg = self.config
        parts: list[str] = []
        if doc_set is not None:
            parts.append(self._prefix_text(doc_set))
        elif cfg.system_prompt:
            parts.append(cfg.system_prompt)
        if cfg.include_profile and profile:
            parts.append(f"{cfg.profile_header}\n{profile}")
        if chunks and cfg.context_placement == "system":
            parts.append(_context_block(cfg.retrieval.header, chunks))
        return {"role": "system", "content": "\n\n".join(parts)} if parts else None

    def _question_message(
        self, question: str, images: int, chunks: Sequence[RetrievedChunk]
    ) -> dict[str, Any]:
        placeholders = [self.config.image_placeholder.format(index=i) for i in range(images)]
        body = "\n".join([*placeholders, question])
        if chunks and self.config.context_placement == "user":
            body = _context_block(self.config.retrieval.header, chunks) + "\n\n" + body
        return {"role": "user", "content": body}

    async def assemble(
        self,
        *,
        question: str,
        history: Sequence[StoredTurn] = (),
        profile: str | None = None,
        team: str | None = None,
        image_tokens: Sequence[int] = (),
        context_window: int | None = None,
        retrieve: bool | None = None,
    ) -> AssembledPrompt:
        """Build the prompt; raises :class:`ContextWindowExceeded` if even the fixed parts
        (system prompt, question, images, reserved output) do not fit. ``retrieve``: the
        semantic router's decision (None: the alias's ``retrieval.enabled``)."""
        window = context_window or self.config.context_window
        budget = window - self.config.reserve_output_tokens - sum(image_tokens)
        doc_set = await self._document_set(team, retrieve)
        if doc_set is not None:
            system = self._system_message(profile, (), doc_set)
            current = self._question_message(question, len(image_tokens), ())
            fixed = self._tokens(current) + (self._tokens(system) if system else 0)
            if fixed <= budget:
                return self._finish(system, current, history, budget - fixed, image_tokens,
                                    window, (), doc_set)  # fmt: skip
        chunks = await self._retrieve(team, question, retrieve)
        while True:
            system = self._system_message(profile, chunks)
            current = self._question_message(question, len(image_tokens), chunks)
            fixed = self._tokens(current) + (self._tokens(system) if system else 0)
            if fixed <= budget or not chunks:
                break
            chunks = chunks[:-1]  # shed the weakest context before giving up
        if fixed > budget:
            raise ContextWindowExceeded(
                f"prompt needs {fixed + sum(image_tokens)} tokens plus "
                f"{self.config.reserve_output_tokens} for the answer; the window is {window}",
                param="messages",
            )
        return self._finish(system, current, history, budget - fixed, image_tokens, window, chunks)

    def _finish(
        self,
        system: dict[str, Any] | None,
        current: dict[str, Any],
        history: Sequence[StoredTurn],
        room: int,
        image_tokens: Sequence[int],
        window: int,
        chunks: Sequence[RetrievedChunk],
        doc_set: DocumentSet | None = None,
    ) -> AssembledPrompt:
        kept = self._fit_history(history, room)
        messages = ([system] if system else []) + kept + [current]
        return AssembledPrompt(
            messages=messages,
            prompt_tokens=sum(self._tokens(m) for m in messages) + sum(image_tokens),
            image_tokens=sum(image_tokens),
            kept_turns=len(kept),
            dropped_turns=len(history) - len(kept),
            retrieved=list(chunks),
            context_window=window,
            document_set=doc_set,
        )

    def _fit_history(self, history: Sequence[StoredTurn], budget: int) -> list[dict[str, Any]]:
        cfg = self.config
        if not cfg.include_history:
            return []
        candidates = list(history)
        if cfg.max_history_turns is not None:
            candidates = candidates[len(candidates) - cfg.max_history_turns :]
        kept: list[dict[str, Any]] = []
        for turn in reversed(candidates):  # newest first; the oldest fall off
            message = {"role": turn.role, "content": turn.text()}
            cost = self._tokens(message)
            if cost > budget:
                break
            budget -= cost
            kept.append(message)
        kept.reverse()
        return kept


def _set_block(header: str, doc_set: DocumentSet) -> str:
    body = "\n\n".join(f"[{doc_id}] " + "\n".join(chunks) for doc_id, chunks in doc_set.documents)
    return f"{header}\n{body}"


def _context_block(header: str, chunks: Sequence[RetrievedChunk]) -> str:
    body = "\n\n".join(f"[{c.doc_id}] {c.text}" for c in chunks)
    return f"{header}\n{body}"
