"""The tenancy fixtures (a store on SQLite and on the real PostgreSQL, a Redis prefix, a
simulator upstream), shared rather than copied."""

from tests.tenancy.conftest import db_url, redis_prefix, upstream

__all__ = ["db_url", "redis_prefix", "upstream"]
