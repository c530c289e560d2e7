"""Per-alias prompt assembly settings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PromptConfig", "RetrievalConfig"]


class RetrievalConfig(BaseModel):
    """Retrieved context from the team's uploaded documents.

    ``mode``: ``top_k`` puts the chunks closest to the question in the prompt; ``document_set``
    puts the team's whole document set there, right after the system prompt and in a stable
    order, so every request of the team starts with the same prefix (an engine's prefix cache
    serves it; it falls back to ``top_k`` when the set does not fit the window).
    ``prewarm_replicas``: in ``document_set`` mode, how many engines of a kv-aware (or
    pd-disagg) alias are sent the set's prefix when it changes (0: none).
    """

    model_config = ConfigDict(extra="forbid")

    # add context from the team's documents
    enabled: bool = True
    # chunks retrieved at most (1-50)
    top_k: int = Field(default=3, ge=1, le=50)
    # lowest cosine similarity used
    min_score: float = Field(default=0.25, ge=-1.0, le=1.0)
    # line above the retrieved chunks
    header: str = "Use this context if it helps answer:"
    # `top_k`: the chunks closest to the question; `document_set`: the team's whole document set,
    # right after the system prompt, so every request of the team shares that prefix (top-k when the
    # set does not fit the window)
    mode: Literal["top_k", "document_set"] = "top_k"
    # `document_set` mode on a `kv-aware` or `pd-disagg` alias: engines sent the set's prefix when
    # it changes (0-8; 0: no prewarm)
    prewarm_replicas: int = Field(default=1, ge=0, le=8)
    # a set whose prefix is longer is not prewarmed
    prewarm_max_tokens: int = Field(default=32768, ge=1)


class PromptConfig(BaseModel):
    """Which parts make up the prompt, and how.

    Example (YAML, per alias)::

        prompt:
          system_prompt: "You are the support assistant of ACME."
          retrieval: {top_k: 4}
          reserve_output_tokens: 1024
    """

    model_config = ConfigDict(extra="forbid")

    # the system prompt put first
    system_prompt: str | None = None
    # add the request's `user_profile` to the system message
    include_profile: bool = True
    # line above the profile
    profile_header: str = "About the user:"
    # documents retrieved into the prompt of the alias
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    # add the conversation's history
    include_history: bool = True
    # history turns kept at most; none: as many as fit
    max_history_turns: int | None = Field(default=None, ge=0)
    # tokens the assembled prompt and the answer must fit in
    context_window: int = Field(default=8192, gt=0)
    # tokens of the window kept for the answer
    reserve_output_tokens: int = Field(default=512, ge=0)
    # text standing for each image in the question
    image_placeholder: str = "<image_{index}>"
    # where retrieved context goes: `system` message or the `user` question
    context_placement: Literal["system", "user"] = "system"
