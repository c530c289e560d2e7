"""The releases tests' fixtures: a store on SQLite and on the real PostgreSQL, shared with the
tenancy tests rather than copied."""

from tests.tenancy.conftest import db_url

__all__ = ["db_url"]
