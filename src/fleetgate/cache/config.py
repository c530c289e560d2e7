"""The ``cache:`` section of an alias: its response caches (docs/cache.md).

Example::

    models:
      - alias: support-bot
        cache:
          exact: true            # deterministic requests (temperature 0 or a seed)
          ttl_s: 3600
          semantic: {threshold: 0.92, ttl_s: 600}
          price: {input_per_mtok: 0.0, output_per_mtok: 0.0}   # what a hit is billed at
        deployments: [...]
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fleetgate.config.sections import AliasSection

__all__ = ["CACHE_SECTION", "CacheConfig", "CachePrice", "SemanticCacheConfig"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CachePrice(_Model):
    """USD per million tokens of the answer a hit replays (default: free)."""

    # USD per million prompt tokens a hit is billed at
    input_per_mtok: float = Field(0.0, ge=0)
    # USD per million completion tokens a hit is billed at
    output_per_mtok: float = Field(0.0, ge=0)


class SemanticCacheConfig(_Model):
    """A hit when the prompt's MiniLM embedding is this close (cosine) to a cached one of the
    same team, the same alias and the same earlier turns."""

    # cosine similarity of the prompts' MiniLM embeddings from which it is a hit
    threshold: float = Field(0.92, gt=0, le=1)
    # seconds a semantic entry lives
    ttl_s: float = Field(600.0, gt=0)
    max_entries: int = Field(2000, ge=1)  # per team and alias; the oldest go first


class CacheConfig(_Model):
    # the exact cache, for deterministic requests (temperature 0 or a seed)
    exact: bool = False
    # seconds an exact entry lives
    ttl_s: float = Field(3600.0, gt=0)
    # In-process exact cache (no Redis): entries over every team and alias, least recently
    # used dropped first. Answers longer than ``max_answer_bytes`` are not cached.
    max_entries: int = Field(10_000, ge=1)
    # answers longer than this are not cached
    max_answer_bytes: int = Field(256 * 1024, ge=1)
    # the semantic cache (an answer to a similar prompt); none: off
    semantic: SemanticCacheConfig | None = None
    # what a cache hit is billed at
    price: CachePrice = CachePrice()

    @property
    def enabled(self) -> bool:
        return self.exact or self.semantic is not None


CACHE_SECTION = AliasSection("cache", CacheConfig)
"""The ``cache`` section: response caches of one alias (``models[].cache``), opt-in."""
