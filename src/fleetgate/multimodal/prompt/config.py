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

    enabled: bool = True
    top_k: int = Field(default=3, ge=1, le=50)
    min_score: float = Field(default=0.25, ge=-1.0, le=1.0)
    header: str = "Use this context if it helps answer:"
    mode: Literal["top_k", "document_set"] = "top_k"
    prewarm_replicas: int = Field(default=1, ge=0, le=8)
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

    system_prompt: str | None = None
    include_profile: bool = True
    profile_header: str = "About the user:"
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    include_history: bool = True
    max_history_turns: int | None = Field(default=None, ge=0)
    context_window: int = Field(default=8192, gt=0)
    reserve_output_tokens: int = Field(default=512, ge=0)
    image_placeholder: str = "<image_{index}>"
    context_placement: Literal["system", "user"] = "system"
