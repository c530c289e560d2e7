"""Response caches: exact and semantic, per alias, per team (docs/cache.md)."""
